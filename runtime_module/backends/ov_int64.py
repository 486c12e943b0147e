"""OpenVINO's CPU plugin computes int64 tensors in 32 bits (its integer kernels are i32 only):
a value past the int32 range wraps, in arithmetic and in ops that only move data alike, and the
result comes back as int64 with exit 0 (issue 36's seventh afternoon: `x + 1` on 2**40 gave 1;
Concat, Reshape, Gather, ReduceSum the same; uint64 the same at 32 bits).  Plain OpenVINO does
this too; provmap does not pass it on silently:

- at run time, the runner refuses an int64/uint64 input holding a value outside 32 bits, in one
  line naming the tensor, before the plugin narrows it (`RangeGuard`; a few comparisons on what
  are usually small id or shape tensors);
- at support time, a node reading an int64/uint64 constant of the model (an initializer or a
  Constant) that holds a value outside 32 bits is refused, so greedy and collage place it
  elsewhere (`refuse_wide_constants`; the eighth afternoon's Concat with 2**40 + 5 in it);
- at build time, a partition computing int64 arithmetic on run-time values is named in a note
  (`int64_arithmetic`): a sum of in-range inputs can still leave the range inside the
  partition, where no check sees it.

Why not refuse int64 on OpenVINO the way float64 is refused: token ids, position ids and
dynamic shapes are int64 in every exported transformer, and their values stay far inside
32 bits; refusing them would move every embedding lookup off OpenVINO."""

from __future__ import annotations

import numpy as np

from provmap.provenance.util.listing import first_few
from provmap.provenance.weights import to_array

#: ops whose int64 result can leave the range of their inputs
GROWING_OPS = frozenset({"Add", "Sub", "Mul", "Pow", "Neg", "Abs", "Sum", "ReduceSum",
                         "ReduceProd", "ReduceSumSquare", "CumSum", "MatMul", "Einsum", "Range"})
_WIDE = {np.dtype(np.int64): (-(2 ** 31), 2 ** 31 - 1, "int32"),
         np.dtype(np.uint64): (0, 2 ** 32 - 1, "uint32")}


class RangeGuard:
    """The int64/uint64 inputs of one compiled OpenVINO model, checked before each call."""

    def __init__(self, names: list[str], dtypes: list):
        self.ports = [(k, names[k], *_WIDE[dt]) for k, dt in enumerate(dtypes)
                      if k < len(names) and dt in _WIDE]

    def check(self, inputs) -> str | None:
        for k, name, lo, hi, narrow in self.ports:
            x = np.asarray(inputs[k])
            if not x.size:
                continue
            low, high = x.min(), x.max()
            if low < lo or high > hi:
                bad = int(low) if low < lo else int(high)
                return (f"input '{name}' holds {bad}, outside {narrow}: the CPU plugin computes "
                        f"{x.dtype} in 32 bits and would wrap it to another number; "
                        "run the nodes reading it on onnxruntime or tvm "
                        "(--backend-option openvino.exclude_ops=..., or single:onnxruntime)")
        return None


def int64_arithmetic(sub) -> list[str]:
    """The nodes of `sub` that compute int64/uint64 arithmetic on values read from the model's
    inputs.  Arithmetic on shapes (what Shape and Size give, dynamic batch and sequence sizes)
    is left out: tensor sizes stay far inside 32 bits, and every dynamic-axis export has it."""
    view = sub.view
    data = _data_tensors(view)
    out = []
    for i in sub.ops:
        node = view.nodes[i]
        if node.domain not in ("", "ai.onnx") or node.op_type not in GROWING_OPS:
            continue
        if any(view.dtype(o) in ("int64", "uint64") for o in node.output if o) and \
                any(x in data for x in node.input if x):
            out.append(f"{node.op_type} '{node.name or node.output[0]}'")
    return out


def int64_notes(sub, device: str) -> list[str]:
    found = int64_arithmetic(sub)
    if not found:
        return []
    return [f"OpenVINO's {device} plugin computes int64 in 32 bits: {first_few(found)}: "
            "results past 2**31 wrap with no error (inputs outside 32 bits are refused at run time; "
            "docs/backends.md, 'int64 on OpenVINO')"]


def _data_tensors(view) -> set[str]:
    """Tensors whose values depend on a graph input's values (not only on its shape); the
    view's nodes are in topological order."""
    data = set(view.graph_inputs)
    for node in view.nodes:
        if node.op_type in ("Shape", "Size") and node.domain in ("", "ai.onnx"):
            continue
        if any(x in data for x in node.input if x):
            data.update(o for o in node.output if o)
    return data


def refuse_wide_constants(view, verdicts: dict, device: str) -> None:
    """Turn into a refusal, in place, the verdict of each node reading an int64/uint64 constant
    that holds a value outside 32 bits: known at compile time, so never left to wrap."""
    from ..backend import Support

    wide: dict[str, str | None] = {}
    for i in view.op_nodes:
        if not verdicts[i].ok:
            continue
        node = view.nodes[i]
        for k, x in enumerate(view.node_inputs[i]):
            if x and node.op_type == "Slice" and k in (1, 2) and _slice_bound(view, x):
                continue
            if x and x not in wide:
                wide[x] = _outside_32_bits(view, x)
            if x and wide[x]:
                verdicts[i] = Support(False, f"OpenVINO {device} computes int64 in 32 bits and "
                                             f"the constant '{x}' {wide[x]}: it would wrap")
                break


def _slice_bound(view, name: str) -> bool:
    """A Slice start or end of int64's own limits: the exporters' "to the end" (every dynamic
    transformer export slices with 2**63 - 1).  It is a clamp, not a value computed with:
    OpenVINO's Slice clamps it to the axis as ONNX says (checked against ONNX Runtime on GPT-2
    exports at every sequence length of a shape profile, tests/test_dynamic_shapes.py)."""

    t = _constant(view, name)
    if t is None:
        return False
    a = to_array(t).astype(object).ravel()
    limits = {2 ** 63 - 1, -(2 ** 63), 2 ** 31 - 1, -(2 ** 31)}
    return all(-(2 ** 31) <= v < 2 ** 31 or v in limits for v in a)


def _constant(view, name: str):
    """The TensorProto of an initializer or a Constant node's value, or None."""
    t = view.initializers.get(name)
    if t is None:
        p = view.producer.get(name)
        node = view.nodes[p] if p is not None else None
        if node is None or node.op_type != "Constant" or view.is_op(p):
            return None
        t = next((a.t for a in node.attribute if a.name == "value" and a.HasField("t")), None)
    return t


def _outside_32_bits(view, name: str) -> str | None:
    from onnx import TensorProto

    t = _constant(view, name)
    if t is None or t.data_type not in (TensorProto.INT64, TensorProto.UINT64):
        return None
    a = to_array(t)
    if not a.size:
        return None
    lo, hi, narrow = _WIDE[a.dtype]
    low, high = a.min(), a.max()
    if low >= lo and high <= hi:
        return None
    return f"holds {int(low) if low < lo else int(high)}, outside {narrow}"

