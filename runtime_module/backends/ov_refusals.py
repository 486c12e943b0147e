"""Nodes OpenVINO's CPU plugin would run with other numbers than the model's, refused by name.

Both rules keep provmap's promise that a backend computes what the model says or declines:

- float64: the CPU plugin has no f64 kernels and converts such nodes to float32 without a word;
  the model's precision is only ever lowered on request.
- com.microsoft QLinearAdd and QLinearMul (what `onnxruntime.quantization.quantize_static` writes
  for Add and Mul in QOperator format): OpenVINO 2026.4's ONNX frontend converts them, but a
  result outside the output type's range wraps around instead of saturating (int8 and uint8;
  measured up to 252 quantization steps off, on every saturating element).  ONNX Runtime, the
  reference implementation of that domain, saturates.  tests/test_published_models.py checks
  plain OpenVINO still does this, so the rule goes when OpenVINO is fixed.
- an int64/uint64 constant outside 32 bits: see ov_int64.py.
- a non-empty result computed from a zero-size tensor (a reduction over nothing): see
  empty_tensors.py.
- Attention's window, causal-with-cache-and-mask and bfloat16 padded settings, and ReduceMax /
  ReduceMin over infinities from the model's constants: see ov_attention.py.
- DFT's axis input, antialiased Resize, NonMaxSuppression at the IoU boundary, RoiAlign's max
  mode and Tile by run-time repeats: see ov_numeric.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..backend import Support
from .empty_tensors import refuse_reductions_over_nothing
from .shared_refusals import refuse_shared
from .ov_int64 import refuse_wide_constants
from .ov_numeric import wrong_numbers
from .ov_attention import infinite_tensors, wrong_attention, wrong_reduction, wrong_shift

if TYPE_CHECKING:  # pragma: no cover
    from ..graph_view import GraphView

#: (domain, op) whose OpenVINO conversion computes wrong numbers (see the module docstring).
WRONG_RESULTS = {("com.microsoft", "QLinearAdd"), ("com.microsoft", "QLinearMul")}


def refuse_wrong_numbers(view: "GraphView", verdicts: dict[int, Support], device: str) -> None:
    """Turn the verdict of each node OpenVINO would compute wrong into a refusal, in place."""
    infinite = None
    for i in view.op_nodes:
        if not verdicts[i].ok:
            continue
        node = view.nodes[i]
        if (node.domain, node.op_type) in WRONG_RESULTS:
            verdicts[i] = Support(False, f"OpenVINO's conversion of {node.domain} {node.op_type} "
                                         "wraps results outside the output type's range around "
                                         "instead of saturating (wrong numbers)")
            continue
        attr_wrong = _wrong_by_attributes(node, view) or wrong_attention(node, view) or \
            wrong_shift(node, view) or wrong_numbers(node, view)
        if not attr_wrong and node.op_type in ("ReduceMax", "ReduceMin"):
            infinite = infinite_tensors(view) if infinite is None else infinite
            attr_wrong = wrong_reduction(node, infinite)
        if attr_wrong:
            verdicts[i] = Support(False, attr_wrong)
            continue
        wide = [x for x in list(node.input) + list(node.output)
                if x and view.dtype(x) == "float64"]
        if wide:
            verdicts[i] = Support(False, f"OpenVINO {device} would compute float64 tensor "
                                         f"'{wide[0]}' in float32 (it has no f64 kernels)")
    refuse_wide_constants(view, verdicts, device)
    refuse_reductions_over_nothing(view, verdicts, "OpenVINO")
    refuse_shared(view, verdicts, "OpenVINO")


def _attr(node, name, default):
    for a in node.attribute:
        if a.name == name:
            return a.s.decode() if a.type == a.STRING else a.i
    return default


def _wrong_by_attributes(node, view) -> str | None:
    """Attribute settings OpenVINO's CPU plugin computes otherwise than ONNX (each found by the
    corpus step, bench/corpus.py, issue 32, with plain OpenVINO wrong too)."""
    if node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type == "SpaceToDepth" and str(_attr(node, "mode", "DCR")).upper() == "CRD":
        return ("OpenVINO orders SpaceToDepth's channels as DCR whatever the mode (onnx's "
                "test_spacetodepth_crd_mode_example: 36 of 48 values wrong)")
    if node.op_type == "Resize" and _attr(node, "mode", "nearest") == "cubic" \
            and _attr(node, "exclude_outside", 0):
        return ("OpenVINO's cubic Resize ignores exclude_outside=1 (onnx's "
                "test_resize_downsample_scales_cubic_A_n0p5_exclude_outside: 7 of 9 wrong)")
    if node.op_type == "Resize" and \
            str(_attr(node, "keep_aspect_ratio_policy", "stretch")) != "stretch":
        return ("OpenVINO's Resize ignores keep_aspect_ratio_policy (onnx's test_resize_"
                "downsample_sizes_nearest_not_larger: shape [1, 1, 1, 3] for [1, 1, 1, 2])")
    if node.op_type == "DFT" and _attr(node, "onesided", 0):
        return ("OpenVINO's onesided DFT returns another shape (onnx's test_dft_rfft: "
                "[1, 6, 10, 1, 2] for [1, 6, 10, 2]; test_dft_irfft_opset19 drops the last axis)")
    if node.op_type == "LSTM" and len(node.input) > 7 and node.input[7]:
        return ("OpenVINO's LSTM with peepholes (input P) computes other numbers (onnx's "
                "test_lstm_with_peepholes: 6 of 6 values off by up to 0.0055)")
    if node.op_type == "TopK" and len(node.output) > 1 and node.output[1] and \
            (view.consumers.get(node.output[1]) or node.output[1] in view.graph_outputs):
        return ("OpenVINO breaks TopK ties in another order than ONNX's lower index first, so "
                "its indices output differs on equal values (onnx's test_top_k_same_values_2d)")
    return None
