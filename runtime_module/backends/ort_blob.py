"""An ONNX Runtime partition with large weights: its graph and its weights as two files.

Why: protobuf cannot hold a message past 2 GB, so a 1B-parameter decoder's partition
serialized whole was an artifact ORT could not read back ("Wire format was corrupt"); and a
partition held as one `model.onnx` is bytes in memory that ORT copies again (the 1B artifact
ran at 2.0x the weights where ORT's own session on the user's file takes 1.0x).  ONNX's own
answer is external data: the graph in `model.onnx`, each weight at an offset of `model.data`.
From `SPLIT_MIN_BYTES` of weights the artifact keeps both as members, the weights as a staged
file (runtime_module.staged) that loading links to or copies out of the zip; the graph is written beside
it and ORT reads the weights from there (the guard, onnx_guard, allows an external reference
only to exactly `model.data` of the same partition, within its size, so nothing else on the
machine is named).  Below the size a partition stays one `model.onnx`, as earlier artifacts
have it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref

from ..staged import Staged, weight_member

#: Weights from which an ONNX Runtime partition is stored as model.onnx + model.data: at this
#: size the weights are kept on disk (runtime_module.staged) and ORT reads them from the file,
#: as it does from the user's own external-data model.
SPLIT_MIN_BYTES = 64 << 20
DATA = "model.data"


def read_split(model_path: str) -> dict:
    """The two files `onnx_external.external_data_file` wrote, as blob files: the graph as
    bytes, the weights as staged.weight_member keeps them."""
    with open(model_path, "rb") as f:
        graph = f.read()
    return {"model.onnx": graph, DATA: weight_member(os.path.join(os.path.dirname(model_path),
                                                                   DATA), DATA)}


def session_source(files: dict) -> tuple[bytes | str, str | None]:
    """What `InferenceSession` is given for these blob files, and a file or directory to remove
    once the session is made (None: the model's bytes).  A split partition's graph is written
    beside its staged weights (or, for weights given as bytes, both into a fresh private
    directory)."""
    if DATA not in files:
        return bytes(files["model.onnx"]), None
    data = files[DATA]
    if isinstance(data, Staged):
        graph = bytes(files["model.onnx"])
        if data.offset:  # the weights are a member inside the (linked) artifact
            graph = _shifted(graph, data.offset)
        path = data.beside(graph, ".onnx")
        return path, path
    d = tempfile.mkdtemp(prefix="provmap-ort-run-")
    for name in ("model.onnx", DATA):
        fd = os.open(os.path.join(d, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(files[name])
    return os.path.join(d, "model.onnx"), d


def _shifted(graph: bytes, by: int) -> bytes:
    """The graph with every external tensor's offset moved `by` bytes (its `model.data` is now
    the artifact, where the member starts at `by`); onnx_guard checked each reference names
    `model.data` within the member before this runs."""
    import onnx

    from ..onnx_tensors import walk

    model = onnx.ModelProto.FromString(graph)
    for _, kind, t in walk(model):
        if kind == "tensor" and t.data_location == onnx.TensorProto.EXTERNAL:
            entry = next((e for e in t.external_data if e.key == "offset"), None)
            if entry is None:
                entry = t.external_data.add()
                entry.key, entry.value = "offset", "0"
            entry.value = str(int(entry.value) + by)
    return model.SerializeToString()


def live_while(obj, scratch: str | None) -> None:
    """The scratch file or directory of `session_source` lasts as long as `obj` (ORT may read
    it)."""
    if scratch is not None:
        weakref.finalize(obj, _remove, scratch)


def _remove(path: str) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path, True)
    else:
        try:
            os.unlink(path)
        except OSError:
            pass
