"""An in-memory ONNX model handed to a library as a file, its large weights as external data.

Why: OpenVINO's ONNX frontend given ``model.SerializeToString()`` of VGG-19 (575 MB of weights)
spends 2.7 s in protobuf serialization and 4.1 s parsing the bytes back, and the support query,
every candidate measurement and every build pay it again.  Given a file whose weights are
external data it maps them and returns in milliseconds.  onnx's own external-data save
rewrites the proto it is given (the caller's model would lose its weights) and needs a full
copy first (a second 575 MB); here a skeleton proto shares nothing with the caller's and the
weights are written once, straight from the tensors (on VGG-19 the frontend call drops from
6.8 s to about 1 s, most of it writing the file).
"""

from __future__ import annotations

import contextlib
import os
import tempfile

import onnx

from provmap.provenance.weights import is_lazy, raw_view, release, tensor_bytes

_ALIGN = 4096          # offsets of external tensors: page-aligned, so a reader can map them
_MIN_TENSOR = 1024     # smaller tensors stay inside the proto (onnx's default threshold)


def weight_bytes(model: onnx.ModelProto) -> int:
    """Bytes of the initializers (`ByteSize()` walks the whole proto: 1.8 s on VGG-19)."""
    return sum(tensor_bytes(t) for t in model.graph.initializer)


@contextlib.contextmanager
def external_data_file(model: onnx.ModelProto, prefix: str = "provmap-onnx-"):
    """Path of `model` saved as ``model.onnx`` + ``model.data`` in a scratch directory that is
    removed when the block ends; `model` is not modified."""
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
        with open(os.path.join(tmp, "model.data"), "wb") as data:
            for t in src.initializer:
                lazy = is_lazy(t)
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
                e = g.initializer.add()
                e.name, e.data_type, e.doc_string = t.name, t.data_type, t.doc_string
                e.dims.extend(t.dims)
                e.data_location = onnx.TensorProto.EXTERNAL
                for k, v in (("location", "model.data"), ("offset", str(offset)),
                             ("length", str(len(raw) if not lazy else raw.nbytes))):
                    entry = e.external_data.add()
                    entry.key, entry.value = k, v
                del raw
        release()  # the weights just copied out of the user's file need not stay resident
        path = os.path.join(tmp, "model.onnx")
        with open(path, "wb") as f:
            f.write(skel.SerializeToString())
        del skel
        yield path
