"""An in-memory ONNX model handed to a library as a file, its large weights as external data.

Why: OpenVINO's ONNX frontend given ``model.SerializeToString()`` of VGG-19 (575 MB of weights)
spends 2.7 s in protobuf serialization and 4.1 s parsing the bytes back, and the support query,
every candidate measurement and every build pay it again.  Given a file whose weights are
external data it maps them and returns in milliseconds.  onnx's own external-data save
rewrites the proto it is given (the caller's model would lose its weights) and needs a full
copy first (a second 575 MB); here a skeleton proto shares nothing with the caller's and the
weights are written once, straight from the tensors (on VGG-19 the frontend call drops from
6.8 s to about 1 s, most of it writing the file).

Weights still in the user's file (provenance/weights.py's lazy tensors) need not be written at
all for a reader that takes ONNX Runtime's convention for in-memory external data (location
`*/_ORT_MEM_ADDR_/*`, the offset an address): OpenVINO's frontend copies them out of
provmap's map of the file (whose pages the caller sheds meanwhile, provenance.weights.shedding).
On a 1B-parameter decoder (4 GB) each OpenVINO read had written the 4 GB out again (the support
query, then the build), 4-11 s apiece plus the removal.
"""

from __future__ import annotations

import contextlib
import os
import tempfile

import numpy as np
import onnx

from provmap.provenance.weights import is_lazy, raw_view, release, tensor_bytes

_ALIGN = 4096          # offsets of external tensors: page-aligned, so a reader can map them
_MIN_TENSOR = 1024     # smaller tensors stay inside the proto (onnx's default threshold)
#: ONNX Runtime's location for external data in memory (the offset is the address).
MEM_ADDR = "*/_ORT_MEM_ADDR_/*"


def weight_bytes(model: onnx.ModelProto) -> int:
    """Bytes of the initializers (`ByteSize()` walks the whole proto: 1.8 s on VGG-19)."""
    return sum(tensor_bytes(t) for t in model.graph.initializer)


@contextlib.contextmanager
def external_data_file(model: onnx.ModelProto, prefix: str = "provmap-onnx-",
                       by_address: bool = False):
    """Path of `model` saved as ``model.onnx`` + ``model.data`` in a scratch directory that is
    removed when the block ends; `model` is not modified.  `by_address`: lazy weights are
    referenced at their address in provmap's map (`MEM_ADDR`), valid while the block lasts;
    only for a reader known to honour it."""
    refuse_addresses(model)
    skel = onnx.ModelProto()
    for f in ("ir_version", "producer_name", "producer_version", "domain", "model_version",
              "doc_string"):
        if model.HasField(f):
            setattr(skel, f, getattr(model, f))
    skel.opset_import.extend(model.opset_import)
    skel.metadata_props.extend(model.metadata_props)
    skel.functions.extend(model.functions)
    src, g = model.graph, skel.graph
    g.name, g.doc_string = src.name, src.doc_string
    g.node.extend(src.node)
    g.input.extend(src.input)
    g.output.extend(src.output)
    g.value_info.extend(src.value_info)
    g.sparse_initializer.extend(src.sparse_initializer)
    g.quantization_annotation.extend(src.quantization_annotation)
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        views = []  # what the addresses point into, alive while the reader may read them
        with open(os.path.join(tmp, "model.data"), "wb") as data:
            for t in src.initializer:
                lazy = is_lazy(t)
                if lazy and by_address:
                    view = np.frombuffer(raw_view(t), np.uint8)
                    views.append(view)
                    _external(g.initializer.add(), t, MEM_ADDR, view.ctypes.data, view.nbytes)
                    continue
                if not lazy and (t.data_location == onnx.TensorProto.EXTERNAL
                                 or not t.HasField("raw_data") or tensor_bytes(t) < _MIN_TENSOR):
                    g.initializer.append(t)
                    continue
                raw = raw_view(t) if lazy else t.raw_data  # a weight still in its file: mapped
                offset = data.tell()
                if offset % _ALIGN:
                    data.write(b"\0" * (_ALIGN - offset % _ALIGN))
                    offset = data.tell()
                data.write(raw)
                _external(g.initializer.add(), t, "model.data", offset,
                          len(raw) if not lazy else raw.nbytes)
                del raw
        if not by_address:
            release()  # the weights just copied out of the user's file need not stay resident
        path = os.path.join(tmp, "model.onnx")
        with open(path, "wb") as f:
            f.write(skel.SerializeToString())
        del skel
        try:
            yield path
        finally:
            del views


def refuse_addresses(model: onnx.ModelProto) -> None:
    """ValueError for a tensor of `model` whose external data names a memory address: only
    provmap may (OpenVINO's frontend reads any address a file names: CWE-822).  onnx.load and
    the checker refuse such a file; this covers a proto handed in by a caller."""
    from onnx.external_data_helper import _get_all_tensors

    sparse = [x for s in model.graph.sparse_initializer for x in (s.values, s.indices)]
    for t in (*_get_all_tensors(model), *sparse):
        if (t.data_location == onnx.TensorProto.EXTERNAL and not is_lazy(t) and any(
                e.key == "location" and e.value == MEM_ADDR for e in t.external_data)):
            raise ValueError(f"initializer {t.name!r}: external data location {MEM_ADDR!r} "
                             f"names memory, not a file")


def _external(e: onnx.TensorProto, t: onnx.TensorProto, location: str, offset: int,
              length: int) -> None:
    """`e` made `t`'s reference to `length` bytes at `offset` of `location`."""
    e.name, e.data_type, e.doc_string = t.name, t.data_type, t.doc_string
    e.dims.extend(t.dims)
    point_at(e, location, offset, length)


def point_at(t: onnx.TensorProto, location: str, offset: int, length: int) -> None:
    """`t`'s data made external: `length` bytes at `offset` of `location` (a file beside the
    model, or `MEM_ADDR` and an address)."""
    t.ClearField("raw_data")
    t.data_location = onnx.TensorProto.EXTERNAL
    del t.external_data[:]
    for k, v in (("location", location), ("offset", str(offset)), ("length", str(length))):
        entry = t.external_data.add()
        entry.key, entry.value = k, v
