"""Quantized values judged in their quantization steps: the one rule for every place that
decides whether two libraries agree (the search's accuracy guard, `provmap compare` and bisect,
bench's err column).

Why steps: libraries round the same real value to neighbouring levels (a tie, a requantization
done in fixed point by one and in float by the other), so one step apart is the expected
agreement of two correct kernels, not a wrong one.  Judged by equality, the accuracy guard
refused OpenVINO's whole-model plan of a QDQ ResNet-50, one step of its last DequantizeLinear
off ONNX Runtime's (issue 51), and the search left out the fastest library.  Why one module:
compare already judged in steps while the guard judged by equality; two copies of the rule had
drifted apart, and a plan compare calls a match must not be one the search refused.

Why the epsilon: a DequantizeLinear's float output (q - zero_point) * scale is rounded to
float32 on each side, so one step of the grid measures 1.0000038 steps, not 1 (issue 51).  For
|q - zero_point| <= 255 each side is off by at most 255 * 2**-24 = 1.5e-5 of a step, for 16-bit
grids by 65535 * 2**-24 = 3.9e-3; STEP_EPSILON covers both and is a hundred times smaller than
the next step, so N + 1 steps never pass for N.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

import numpy as np

from . import DEFAULT_QUANT_STEPS  # noqa: F401  (re-exported: the rule's default N)

if TYPE_CHECKING:
    import onnx

#: Float rounding of a value on the grid, as a fraction of one step (module docstring).
STEP_EPSILON = 1e-2
#: 8-bit integer tensors are quantized activations (QuantizeLinear, QLinearConv,
#: DynamicQuantizeLinear... outputs) whatever produced them: compare's rule since issue 36.
#: Other integer tensors (indices, shapes, argmax) are quantized only where the graph says so.
QUANTIZED = (np.dtype(np.int8), np.dtype(np.uint8))


def step_unit(dtype, step: float | None) -> float | None:
    """One quantization step in the tensor's own units (1 for an integer tensor, the scale for
    a DequantizeLinear's float output), or None: the tensor is not on a quantization grid.
    `step` is the graph's (`grid_steps`); an 8-bit integer tensor is on a grid without it."""
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        return 1.0 if dt in QUANTIZED or step is not None else None
    if dt.kind == "f" and step is not None and np.isfinite(step) and step > 0:
        return float(step)
    return None


def steps_bound(n: int, unit: float = 1.0) -> float:
    """The largest difference that is still `n` steps of size `unit`: the one rule."""
    return (n + STEP_EPSILON) * unit


def in_steps(diff: np.ndarray, unit: float) -> float:
    """The worst difference, in steps of `unit` (what a refusal says)."""
    return float(np.max(diff)) / unit if np.size(diff) else 0.0


def _scales(model: onnx.ModelProto, op_type: str) -> list[tuple[onnx.NodeProto, float]]:
    """(node, its one constant scale) of every `op_type` node whose scale is a finite,
    non-zero scalar (a zero or infinite one leaves the result undefined: compare says so)."""
    from provmap.provenance.bundled.random_weights import constant_values

    nodes = [n for n in model.graph.node if n.op_type == op_type and len(n.input) > 1]
    consts = constant_values(model.graph, {n.input[1] for n in nodes})
    out = []
    for n in nodes:
        scale = consts.get(n.input[1])
        if scale is not None and scale.size == 1:
            v = float(np.abs(scale.astype(np.float64)).ravel()[0])
            if np.isfinite(v) and v > 0:
                out.append((n, v))
    return out


def dequantized_steps(model: onnx.ModelProto) -> dict[str, float]:
    """Tensor -> its step: the float output of a DequantizeLinear with one constant scale.  Its
    values lie on that grid (a uint8 QDQ model one step off, 1/255 = 0.00392, failed compare at
    atol 1e-4: issue 36)."""
    return {n.output[0]: v for n, v in _scales(model, "DequantizeLinear")}


def grid_steps(model: onnx.ModelProto) -> dict[str, float]:
    """Tensor -> the real size of one of its quantization steps: a QuantizeLinear's output and a
    DequantizeLinear's integer input (judged in units of 1: `step_unit`), a DequantizeLinear's
    float output (judged in its scale).  What makes a 16-bit quantized tensor a grid too."""
    out = {n.output[0]: v for n, v in _scales(model, "QuantizeLinear")}
    for n, v in _scales(model, "DequantizeLinear"):
        out.setdefault(n.input[0], v)
    out.update(dequantized_steps(model))
    return _quantizer_inputs(model, _through_selection(model, out))


def _quantizer_inputs(model: onnx.ModelProto, out: dict[str, float]) -> dict[str, float]:
    """`out` plus every float tensor only QuantizeLinear nodes of one scale read (no graph
    output): judged in that scale's steps.  Why: the model keeps nothing of it finer than a step,
    and a neighbour's one-step flip upstream moves it by a fraction of one (0.16 to 0.3 of a step
    after a QDQ ResNet-18's first MaxPool), where atol 1e-4 made bisect blame the Conv after it,
    its reproducer "fails alone: False" (issue 52).  A kernel wrong by more than N steps is still
    caught here, at its own node."""
    quant = {n.output[0]: (n, v) for n, v in _scales(model, "QuantizeLinear")}
    readers: dict[str, set] = {}
    for n in model.graph.node:
        for i in n.input:
            if i:
                q = quant.get(n.output[0]) if n.op_type == "QuantizeLinear" and n.output else None
                readers.setdefault(i, set()).add(
                    q[1] if q is not None and q[0].input[0] == i else None)
    outputs = {o.name for o in model.graph.output}
    for t, scales in readers.items():
        if t not in outputs and t not in out and len(scales) == 1 and None not in scales:
            out[t] = scales.pop()
    return out


#: Ops whose output holds only values of their first input (moved, repeated, or the larger of
#: some), or 0, which is on every grid: a value on the input's grid stays on it, and
#: |max(a) - max(b)| <= max |a - b|, so N steps in stay within N steps out.
_SELECTING = {"MaxPool", "GlobalMaxPool", "ReduceMax", "ReduceMin", "Relu", "Identity",
              "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Slice", "Gather",
              "GatherElements", "GatherND", "Expand", "Tile", "Split", "DepthToSpace",
              "SpaceToDepth"}
#: Only the first output of these is data (MaxPool's second is indices, TopK's too).
_FIRST_ONLY = {"MaxPool"}
#: Ops selecting among all their inputs: on a grid only when every input shares it.
_SELECTING_ALL = {"Concat", "Max", "Min"}


def _through_selection(model: onnx.ModelProto, out: dict[str, float]) -> dict[str, float]:
    """`out` extended along ops that only select values (graph order is topological).  Why:
    quantize_static leaves a QDQ model's MaxPool between a DequantizeLinear and the next
    QuantizeLinear, so its float output is on the Relu's grid; judged by atol, bisect blamed a
    QDQ ResNet-18's MaxPool for one step (0.00635, its scale) that compare passes (issue 52)."""
    for n in model.graph.node:
        if n.domain not in ("", "ai.onnx") or not n.input:
            continue
        if n.op_type in _SELECTING:
            step = out.get(n.input[0])
        elif n.op_type in _SELECTING_ALL:
            grids = {out.get(i) for i in n.input if i}
            step = grids.pop() if len(grids) == 1 else None
        else:
            continue
        if step is None:
            continue
        for o in n.output[:1] if n.op_type in _FIRST_ONLY else n.output:
            if o:
                out.setdefault(o, step)
    return out


_GRIDS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def region_steps(view, sub) -> dict[str, float]:
    """A region's outputs on a quantization grid -> their step, from the whole model's graph
    (read once per view): a region's last QuantizeLinear may sit in it while the
    DequantizeLinear that reads its output does not, so the cut region alone cannot say."""
    grid = _GRIDS.get(view)
    if grid is None:
        grid = _GRIDS[view] = grid_steps(view.model)
    out = {}
    for t in sub.outputs:
        try:
            unit = step_unit(t.dtype, grid.get(t.name))
        except TypeError:  # a dtype numpy does not know (bfloat16 & co): not on a grid
            continue
        if unit is not None:
            out[t.name] = grid.get(t.name, unit)
    return out
