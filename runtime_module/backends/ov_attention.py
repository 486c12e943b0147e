"""Attention settings, shifts, and reductions over infinities OpenVINO 2026.4 computes wrong.

Found by the corpus step (bench/corpus.py, issue 32) on onnx's own Attention cases, each with
plain OpenVINO wrong too; ov_refusals.py turns them into refusals so greedy and the Collage
search place the node elsewhere:

- Attention (opset 25) with a sliding window (left_window_size / right_window_size >= 0): the
  window is ignored (onnx's test_attention_local_window*, test_attention_bidirectional_window:
  25-100 % of the values off).
- causal Attention with a past key/value cache *and* an attention mask: the causal mask is not
  offset by the past length once the mask is added (the with_past_and_present_qk_matmul_bias
  *_mask_causal cases: 190 of 192 values off; without the mask it is right).
- bfloat16 causal Attention with nonpad_kv_seqlen (test_attention_4d_causal_padded_kv_bf16: off
  by up to 0.70; the float32 and the non-causal bfloat16 cases are right).
- BitShift by a run-time amount (the width or more, or negative, is ONNX's 0, not C's shift).
- ReduceMax / ReduceMin over data that may hold infinities: OpenVINO starts the reduction from
  the lowest (highest) finite value, so a max over -inf only is -3.4e38, not -inf (TVM's bug too,
  see provmap.provenance.converters).  Attention written out with a fully masked row (onnx's
  *_expanded attention cases) then gave NaN where ONNX gives 0.  Refused only where an
  infinity can reach the reduction from a constant of the model (the -inf of a mask): a
  reduction over ordinary activations keeps OpenVINO.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import onnx

from provmap.provenance.util.attrs import node_attr as _attr
from provmap.provenance.weights import to_array

if TYPE_CHECKING:  # pragma: no cover
    from ..graph_view import GraphView


def _present(node, k: int) -> bool:
    return len(node.input) > k and bool(node.input[k])


def wrong_attention(node, view: "GraphView") -> str | None:
    if node.op_type != "Attention" or node.domain not in ("", "ai.onnx"):
        return None
    if _attr(node, "left_window_size", -1) >= 0 or _attr(node, "right_window_size", -1) >= 0:
        return ("OpenVINO's Attention ignores left_window_size/right_window_size (onnx's "
                "test_attention_local_window: 48 of 192 values wrong)")
    causal = bool(_attr(node, "is_causal", 0))
    if causal and _present(node, 3) and _present(node, 4):
        return ("OpenVINO's causal Attention with a past key cache and an attention mask does "
                "not offset the causal mask by the past length (onnx's test_attention_4d_with_"
                "past_and_present_qk_matmul_bias_4d_mask_causal: 190 of 192 values wrong)")
    if causal and _present(node, 6) and view.dtype(node.input[0]) == "bfloat16":
        return ("OpenVINO's bfloat16 causal Attention with nonpad_kv_seqlen computes other "
                "numbers (onnx's test_attention_4d_causal_padded_kv_bf16: off by 0.70)")
    return None


def wrong_shift(node, view: "GraphView") -> str | None:
    """BitShift by an amount outside [0, bits): ONNX gives 0, OpenVINO the C shift (onnx's
    test_bitshift_left_int8_shift_ge_width: 3 of 3 wrong); taken only for a constant amount
    within range."""
    if node.op_type != "BitShift" or len(node.input) < 2:
        return None
    t = view.initializers.get(node.input[1])
    if t is not None:
        v = to_array(t)
        if v.size and 0 <= int(v.min()) and int(v.max()) < v.dtype.itemsize * 8:
            return None
    return ("OpenVINO's BitShift by an amount of the type's width or more (or negative) is not "
            "ONNX's 0 (onnx's test_bitshift_left_int8_shift_ge_width: 3 of 3 wrong); only a "
            "constant amount within range is taken")


def _holds_infinity(t: onnx.TensorProto) -> bool:
    if t.data_type not in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16,
                           onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16):
        return False
    try:
        return bool(np.isinf(to_array(t).astype(np.float32)).any())
    except Exception:
        return False


def infinite_tensors(view: "GraphView") -> set[str]:
    """Tensors an infinity in a constant of the model (initializer, Constant, ConstantOfShape's
    value) may reach, through any node: a may-analysis, in graph order."""
    out = {n for n, t in view.initializers.items() if _holds_infinity(t)}
    for node in view.nodes:
        if node.op_type in ("Constant", "ConstantOfShape"):
            value = _attr(node, "value", None)
            if isinstance(value, onnx.TensorProto) and _holds_infinity(value):
                out.update(o for o in node.output if o)
            continue
        if any(x in out for x in node.input if x):
            out.update(o for o in node.output if o)
    return out


def wrong_reduction(node, infinite: set[str]) -> str | None:
    if node.op_type not in ("ReduceMax", "ReduceMin") or node.domain not in ("", "ai.onnx"):
        return None
    if node.input and node.input[0] in infinite:
        bound = "-3.4e38" if node.op_type == "ReduceMax" else "3.4e38"
        return (f"OpenVINO's {node.op_type} of infinities only gives {bound}, not the infinity, "
                "and an infinity from a constant of the model reaches this one (onnx's "
                "test_attention_23_boolmask_fullymasked_row_nan_robustness_expanded: NaN "
                "where ONNX gives 0)")
    return None
