"""A region given only as its cut ONNX model: what ONNX-consuming backends need to build it.

The measuring worker receives each candidate as the cut ONNX model (a `GraphView` is not
picklable).  TVM needs the region as Relax, so the worker re-imports it; ONNX Runtime and
OpenVINO read only the ONNX model, its boundary tensors and its key, and re-importing into
Relax cost them ~0.1-2 s per candidate (1.8 s on VGG-19's classifier) for nothing.  An
`OnnxRegion` offers the part of the `Subgraph` interface those backends use (see
`Backend.needs_relax`), built straight from the bytes the parent cut.
"""

from __future__ import annotations

import onnx

from provmap.provenance.util.dtypes import onnx_dtype

from .graph_view import TensorSpec


class OnnxRegion:
    def __init__(self, model: onnx.ModelProto, key: str, inputs: list[TensorSpec] | None = None,
                 outputs: list[TensorSpec] | None = None):
        self._model = model
        self.key = key
        #: positions of the cut model's nodes: the same numbering `Subgraph.closure` gives the
        #: cut model's nodes, so kernel -> node mappings mean the same thing
        self.closure = list(range(len(model.graph.node)))
        inits = {t.name for t in model.graph.initializer}
        self.inputs = inputs if inputs is not None else [
            _spec(v) for v in model.graph.input if v.name not in inits]
        self.outputs = outputs if outputs is not None else [_spec(v) for v in model.graph.output]

    def onnx_model(self) -> onnx.ModelProto:
        return self._model


def _spec(v: onnx.ValueInfoProto) -> TensorSpec:
    tt = v.type.tensor_type
    dims = tuple(int(d.dim_value) if d.HasField("dim_value") else None for d in tt.shape.dim)
    return TensorSpec(v.name, dims, onnx_dtype(tt.elem_type))
