"""Zero-size tensors: what each compiled backend may be given, and what it must decline.

A zero in a shape is legal ONNX (an empty sequence, an empty KV cache: `--input-shape
past=1x0x64`) and ONNX Runtime runs it.  A node whose result is empty too computes nothing, and
every backend here returns the right (empty) array.  A node that makes a *non-empty* result
from an empty tensor reduces over nothing, and there the compiled backends go wrong, measured
on OpenVINO 2026.4 and TVM 0.27 (tests/test_zero_size.py):

- ReduceMax over an empty axis: OpenVINO returns -3.4e38 (ONNX says -inf), TVM whatever memory
  it was given; a ReduceSum fused with an Add on TVM returned garbage in some runs, not all;
- Gemm with an empty inner dimension: OpenVINO's CPU plugin fails to compile it.

So OpenVINO and TVM decline such a node, naming the tensor, and a strategy puts it on ONNX
Runtime; the exceptions are ops that only move data (a Concat with an empty part, Shape, Size),
which compute nothing over the empty tensor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..backend import Support

if TYPE_CHECKING:  # pragma: no cover
    from ..graph_view import GraphView

#: Ops that may read an empty tensor and return a non-empty one without reducing over it.
MOVES_DATA = {"Concat", "Shape", "Size", "Identity"}


def _shape(view: "GraphView", tensor: str):
    t = view.known(tensor)
    return None if t is None else t.shape


def _parameter_list(view: "GraphView", position: int, tensor: str, shape) -> bool:
    """An empty 1-D integer tensor after the data input is a list of axes, pads or sizes
    (ReduceSum's empty `axes`: reduce over all, or nothing), not data reduced over."""
    t = view.known(tensor)
    return position > 0 and len(shape) == 1 and t is not None and t.dtype in ("int64", "int32")


def refuse_reductions_over_nothing(view: "GraphView", verdicts: dict[int, Support],
                                   backend: str) -> None:
    """Decline, in place, each accepted node that reads a zero-size tensor and whose result is
    not known to be empty."""
    for i in view.op_nodes:
        v = verdicts.get(i)
        if v is None or not v.ok:
            continue
        node = view.nodes[i]
        if node.op_type in MOVES_DATA and node.domain in ("", "ai.onnx"):
            continue
        empty = next(((x, s) for k, x in enumerate(node.input) if x
                      for s in [_shape(view, x)] if s is not None and 0 in s
                      and not _parameter_list(view, k, x, s)), None)
        if empty is None:
            continue
        outs = [_shape(view, o) for o in node.output if o]
        if outs and all(s is not None and 0 in s for s in outs):
            continue  # nothing to compute: an empty result from an empty input
        x, s = empty
        verdicts[i] = Support(False, f"computes a non-empty result from the zero-size tensor "
                                     f"'{x}' {list(s)}, which {backend} gets wrong (a reduction "
                                     "over nothing); ONNX Runtime runs it")
