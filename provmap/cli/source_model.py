"""annotate and overlays write an ONNX model: never over the model the artifact came from,
nor over a file that is not an ONNX model (issue 36: a source model kept with external data,
and an embedded model's weights file, were replaced)."""

from __future__ import annotations

import os

from provmap.provenance.util.errors import ProvmapError


def refuse_source_model(mod, output) -> None:
    """`annotate ART -o m.onnx` over the model ART was compiled from replaced the user's model
    (issue 36): the manifest keeps only its file name, so the file is known by its hash."""
    import hashlib

    if not os.path.isfile(output):
        return
    info = mod.manifest.get("model") or {}
    digest = hashlib.sha256()
    with open(output, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    known = (info.get("sha256"), info.get("derived_sha256"))
    loaded = _loaded_sha256(output)
    if digest.hexdigest() in known or loaded in known:
        raise ProvmapError(f"-o/--output {output} is the model this artifact was compiled from: "
                           "it would be replaced; write the annotated model elsewhere")
    if loaded is None and not _is_onnx(output):
        # the embedded model's own weights file (`annotate -o weights.bin`) is known by no
        # name the artifact keeps: a file that is not an ONNX model is never replaced by one
        raise ProvmapError(f"-o/--output {output} exists and is not an ONNX model (a model's "
                           "external weights, say): an annotated model replaces only an ONNX "
                           "file; write it elsewhere")


def _loaded_sha256(path) -> str | None:
    """The hash artifacts record is of the loaded model (external data read in, serialized
    deterministically), not of the file: a model saved with its weights beside it, or by an
    exporter that orders fields its own way, has other file bytes (annotate -o replaced it)."""
    import onnx

    from provmap.provenance import ids

    try:
        return ids.model_sha256(onnx.load(str(path), load_external_data=True))
    except Exception:  # not an ONNX model, or its data is missing: not the source either
        return None


def _is_onnx(path) -> bool:
    """Whether `path` parses as an ONNX model with a graph (its external data not read)."""
    import onnx

    try:
        m = onnx.load(str(path), load_external_data=False)
    except Exception:  # noqa: BLE001 - not a model: the answer
        return False
    return m.ir_version > 0 and m.HasField("graph")
