"""provmap's own Relax conversions for the cases where TVM 0.27's converter computes a wrong value.

Plain TVM refuses many of these models for another reason (an initializer that is also a graph
input, an unsorted file, a symbolic shape): provmap's import gets past that, and so reaches
converters whose bugs plain TVM never showed.  A wrong conversion would run and return wrong
numbers silently, so each one found is replaced here, checked against ONNX Runtime in
tests/test_tvm_converters.py (onnx's own model cases test_sequence_model3 and
test_expand_shape_model1-4 among them):

- SequenceInsert at a negative position: TVM inserts at `len + position + 1` (-1 appends), ONNX
  at `len + position` (-1 inserts before the last element, as Python's list.insert).
- Expand by a shape known only at run time: TVM broadcasts to the shape as given, so a 1 in it
  *shrinks* the result (`[1, 3, 1]` by `[3, 1, 3]` gave `[3, 1, 3]`; ONNX broadcasts both ways:
  `[3, 3, 3]`), and a shape shorter than the input fails to import.  Here each output dimension
  is `input dim if shape dim == 1 else shape dim`, computed by the VM at run time.
- ReduceMax / ReduceMin (and Max / Min, which TVM converts as a reduction over the stacked
  inputs): TVM's reduction starts from the lowest (highest) *finite* value, so a max over -inf
  only is -3.4e38, not -inf.  Softmax written out with ReduceMax and a fully masked row
  (onnx's attention *_expanded cases, which plain TVM refuses at a shape input) then gave NaN
  where ONNX Runtime gives the masked value.  Here Max / Min fold their inputs pairwise (TVM's
  maximum / minimum keep infinities), and a reduction's result equal to that finite bound
  becomes the infinity unless some element really is the bound.

Softplus, Mish, float Mod, Dropout's mask, and the NonMaxSuppression / ConvTranspose / Dropout
forms refused: converters_numeric.py.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
import tvm
from tvm import relax, tirx

from . import converters_numeric

_FLOATS = ("float16", "float32", "float64")


def _constant_int(x, what: str) -> int:
    if not isinstance(x, tvm.ir.GenericConst):
        raise NotImplementedError(f"{what} must be a constant")
    return int(x.value.numpy())


def sequence_insert(bb, inputs, attr, convert):
    seq, tensor = list(inputs[0]), inputs[1]
    n = len(seq)
    pos = n
    if len(inputs) > 2 and inputs[2] is not None:
        pos = _constant_int(inputs[2], "SequenceInsert's position")
        if not -n <= pos <= n:
            raise ValueError(f"SequenceInsert position {pos} out of range [-{n}, {n}]")
        pos = pos + n if pos < 0 else pos
    seq.insert(pos, tensor)
    return relax.Tuple(seq)


def _is_one(d) -> bool:
    return isinstance(d, tirx.IntImm) and d.value == 1


def expand(bb, inputs, attr, convert):
    """ONNX Expand: bidirectional broadcasting of the input and the shape."""
    data, shape = inputs[0], inputs[1]
    if isinstance(shape, (relax.ShapeExpr, tvm.ir.GenericConst)):
        return None  # TVM's own conversion handles static shapes (and checks them)
    ty = shape.ty
    if not (isinstance(ty, relax.TensorType) and isinstance(ty.shape, relax.ShapeExpr)
            and isinstance(ty.shape.values[0], tirx.IntImm)):
        raise NotImplementedError("Expand's shape must have a static length")
    k = int(ty.shape.values[0].value)
    given = bb.emit(relax.Call(relax.ExternFunc("vm.builtin.tensor_to_shape"), [shape],
                               ty_args=[relax.ShapeType(ndim=k)]))
    dims = [tirx.Var(f"expand_{i}", "int64") for i in range(k)]
    bb.match_cast(given, relax.ShapeType(dims))
    data_shape = list(data.ty.shape.values)
    n = max(k, len(data_shape))
    one = tirx.IntImm("int64", 1)
    padded_shape = [one] * (n - len(data_shape)) + data_shape
    target = [None] * (n - k) + dims
    out = []
    for d, t in zip(padded_shape, target):
        if t is None:
            out.append(d)
        elif _is_one(d):
            out.append(t)
        else:
            out.append(tirx.Select(t == 1, d, t))
    padded = data
    if n > len(data_shape):
        padded = bb.normalize(relax.op.reshape(data, relax.ShapeExpr(padded_shape)))
    return relax.op.broadcast_to(padded, relax.ShapeExpr(out))


def _pairwise(binary):
    def convert_pairwise(bb, inputs, attr, convert):
        xs = [x for x in inputs if x is not None]
        if not all(isinstance(getattr(x, "ty", None), relax.TensorType)
                   and str(x.ty.dtype) in _FLOATS for x in xs):
            return None
        return functools.reduce(lambda a, b: bb.normalize(binary(a, b)), xs)
    return convert_pairwise


def _reduction(op_name: str, largest: bool):
    def convert_reduction(bb, inputs, attr, convert):
        data = inputs[0]
        call = convert()
        if not (isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.Op)
                and call.op.name == op_name and str(data.ty.dtype) in _FLOATS):
            return call
        dtype = str(data.ty.dtype)
        info = np.finfo(np.dtype(dtype))
        bound = relax.const(info.min if largest else info.max, dtype)
        inf = relax.const(-np.inf if largest else np.inf, dtype)
        got = bb.emit(call)
        real = relax.op.max(relax.op.astype(relax.op.equal(data, bound), "int8"),
                            call.attrs.axis, call.attrs.keepdims)
        only_inf = relax.op.logical_and(relax.op.equal(got, bound),
                                        relax.op.equal(real, relax.const(0, "int8")))
        return relax.op.where(only_inf, inf, got)
    return convert_reduction


#: ONNX op -> conversion(bb, inputs, attr, convert), `convert()` being TVM's own conversion; a
#: conversion returning None defers to TVM's.
FIXED = {"SequenceInsert": sequence_insert, "Expand": expand,
         "Max": _pairwise(relax.op.maximum), "Min": _pairwise(relax.op.minimum),
         "ReduceMax": _reduction("relax.max", True), "ReduceMin": _reduction("relax.min", False),
         **converters_numeric.FIXED}


def _attr(node, name, default):
    for a in node.attribute:
        if a.name == name:
            return a.s.decode() if a.type == a.STRING else a.i
    return default


def wrong_lowering(node) -> str | None:
    """Why TVM 0.27's conversion of `node` would compute other numbers than ONNX's, for the
    cases found by the corpus step (bench/corpus.py, issue 32) that no replacement fixes yet;
    the node is then opaque (TVM declines it, `map` marks it) instead of running wrong."""
    if node.op_type == "IsInf" and (not _attr(node, "detect_positive", 1)
                                    or not _attr(node, "detect_negative", 1)):
        return ("TVM's IsInf ignores detect_positive/detect_negative (it flags both infinities: "
                "onnx's test_isinf_positive came out wrong)")
    if node.op_type == "SpaceToDepth" and str(_attr(node, "mode", "DCR")).upper() == "CRD":
        return ("TVM's SpaceToDepth orders channels as DCR whatever the mode (onnx's "
                "test_spacetodepth_crd_mode_example came out wrong)")
    return None


#: ONNX element types narrower than a byte, or 8-bit floats, that TVM 0.27 computes wrong or
#: crashes on.  4-bit (and 2-bit) tensors: ONNX packs two a byte, TVM's VM holds one a byte and
#: fails in its runtime, not at build ("Check failed: dtype.bits % 8 == 0", "TensorCopyFromBytes:
#: size mismatch"), killing `map`'s run.  8-bit floats: its Cast neither saturates nor maps
#: NaN/infinity as ONNX says (onnx's test_cast_FLOAT_to_FLOAT8E5M2: 1e6 came out -0.000244, NaN
#: came out 1.5; the FLOAT8E4M3FN cases put NaN elsewhere), both ways.
_NARROW = {"float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz", "uint4", "int4",
           "float4e2m1", "uint2", "int2"}
#: float8e8m0 is read right (test_cast_e8m0_FLOAT8E8M0_to_FLOAT passes) but written wrong.
_NARROW_OUT = _NARROW | {"float8e8m0"}


def wrong_shift(node, inputs) -> str | None:
    """BitShift by an amount outside [0, bits): ONNX gives 0 (onnx's test_bitshift_*_shift_ge_
    width, _negative_shift), TVM the C shift (undefined: it kept the low bits); refused unless the
    amount is a constant within range."""
    if node.op_type != "BitShift" or len(inputs) < 2:
        return None
    amount = inputs[1]
    if isinstance(amount, tvm.ir.GenericConst):
        v = amount.value.numpy()
        if v.size and 0 <= int(v.min()) and int(v.max()) < v.dtype.itemsize * 8:
            return None
    return ("TVM's BitShift by an amount of the type's width or more (or negative) is not "
            "ONNX's 0 (onnx's test_bitshift_left_int32_shift_ge_width came out wrong); only a "
            "constant amount within range is taken")


def _elem_name(tp) -> str | None:
    if tp is None or not tp.HasField("tensor_type") or not tp.tensor_type.elem_type:
        return None
    return onnx.TensorProto.DataType.Name(tp.tensor_type.elem_type).lower()


def wrong_dtype(node, onnx_types: dict) -> str | None:
    """Why TVM cannot compute `node` for the element types it reads or writes (see _NARROW),
    so the node is opaque before it reaches the VM; None when its types are fine."""
    outs = [(o, _elem_name(onnx_types.get(o))) for o in node.output if o]
    if node.op_type == "Cast":
        to = next((a.i for a in node.attribute if a.name == "to"), 0)
        outs.append((node.output[0], onnx.TensorProto.DataType.Name(to).lower() if to else None))
    for name, elem in outs:
        if elem in _NARROW_OUT:
            return (f"TVM 0.27 does not compute {elem} tensors as ONNX does (writes '{name}': "
                    "8-bit floats without ONNX's saturation and NaN, 4-bit ones unpacked)")
    for name in node.input:
        elem = _elem_name(onnx_types.get(name)) if name else None
        if elem in _NARROW:
            return (f"TVM 0.27 does not compute {elem} tensors as ONNX does (reads '{name}': "
                    "8-bit floats without ONNX's NaN, 4-bit ones unpacked)")
    return None
