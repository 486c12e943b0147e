"""Attribute settings that ONNX Runtime and OpenVINO both compute otherwise than ONNX's reference.

Found by the corpus step (bench/corpus.py, issue 32), the plain libraries wrong the same way:

- Resize, linear or cubic, coordinate_transformation_mode=align_corners, by `scales` that do not
  give a whole output length (input length * scale not an integer): both libraries map output
  coordinates with the floored output length, x_in = x_out * (in - 1) / (floor(in * scale) - 1),
  where onnx's reference uses the scaled length in * scale (onnx's
  test_resize_downsample_scales_linear_align_corners: 4.0 where ONNX has 3.142857; the _cubic_
  case: 8 of 9 off).  With whole lengths both formulas agree, so constant scales that give
  whole lengths keep the node; run-time scales are refused, since nothing says they will.

Each library's own list adds to this one (ov_refusals.py for OpenVINO).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from provmap.provenance.util.attrs import node_attr as _attr
from provmap.provenance.weights import to_array

if TYPE_CHECKING:  # pragma: no cover
    from ..graph_view import GraphView


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def wrong_align_corners(node, view: "GraphView", library: str) -> str | None:
    if node.op_type != "Resize" or node.domain not in ("", "ai.onnx"):
        return None
    if _text(_attr(node, "mode", "nearest")) not in ("linear", "cubic") or \
            _text(_attr(node, "coordinate_transformation_mode", "half_pixel")) != "align_corners":
        return None
    scales = node.input[2] if len(node.input) > 2 else ""
    sizes = node.input[3] if len(node.input) > 3 else ""
    if not scales or sizes:
        return None  # by sizes: the output length is whole
    t = view.initializers.get(scales)
    known = view.known(node.input[0])
    if t is not None and known is not None and all(isinstance(d, int) for d in known.shape):
        s = to_array(t).astype(np.float64)
        axes = _attr(node, "axes", None) or range(len(known.shape))
        lengths = [known.shape[a] * float(f) for a, f in zip(axes, s)]
        if all(abs(x - round(x)) < 1e-6 for x in lengths):
            return None
    return (f"{library}'s {_text(_attr(node, 'mode', ''))} Resize with align_corners by scales "
            "that do not give a whole output length maps coordinates with the floored length, "
            "ONNX's reference with the scaled one (onnx's test_resize_downsample_scales_linear_"
            "align_corners: 4.0 where ONNX has 3.142857); only constant scales giving whole "
            "lengths are taken")


def refuse_shared(view: "GraphView", verdicts: dict, library: str) -> None:
    """Turn the verdict of each node the shared rules name into a refusal, in place."""
    from ..backend import Support

    for i in view.op_nodes:
        if verdicts[i].ok:
            why = wrong_align_corners(view.nodes[i], view, library)
            if why:
                verdicts[i] = Support(False, why)
