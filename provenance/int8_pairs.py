"""Integer kernels whose numbers depend on the CPU: u8 x s8 products summed in int16 pairs.

Measured on a 2-core AMD EPYC with AVX2 and no VNNI (2026-11-26): x86 CPUs without VNNI have no
instruction that multiplies uint8 by int8 and accumulates in int32; ONNX Runtime's MLAS and
OpenVINO's oneDNN kernels use `vpmaddubsw`, which adds two adjacent products in *saturating*
int16.  255 * 127 + 255 * 100 does not fit, so a dot product loses up to thousands of integer
steps, and the two libraries saturate on different ops:

- `MatMulInteger` (quantize_dynamic's MatMul): ONNX Runtime saturated a 255-filled input
  against 127/100 weights (1,048,544 instead of 1,852,320), OpenVINO was exact; on
  quantize_dynamic's own convnet OpenVINO lost 1,633 steps on one logit (0.041) and ORT none.
- QDQ `Conv`: OpenVINO saturated (104.85 instead of 207.26), ONNX Runtime did not.

On CPUs with VNNI (`vpdpbusd` accumulates in int32) both are exact.  Nothing in the model is
wrong and neither library is "the" reference, so provmap neither refuses these nodes nor hides
the difference: the import warns once, naming the first such node, and tests judge int8
outputs against ONNX Runtime only where the pair sums cannot saturate (`can_saturate`).
7-bit weights (|w| <= 64, what `quantize_dynamic(..., reduce_range=True)` writes) never do:
255 * 64 * 2 = 32,640 < 32,767.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

from .weights import to_array

#: The largest |weight| whose pair sums with uint8 activations always fit in int16.
SAFE_WEIGHT = 64

#: Activation types whose products take the u8 x s8 path: int8 ones too, since without VNNI
#: oneDNN shifts an int8 source by 128 into uint8 (and compensates after the sum), so a
#: QOperator model's int8 QLinearConv on OpenVINO was 16 steps off ORT (2026-11-27).
_ACTIVATIONS = (TensorProto.UINT8, TensorProto.INT8)

_INTEGER_OPS = {"MatMulInteger": (0, 1), "ConvInteger": (0, 1), "QLinearMatMul": (0, 3),
                "QLinearConv": (0, 3)}
_FLOAT_OPS = {"Conv", "ConvTranspose", "MatMul", "Gemm"}


def _consts(graph: onnx.GraphProto) -> dict[str, onnx.TensorProto]:
    out = {t.name: t for t in graph.initializer}
    for n in graph.node:
        if n.op_type == "Constant" and n.output:
            for a in n.attribute:
                if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
                    out[n.output[0]] = a.t
    return out


def _elem_types(model: onnx.ModelProto) -> dict[str, int]:
    g = model.graph
    out = {vi.name: vi.type.tensor_type.elem_type
           for vi in list(g.input) + list(g.value_info) + list(g.output)
           if vi.type.HasField("tensor_type")}
    out.update({t.name: t.data_type for t in _consts(g).values()})
    for n in g.node:  # what the quantizing ops write, whatever value_info says
        if n.op_type in ("DynamicQuantizeLinear",) and n.output:
            out[n.output[0]] = TensorProto.UINT8
        elif n.op_type in _OUTPUT_ZERO_POINT and n.output:
            # its output has its zero point's type (uint8 when QuantizeLinear omits it): a
            # QOperator model's activations have no value_info, and QLinearConv went unwarned
            k = _OUTPUT_ZERO_POINT[n.op_type]
            zp = n.input[k] if k < len(n.input) else ""
            out[n.output[0]] = out.get(zp, TensorProto.UINT8) if zp else TensorProto.UINT8
    return out


#: The input holding the output's zero point, per quantizing op (QuantizeLinear, QOperator).
_OUTPUT_ZERO_POINT = {"QuantizeLinear": 2, "QLinearConv": 7, "QLinearMatMul": 7,
                      "QLinearAdd": 7, "QLinearMul": 7, "QLinearGlobalAveragePool": 4,
                      "QLinearAveragePool": 4, "QLinearLeakyRelu": 4, "QLinearSigmoid": 4}


def _wide_int8(t: onnx.TensorProto | None) -> bool:
    if t is None or t.data_type != TensorProto.INT8 or t.data_location == TensorProto.EXTERNAL:
        return False
    try:
        w = to_array(t)
    except Exception:
        return False
    return w.size > 0 and int(np.abs(w.astype(np.int16)).max()) > SAFE_WEIGHT


def saturating_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """The nodes computing uint8 x int8 products with weights beyond 7 bits, in graph order."""
    g = model.graph
    consts, types = _consts(g), _elem_types(model)
    producer = {o: n for n in g.node for o in n.output}
    found = []
    for n in g.node:
        if n.domain not in ("", "ai.onnx", "com.microsoft"):
            continue
        if n.op_type in _INTEGER_OPS:
            a, b = (n.input[k] if k < len(n.input) else "" for k in _INTEGER_OPS[n.op_type])
            if types.get(a) in _ACTIVATIONS and _wide_int8(consts.get(b)):
                found.append(n)
        elif n.op_type in _FLOAT_OPS and len(n.input) >= 2:
            act, wt = producer.get(n.input[0]), producer.get(n.input[1])
            if (act is not None and wt is not None and act.op_type == "DequantizeLinear"
                    and wt.op_type == "DequantizeLinear"
                    and types.get(act.input[0]) in _ACTIVATIONS
                    and _wide_int8(consts.get(wt.input[0]))):
                found.append(n)
    return found


def can_saturate(model: onnx.ModelProto) -> bool:
    return bool(saturating_nodes(model))


def saturation_warning(model: onnx.ModelProto) -> list[str]:
    """One import warning for the whole model (none when no node qualifies)."""
    nodes = saturating_nodes(model)
    if not nodes:
        return []
    n = nodes[0]
    more = f" and {len(nodes) - 1} more" if len(nodes) > 1 else ""
    return [f"node '{n.name or n.output[0]}' ({n.op_type}){more} multiplies 8-bit activations by "
            f"int8 weights beyond +-{SAFE_WEIGHT}: on CPUs without VNNI, ONNX Runtime's and "
            "OpenVINO's kernels add such products in saturating int16 pairs, so backends may "
            "differ by many quantization steps (7-bit weights, quantize_dynamic(..., "
            "reduce_range=True), avoid it)"]
