"""More settings OpenVINO 2026.4 computes otherwise than ONNX, found by the full corpus step.

Each one was wrong in the full corpus step (bench/corpus.py, issue 32, 2022 cases) with plain
OpenVINO wrong too (the DFT one plain OpenVINO fails on at run time); ov_refusals.py turns them
into refusals so greedy and the Collage search place the node elsewhere:

- DFT in its opset-20 form (axis as an input): OpenVINO's frontend ignores the axis input and
  always transforms axis 1 (onnx's test_dft_axis, axis 2: 196 of 200 values wrong; a constant
  axis 2 measured the same).  Taken only where the axis is known to be 1: a constant 1 (or its
  negative form), or no axis input with a rank-3 signal (opset 20's default -2 is then 1).
  The opset-19 attribute form (and its default 1) is right.
- Resize with antialias=1 (linear or cubic): OpenVINO downsamples without ONNX's widened filter
  (onnx's test_resize_downsample_{scales,sizes}_{linear,cubic}_antialias: up to 0.53 off).
- NonMaxSuppression: a box whose IoU with a kept box equals iou_threshold is suppressed, where
  ONNX suppresses only above it (onnx's test_nonmaxsuppression_iou_threshold_boundary: 1 box
  for 2).  Whether boxes land on the boundary is known only at run time, so every
  NonMaxSuppression is refused.
- RoiAlign with mode=max (TVM is wrong the same way, see provenance/converters_numeric.py):
  other numbers than ONNX's (onnx's test_roialign_mode_max: 71 of 75 off by up to 0.40).
- Tile of 4 or more dimensions by repeats given at run time: where three or more axes repeat,
  elements come out as garbage (onnx's test_tile, repeats [7, 6, 4, 2]: values up to 3e32; of
  the 1/2 repeats over [2, 3, 4, 5], [1, 2, 2, 2] and [2, 2, 2, 2]).  Constant repeats, and
  every 1/2 repeat over 2 or 3 dimensions (test_tile_precomputed), are right; the run-time
  repeats are not known at compile time, so 4+ dimensions by run-time repeats are refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING


from provmap.provenance.util.attrs import node_attr as _attr
from provmap.provenance.weights import to_array

if TYPE_CHECKING:  # pragma: no cover
    from ..graph_view import GraphView


def _constant(view: "GraphView", name: str):
    t = view.initializers.get(name)
    return None if t is None else to_array(t)


def _dft_axis_is_one(node, view: "GraphView") -> bool:
    known = view.known(node.input[0])
    rank = len(known.shape) if known is not None else None
    if len(node.input) > 2 and node.input[2]:
        v = _constant(view, node.input[2])
        if v is None or v.size != 1:
            return False
        axis = int(v.reshape(-1)[0])
        return axis == 1 or (rank is not None and axis + rank == 1)
    opset = next((o.version for o in view.model.opset_import if o.domain in ("", "ai.onnx")), 0)
    return opset < 20 or rank == 3  # the default axis: 1 before opset 20, -2 from it


def wrong_numbers(node, view: "GraphView") -> str | None:
    if node.domain not in ("", "ai.onnx"):
        return None
    op = node.op_type
    if op == "DFT" and _attr(node, "axis", None) is None and not _dft_axis_is_one(node, view):
        return ("OpenVINO's DFT with the axis as an input ignores it and transforms axis 1 "
                "(onnx's test_dft_axis: 196 of 200 values wrong); only an axis known to be 1 "
                "is taken")
    if op == "Resize" and _attr(node, "antialias", 0) and \
            str(_attr(node, "mode", b"nearest"), "utf-8") in ("linear", "cubic"):
        return ("OpenVINO's linear/cubic Resize with antialias=1 downsamples without ONNX's "
                "antialiasing filter (onnx's test_resize_downsample_sizes_linear_antialias: 8 "
                "of 9 wrong)")
    if op == "NonMaxSuppression":
        return ("OpenVINO's NonMaxSuppression suppresses a box whose IoU equals iou_threshold, "
                "ONNX only above it (onnx's test_nonmaxsuppression_iou_threshold_boundary: 1 "
                "box for 2); the boxes are known only at run time")
    if op == "RoiAlign" and str(_attr(node, "mode", b"avg"), "utf-8") == "max":
        return ("OpenVINO's RoiAlign with mode=max computes other numbers than ONNX (onnx's "
                "test_roialign_mode_max: 71 of 75 off by up to 0.40)")
    if op == "Tile" and len(node.input) > 1 and _constant(view, node.input[1]) is None:
        known = view.known(node.input[0])
        if known is None or len(known.shape) > 3:
            return ("OpenVINO's Tile of 4 or more dimensions by repeats given at run time writes "
                    "garbage when three axes repeat (onnx's test_tile: values up to 3e32); "
                    "constant repeats, or 3 dimensions at most, are taken")
    return None
