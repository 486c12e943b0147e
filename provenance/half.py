"""Half-precision nodes that TVM imports or lowers wrongly, computed in float32 between Casts.

ONNX Runtime's float16 converter (`onnxruntime.transformers.float16`) makes every tensor of a
model float16 and leaves the rest to the runtime.  TVM 0.27 gets two kinds of node wrong:

- a converter that writes its constants as float32 next to a float16 tensor (LRN multiplies by
  `R.const(alpha, "float32")`, MeanVarianceNormalization, Selu, ...): the import raises "Binary
  operators must have the same datatype", and the node used to end up opaque;
- a lowering that computes a float16 op in float32 and *returns* float32 (batch_norm's TOPI
  kernel adds a float32 epsilon): nothing fails until LegalizeOps re-types the next op, which then
  fails the whole build ("R.nn.conv2d(lv7, metadata[...])" on a float16 ResNet-50), far from the
  node at fault, and bisection spent its whole probe budget finding one such node at a time.

ONNX Runtime's CPU provider runs an op it has no float16 kernel for in float32 between Casts;
provmap gives TVM the same: the node's half-precision inputs are cast to float32, TVM's own
converter converts it, and its outputs are cast back to the types ONNX inference gives them.
Which nodes need it is found, not listed: the node is converted once in a scratch BlockBuilder
and what it emits is legalized there (once per op, input types and attributes), so a TVM that
fixes its converter or kernel gets the plain float16 conversion back.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from .util.errors import first_line

HALF = ("float16", "bfloat16")

#: Ops that sum many terms.  TVM accumulates a float16 conv2d or matmul in float16 (out_dtype is
#: the input's): a float16 ResNet-50's probabilities came out 3.9e-3 from ONNX Runtime's, which
#: accumulates in float32 (ONNX Runtime's float16 model is 9.6e-5 from the float32 one).  These
#: run in float32 between Casts without a trial.
ACCUMULATING = {
    "Conv", "ConvTranspose", "MatMul", "Gemm", "Einsum", "ReduceSum", "ReduceMean", "ReduceL1",
    "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ReduceProd",
    "GlobalAveragePool", "AveragePool", "LpPool", "GlobalLpPool", "Softmax", "LogSoftmax",
    "LayerNormalization", "InstanceNormalization", "GroupNormalization", "BatchNormalization",
    "LRN", "MeanVarianceNormalization", "CumSum",
}
ACCUMULATES = ("TVM would accumulate it in half precision; computed in float32 as ONNX "
               "Runtime's CPU provider computes it")


def _dtype(x) -> str | None:
    ty = getattr(x, "ty", None)
    return str(ty.dtype) if isinstance(ty, relax.TensorType) else None


def reads_half(inputs) -> str | None:
    """The half-precision dtype the node reads (None: it reads none)."""
    return next((d for d in map(_dtype, inputs) if d in HALF), None)


def widen(inputs, emit) -> list:
    """`inputs` with every half-precision tensor as float32 (constants converted in numpy, so a
    converter that reads a constant's value still sees a constant)."""
    out = []
    for x in inputs:
        if x is not None and _dtype(x) in HALF:
            if isinstance(x, tvm.ir.GenericConst):
                x = relax.const(np.asarray(x.value.numpy()).astype(np.float32), "float32")
            else:
                x = emit(relax.op.astype(x, "float32"))
        out.append(x)
    return out


def narrow(sym, wanted: list, emit):
    """The converter's outputs cast back to the dtypes ONNX gives them (`wanted`, per output;
    None: leave as is)."""
    fields = list(sym.fields) if isinstance(sym, relax.Tuple) else [sym]
    back = []
    for k, f in enumerate(fields):
        want = wanted[k] if k < len(wanted) else None
        if want in HALF and _dtype(f) == "float32":
            if isinstance(f, tvm.ir.GenericConst) and want == "float16":  # stays a constant
                f = relax.const(np.asarray(f.value.numpy()).astype(np.float16), want)
            else:
                f = emit(relax.op.astype(f, want))
        back.append(f)
    return relax.Tuple(back) if isinstance(sym, relax.Tuple) else back[0]


def _retyped(binding) -> str | None:
    """Why `binding`'s lowering returns other dtypes than the op declares (None: it does not, or
    TVM cannot lower it at all, which provmap.provenance.salvage reports with TVM's error)."""
    call = binding.value
    if not isinstance(call, relax.Call) or not isinstance(call.op, tvm.ir.Op):
        return None
    legalize = call.op.get_attr("FLegalize")
    if legalize is None:
        return None
    try:
        with tvm.target.Target({"kind": "llvm"}):
            bb = relax.BlockBuilder()
            lowered = bb.normalize(legalize(bb, call))
    except Exception:  # TVM raises many types; salvage gives the reason
        return None
    declared, got = binding.var.ty, lowered.ty
    pairs = (zip(declared.fields, got.fields) if isinstance(declared, relax.TupleType)
             and isinstance(got, relax.TupleType) else [(declared, got)])
    for d, g in pairs:
        if (isinstance(d, relax.TensorType) and isinstance(g, relax.TensorType)
                and str(d.dtype) != str(g.dtype)):
            return (f"TVM lowers {call.op.name} of {d.dtype} to {g.dtype} results, which the "
                    "next op cannot read")
    return None


def verdict(convert, inputs) -> str | None:
    """Why this node must run in float32 on TVM (None: TVM takes it in half precision, or
    cannot take it in float32 either, and the importer reports TVM's own error).

    `convert(bb, inputs)` converts the node into `bb` and emits its outputs."""
    scratch = relax.BlockBuilder()
    scratch._begin_dataflow_block()
    try:
        convert(scratch, inputs)
    except Exception as e:  # TVM raises many types; the message is the reason
        failed = first_line(e)
    else:
        failed = None
    bindings = list(scratch._end_block().bindings)
    if failed is None:
        return next((why for why in map(_retyped, bindings) if why), None)
    wide = relax.BlockBuilder()
    wide._begin_dataflow_block()
    try:
        convert(wide, type(inputs)(widen(inputs, wide.emit)))
    except Exception:  # not a precision problem: the importer records TVM's error
        return None
    finally:
        wide._end_block()
    return f"TVM's converter fails in half precision ({failed[:160]})"


def cache_key(op_type: str, inputs, attr: dict) -> tuple:
    """What the verdict depends on: the op, its inputs' types and its attributes."""
    types = tuple((_dtype(x), getattr(getattr(x, "ty", None), "ndim", None)) for x in inputs)
    attrs = tuple(sorted((k, repr(v)) for k, v in attr.items() if k != "tvm_custom"))
    return op_type, types, attrs
