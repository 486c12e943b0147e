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
"""

from __future__ import annotations

import tvm
from tvm import relax, tirx


def _constant_int(x, what: str) -> int:
    if not isinstance(x, tvm.ir.GenericConst):
        raise NotImplementedError(f"{what} must be a constant")
    return int(x.value.numpy())


def sequence_insert(bb, inputs, attr):
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


def expand(bb, inputs, attr):
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


#: ONNX op -> conversion(bb, inputs, attr); a conversion returning None defers to TVM's.
FIXED = {"SequenceInsert": sequence_insert, "Expand": expand}
