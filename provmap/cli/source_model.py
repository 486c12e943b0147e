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
    with open(output, "rb") as f:
        data = f.read()
    known = (info.get("sha256"), info.get("derived_sha256"))
    model = parse_model(data)
    loaded = _loaded_sha256(model, output) if model is not None else None
    if hashlib.sha256(data).hexdigest() in known or loaded in known:
        raise ProvmapError(f"-o/--output {output} is the model this artifact was compiled from: "
                           "it would be replaced; write the annotated model elsewhere")
    if model is None:
        # the embedded model's own weights file (`annotate -o weights.bin`) is known by no
        # name the artifact keeps: a file that is not an ONNX model is never replaced by one
        raise ProvmapError(f"-o/--output {output} exists and is not an ONNX model (a model's "
                           "external weights, say): an annotated model replaces only an ONNX "
                           "file; write it elsewhere")


def parse_model(data: bytes):
    """The ONNX model in `data` (its external data not read), or None when it is not one: the
    one test of "is this file an ONNX model" that the output guards share."""
    import onnx

    try:
        m = onnx.load_model_from_string(data)
    except Exception:  # noqa: BLE001 - not a model: the answer
        return None
    return m if m.ir_version > 0 and m.HasField("graph") else None


def _loaded_sha256(model, path) -> str | None:
    """The hash artifacts record is of the loaded model (external data read in, serialized
    deterministically), not of the file: a model saved with its weights beside it, or by an
    exporter that orders fields its own way, has other file bytes (annotate -o replaced it)."""
    from onnx.external_data_helper import load_external_data_for_model

    from provmap.provenance import ids

    try:
        load_external_data_for_model(model, os.path.dirname(os.path.abspath(path)))
        return ids.model_sha256(model)
    except Exception:  # noqa: BLE001 - its data is missing or unsafe: not the source either
        return None
