"""What ONNX's own shape inference cannot type, asked of someone who can: the interface.

onnx has no schemas for a runtime's own operator domains (ONNX Runtime's com.microsoft: QGemm,
QLinearAdd... which `onnxruntime.quantization` writes in QOperator format), so its inference
stops at the first such node; and it gives up on graph outputs whose shape comes through an
LSTM or a computed Reshape.  Partitioning needs a type for every boundary tensor, and a runtime
that loads the graph knows them.  This floor knows no backend, so it only says what it asks;
the ONNX Runtime answer lives with that backend (provmap.runtime_module.backends.ort_types),
and whoever imports a model on a floor that knows backends passes it in
(provmap.provenance.fold.infer_types, importer.import_onnx, mapper.map_model).  Without one,
types are what ONNX's inference and the declarations give.
"""

from __future__ import annotations

from typing import Protocol

import onnx


class TypeOracle(Protocol):
    def tensor_types(self, light: onnx.ModelProto, names: list[str]) -> dict[str, onnx.TypeProto]:
        """Types of the tensors `names` of `light` (weightless, graph outputs undeclared), asked
        when the model holds operators onnx has no schema for; {} when it cannot tell."""
        ...

    def output_shapes(self, light: onnx.ModelProto, names: list[str]) -> dict[str, onnx.TypeProto]:
        """Fully static types of the graph outputs `names` that ONNX's inference left unshaped
        (it may guess where data decides: the caller weighs it against the declaration)."""
        ...

    def symbolic_types(self, light: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
        """Every tensor's type with its dimensions in the model's own symbols (`seq`,
        `batch*seq`), asked when the model is imported with input dimensions open: ONNX's
        inference forgets a symbol at the first Range or computed Reshape."""
        ...


def unknown_domains(model: onnx.ModelProto) -> set[str]:
    """Operator domains of `model` that onnx has no schema for (ORT's contrib ops, custom ops)."""
    out = set()
    for n in model.graph.node:
        domain = "" if n.domain in ("", "ai.onnx") else n.domain
        if not onnx.defs.has(n.op_type, domain):
            out.add(n.domain)
    return out
