"""The provenance floor knows no backend: ONNX Runtime's typing is given to it from above.

Tensors after an operator onnx has no schema for (com.microsoft's contrib ops) are typed by a
TypeOracle the caller passes (provmap.provenance.type_oracle); ONNX Runtime's lives with its
backend, and the ways a model comes in (load_view, the map) pass it (issue 34)."""

from __future__ import annotations

import ast
from pathlib import Path

from onnx import TensorProto as T, helper as h

from provmap.partition.model_source import load_view
from provmap.provenance.fold import infer_types, static_shape
from provmap.runtime_module.backends.ort_types import ORT_TYPES

ROOT = Path(__file__).resolve().parents[1]
BACKEND_LIBRARIES = {"onnxruntime", "openvino"}


def test_the_provenance_floor_imports_no_backend_library():
    found = []
    for path in sorted((ROOT / "provenance").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            found += [f"{path.relative_to(ROOT)}:{node.lineno} imports {n}" for n in names
                      if n.split(".")[0] in BACKEND_LIBRARIES]
    assert not found, "\n".join(found)


def _contrib_model():
    """x -> com.microsoft Gelu -> g -> Relu -> y: onnx's inference stops at the Gelu."""
    g = h.make_graph(
        [h.make_node("Gelu", ["x"], ["g"], domain="com.microsoft"),
         h.make_node("Relu", ["g"], ["y"])],
        "contrib", [h.make_tensor_value_info("x", T.FLOAT, [1, 4])],
        [h.make_tensor_value_info("y", T.FLOAT, None)])
    opsets = [h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)]
    return h.make_model(g, opset_imports=opsets, ir_version=8)


def test_ort_types_what_onnx_cannot_and_only_when_asked():
    model = _contrib_model()
    assert static_shape(infer_types(model).get("g")) is None
    typed = infer_types(model, type_oracle=ORT_TYPES)
    assert static_shape(typed["g"]) == (1, 4) and static_shape(typed["y"]) == (1, 4)


def test_load_view_imports_with_ort_types():
    view = load_view(_contrib_model())
    assert static_shape(view.imported.onnx_types["g"]) == (1, 4)
