"""The first node whose inputs disagree on a type parameter of its schema.

A ResNet export whose input was declared double beside float weights (the thirteenth
afternoon) cannot run anywhere: ONNX Runtime refuses it at load ("Type parameter (T) of Optype
(Conv) bound to different types").  provmap's inference carried the double on, and the refusal
blamed the graph output's declared type ("correct the output's declared type"), then, once that
was "corrected", ONNX Runtime's missing double Conv kernel.  Neither is the model's fault; the
node is.  Checked once at import, before any other type reasoning, with onnx's own schemas:
ops onnx does not define (com.microsoft's, a vendor's) are left to the backends.
"""

from __future__ import annotations

import onnx

from .util.dtypes import onnx_dtype
from .util.errors import ProvmapError

_STANDARD = ("", "ai.onnx")


def _elem_types(model: onnx.ModelProto, types: dict) -> dict[str, int]:
    out: dict[str, int] = {}
    for vi in list(model.graph.input) + list(model.graph.value_info):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            out[vi.name] = vi.type.tensor_type.elem_type
    for name, tp in types.items():
        if tp is not None and tp.HasField("tensor_type") and tp.tensor_type.elem_type:
            out.setdefault(name, tp.tensor_type.elem_type)
    for t in model.graph.initializer:  # an initializer's own type beats any declaration
        out[t.name] = t.data_type
    return out


def _type_name(t: int) -> str:
    try:
        return onnx_dtype(t)
    except Exception:  # noqa: BLE001 - a type numpy cannot hold: ONNX's own name
        return onnx.TensorProto.DataType.Name(t).lower()


def first_type_clash(model: onnx.ModelProto, types: dict) -> str | None:
    """'ONNX node ... binds T to double (input 'img') and float32 (input 'W')', for the first
    node of the main graph (in order) with such a clash, else None."""
    opset = next((o.version for o in model.opset_import if o.domain in _STANDARD), None)
    if opset is None:
        return None
    elem = _elem_types(model, types)
    for k, node in enumerate(model.graph.node):
        if node.domain not in _STANDARD:
            continue
        try:
            schema = onnx.defs.get_schema(node.op_type, opset, "")
        except Exception:  # noqa: BLE001 - not an op of this opset: the import says so
            continue
        formal = list(schema.inputs)
        if not formal:
            continue
        bound: dict[str, tuple[int, str]] = {}
        for j, name in enumerate(node.input):
            if not name or name not in elem:
                continue
            param = formal[min(j, len(formal) - 1)]  # a variadic last input repeats
            variadic = param.option == onnx.defs.OpSchema.FormalParameterOption.Variadic
            if (j >= len(formal) and not variadic) or (variadic and not param.is_homogeneous):
                break
            tp = param.type_str
            if tp not in {c.type_param_str for c in schema.type_constraints}:
                continue  # a fixed type (tensor(int64)): the backends check those
            first = bound.setdefault(tp, (elem[name], name))
            if first[0] != elem[name]:
                label = f"'{node.name}'" if node.name else f"#{k}"
                return (f"ONNX node {label} ({node.op_type}) binds its type {tp} to "
                        f"{_type_name(first[0])} (input '{first[1]}') and to "
                        f"{_type_name(elem[name])} (input '{name}'); ONNX Runtime refuses "
                        f"such a model too: give both inputs one element type")
    return None


def refuse_type_clash(model: onnx.ModelProto, types: dict) -> None:
    why = first_type_clash(model, types)
    if why:
        raise ProvmapError(why)
