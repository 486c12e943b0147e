"""An ONNX Runtime partition too large for one protobuf: its graph and its weights as two files.

Why: protobuf cannot hold a message past 2 GB, so a 1B-parameter decoder's partition
serialized whole was an artifact ORT could not read back ("Wire format was corrupt"), and
before provenance.weights the compile failed serializing it.  ONNX's own answer is external
data: the graph in `model.onnx`, each weight at an offset of `model.data`.  The artifact keeps
both as members; loading writes them into a private scratch directory and ORT reads the
weights from there (the guard, onnx_guard, allows an external reference only to exactly
`model.data` of the same partition, within its size, so nothing else on the machine is
named).  Below the size a partition stays one `model.onnx`, as every earlier artifact has it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref

#: Weights from which an ONNX Runtime partition is stored as model.onnx + model.data.
SPLIT_MIN_BYTES = 1 << 30
DATA = "model.data"


def read_split(model_path: str) -> dict[str, bytes]:
    """The two files `onnx_external.external_data_file` wrote, as blob files."""
    with open(model_path, "rb") as f:
        graph = f.read()
    with open(os.path.join(os.path.dirname(model_path), DATA), "rb") as f:
        data = f.read()
    return {"model.onnx": graph, DATA: data}


def session_source(files: dict) -> tuple[bytes | str, str | None]:
    """What `InferenceSession` is given for these blob files, and the scratch directory holding
    them (None: the model's bytes).  A split partition's files are written into a fresh private
    directory; `live_while` removes it when its runner is collected."""
    if DATA not in files:
        return bytes(files["model.onnx"]), None
    d = tempfile.mkdtemp(prefix="provmap-ort-run-")
    for name in ("model.onnx", DATA):
        fd = os.open(os.path.join(d, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(files[name])
    return os.path.join(d, "model.onnx"), d


def live_while(obj, scratch: str | None) -> None:
    """The scratch directory of `session_source` lasts as long as `obj` (ORT may read it)."""
    if scratch is not None:
        weakref.finalize(obj, shutil.rmtree, scratch, True)
