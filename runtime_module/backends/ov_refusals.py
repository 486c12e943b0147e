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
- a non-empty result computed from a zero-size tensor (a reduction over nothing): see
  empty_tensors.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..backend import Support
from .empty_tensors import refuse_reductions_over_nothing

if TYPE_CHECKING:  # pragma: no cover
    from ..graph_view import GraphView

#: (domain, op) whose OpenVINO conversion computes wrong numbers (see the module docstring).
WRONG_RESULTS = {("com.microsoft", "QLinearAdd"), ("com.microsoft", "QLinearMul")}


def refuse_wrong_numbers(view: "GraphView", verdicts: dict[int, Support], device: str) -> None:
    """Turn the verdict of each node OpenVINO would compute wrong into a refusal, in place."""
    for i in view.op_nodes:
        if not verdicts[i].ok:
            continue
        node = view.nodes[i]
        if (node.domain, node.op_type) in WRONG_RESULTS:
            verdicts[i] = Support(False, f"OpenVINO's conversion of {node.domain} {node.op_type} "
                                         "wraps results outside the output type's range around "
                                         "instead of saturating (wrong numbers)")
            continue
        wide = [x for x in list(node.input) + list(node.output)
                if x and view.dtype(x) == "float64"]
        if wide:
            verdicts[i] = Support(False, f"OpenVINO {device} would compute float64 tensor "
                                         f"'{wide[0]}' in float32 (it has no f64 kernels)")
    refuse_reductions_over_nothing(view, verdicts, "OpenVINO")
