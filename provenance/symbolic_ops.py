"""Conversions the importer makes itself where TVM's ONNX frontend loses a symbolic shape.

Each takes a node the frontend would convert and returns the Relax expression (or the inputs)
that keeps the shape related to the model's input symbols, or None to leave the node to the
frontend.  The relations come from ONNX Runtime's symbolic inference (provmap.provenance.symbolic)
and are stated with match_cast, which TVM's VM checks at run time: a wrong relation is an error at
some shape, never a wrong value.
"""

from __future__ import annotations

import tvm
import tvm.sym
from tvm import relax, tirx

from .symbolic import wanted_shape


def arange(node, inputs, tp, env: dict):
    """A Range whose length the symbolic inference relates to the inputs (position ids:
    `Range(0, seq, 1)`), built as `R.arange` over that length, or None to leave it to the
    frontend.  The frontend reads the length from a tensor and mints a fresh variable for it
    (`range_len_0`), which TVM's VM shape lowering then fails to compute in fused kernels
    ("PrimExpr 8 * range_len_0 has not been computed": every KV-cache decoder export).
    Only constant start and delta are taken; the length is the inference's."""
    import numpy as np

    if len(inputs) != 3 or not all(isinstance(x, tvm.ir.GenericConst) for x in (inputs[0], inputs[2])):
        return None
    shape = wanted_shape(tp, 1, env)
    if shape is None:
        return None
    start, delta = (inputs[k].value.numpy() for k in (0, 2))
    if start.size != 1 or delta.size != 1 or start.dtype.kind != "i" or delta.dtype.kind != "i" \
            or int(delta) == 0:
        return None
    s, d = int(np.ravel(start)[0]), int(np.ravel(delta)[0])
    end = tirx.IntImm("int64", s) + shape[0] * tirx.IntImm("int64", d)
    return relax.op.arange(tirx.IntImm("int64", s), end, tirx.IntImm("int64", d),
                           dtype=str(start.dtype))


ELEMENTWISE = {"Add": "add", "Sub": "subtract", "Mul": "multiply", "Div": "floor_divide"}


def prim_with_tensor(node, inputs):
    """A binary op of a scalar computed from a shape (`past` read off a KV cache's Shape) and
    a constant tensor (`Range(0, 1)` folded to `[0]` once `seq` is fixed 1), built as the
    tensor op it is, or None to leave it to the frontend.  The frontend evaluates the pair in
    numpy and keeps `.item()` of the result, a scalar: the position ids of every decode-step
    profile lost their axis ("Unsqueeze axis 3 is out of range for rank 3")."""
    op = ELEMENTWISE.get(node.op_type)
    if op is None or len(inputs) != 2:
        return None
    prim = [tvm.ir.is_prim_expr(x) for x in inputs]
    const = [isinstance(x, tvm.ir.GenericConst) and x.value.numpy().ndim >= 1 for x in inputs]
    if not (prim[0] and const[1] or prim[1] and const[0]):
        return None
    dtype = inputs[1 if prim[0] else 0].ty.dtype
    if not str(dtype).startswith("int") or (op == "floor_divide" and prim[1]):
        return None  # integer shape arithmetic only; a divisor read off a shape stays theirs
    args = []
    for x, is_prim in zip(inputs, prim):
        if is_prim:
            x = relax.op.astype(relax.op.shape_to_tensor(relax.ShapeExpr([x])), dtype)
        args.append(x)
    return getattr(relax.op, op)(*args)


#: ops whose inputs broadcast against each other (numpy rules): unified where neither side is 1
BROADCAST = {"Add", "Sub", "Mul", "Div", "Pow", "Where", "Max", "Min", "Equal", "Less",
             "Greater", "And", "Or", "PRelu", "Mod"}


def unify_dims(bb: relax.BlockBuilder, node, inputs, tp, env: dict, casts: dict | None = None):
    """A Concat's or a broadcast's inputs with their shared axes stated equal, or None when
    Relax already proves them so.  An FPN's upsampled map and its skip connection have one size
    computed two ways (`int64(2.0 * float((h - 1) // 32 + 1))` and `(h - 1) // 16 + 1`); Relax
    cannot prove them equal, leaves the result's shape unknown and nothing after it legalizes (a
    YOLO export with a dynamic image size mapped 117 of its 272 nodes).  ONNX Runtime's
    inference merges them: each input is cast to the output's sizes it states (the first
    input's where it states none); a concat's own axis and a broadcast's 1s are kept.  `casts`
    remembers the casts made, so a value read twice is cast once."""
    vals = list(inputs)
    tensors = [x for x in vals if x is not None and isinstance(getattr(x, "ty", None), relax.TensorType)
               and isinstance(x.ty.shape, relax.ShapeExpr)]
    if len(tensors) < 2:
        return None
    ndim = max(len(x.ty.shape.values) for x in tensors)
    concat = node.op_type == "Concat"
    if concat and (len(tensors) != len(vals) or any(len(x.ty.shape.values) != ndim for x in tensors)):
        return None
    axis = next((int(a.i) for a in node.attribute if a.name == "axis"), 0) if concat else None
    if axis is not None and axis < 0:
        axis += ndim
    target = wanted_shape(tp, ndim, env) or _broadcast(tensors, ndim, axis)
    ana = tvm.sym.Analyzer()
    out, changed = [], False
    for x in vals:
        if x is None or not any(x is t for t in tensors):
            out.append(x)
            continue
        dims = list(x.ty.shape.values)
        lead = ndim - len(dims)  # numpy broadcasting aligns the trailing axes
        want = [d if lead + k == axis or (not concat and _is_one(d)) else target[lead + k]
                for k, d in enumerate(dims)]
        if any(_is_one(w) and not _is_one(d) for w, d in zip(want, dims)):
            return None  # the inference says 1 where this input is not: not a relation to state
        if all(ana.can_prove_equal(a, b) for a, b in zip(dims, want)):
            out.append(x)
            continue
        key = (x, tuple(str(d) for d in want))
        cast = (casts or {}).get(key)
        if cast is None:  # one cast per value and shape: its later readers share it
            cast = bb.match_cast(x, relax.TensorType(want, x.ty.dtype))
            if casts is not None:
                casts[key] = cast
        out.append(cast)
        changed = True
    return out if changed else None


def _broadcast(tensors, ndim: int, axis) -> list:
    """Per axis (trailing-aligned), the first input's size there that is not a literal 1: the
    broadcast's result as the inputs spell it (an SE block's [b, c, 1, 1] gate read first must
    not make the feature map's h and w 1)."""
    out = []
    for k in range(ndim):
        sizes = [x.ty.shape.values[k - (ndim - len(x.ty.shape.values))] for x in tensors
                 if k >= ndim - len(x.ty.shape.values)]
        out.append(next((d for d in sizes if not _is_one(d)), sizes[0]))
    return out


def _is_one(d) -> bool:
    return isinstance(d, tirx.IntImm) and int(d.value) == 1
