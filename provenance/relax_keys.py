"""What the provenance tracker compares when it matches one module against the next: call
sites and their callees, which calls are plumbing, and structural value keys.

A key replaces every Var by what it stands for in the *old* module, so a binding that a pass
re-created with new Vars (ToNonDataflow) still matches its old self (rule 2 of `propagate`).
Separate from the tracker because the rules of matching are easier to read apart from the
bookkeeping that applies them."""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import relax

_PACKED_NAME: dict[str, str | None] = {}

# Calls that move, allocate, check or free memory: never kernels, so never need provenance.
PLUMBING_OPS = {
    "relax.null_value", "relax.shape_of", "relax.call_builtin_with_ctx", "relax.print",
    "relax.assert_op", "relax.to_vdevice", "relax.hint_on_device", "relax.make_closure",
    "relax.invoke_closure", "relax.tensor_to_shape",
    "relax.builtin.alloc_tensor", "relax.builtin.stop_lift_params",
}


PLUMBING_OP_PREFIXES = ("relax.memory.", "relax.vm.")


PLUMBING_PACKED = {
    "vm.builtin.check_tensor_info", "vm.builtin.check_shape_info", "vm.builtin.check_tuple_info",
    "vm.builtin.check_prim_value_info", "vm.builtin.check_func_info", "vm.builtin.match_shape",
    "vm.builtin.match_prim_value", "vm.builtin.make_shape", "vm.builtin.make_prim_value",
    "vm.builtin.alloc_storage", "vm.builtin.alloc_tensor", "vm.builtin.null_value",
    "vm.builtin.tuple_getitem", "vm.builtin.make_tuple", "vm.builtin.shape_of",
    "vm.builtin.copy", "vm.builtin.read_if_cond", "vm.builtin.invoke_closure",
    "vm.builtin.make_closure", "vm.builtin.to_device",
    # Symbolic shapes (VMShapeLower): the shape heap and the tensor -> shape conversion.
    "vm.builtin.alloc_shape_heap", "vm.builtin.tensor_to_shape",
}


# High-level ops that lowering turns into a VM builtin of another name.  Ops with an
# "FCallPacked" attribute (relax.nonzero, relax.unique, ...) are legalized into a call of that
# packed function: `callee` names them after it, so the occurrence rule can match the call
# LegalizeOps creates when it re-binds the value (a match_cast keeps the old Var).
CALLEE_ALIASES = {"relax.reshape": "vm.builtin.reshape"}


_CALL_TIR_OPS = {"relax.call_tir", "relax.call_tir_inplace", "relax.call_tir_with_grad",
                 "relax.call_dps_packed", "relax.call_packed", "relax.call_pure_packed"}


def expr_name(e) -> str | None:
    if isinstance(e, tvm.ir.GlobalVar):
        return e.name_hint
    if isinstance(e, relax.ExternFunc):
        return e.global_symbol
    if isinstance(e, tvm.ir.Op):
        return e.name
    return None


def callee(value) -> str | None:
    """The kernel a binding calls, or None for plumbing and non-calls."""
    if not isinstance(value, relax.Call):
        return None
    op = value.op
    if isinstance(op, tvm.ir.Op):
        n = op.name
        if n in _CALL_TIR_OPS:
            target = expr_name(value.args[0]) if value.args else None
            if target is None or target in PLUMBING_PACKED:
                return None
            return target
        if n in PLUMBING_OPS or n.startswith(PLUMBING_OP_PREFIXES):
            return None
        if n in CALLEE_ALIASES:
            return CALLEE_ALIASES[n]
        if n not in _PACKED_NAME:
            packed = op.get_attr("FCallPacked")
            _PACKED_NAME[n] = str(packed) if packed is not None else None
        return _PACKED_NAME[n] or n
    n = expr_name(op)
    if n is None or n in PLUMBING_PACKED:
        return None
    return n


def host_functions(mod) -> set[str]:
    """PrimFuncs that run on the host to compute symbolic shapes (VMShapeLower's
    "shape_func"): shape plumbing, like the VM's match_shape builtins, not kernels."""
    return {gv.name_hint for gv, f in mod.functions.items()
            if isinstance(f, tvm.tirx.PrimFunc) and f.attrs is not None
            and "tirx.is_host_func" in f.attrs}


def relax_functions(mod) -> dict:
    """Name -> Relax function of `mod` (its PrimFuncs and externs left out)."""
    return {gv.name_hint: f for gv, f in mod.functions.items() if isinstance(f, relax.Function)}


def relax_callee(mod, val):
    """The Relax function `val` calls by its global name (FuseOps' outlined calls), or None."""
    if isinstance(val, relax.Call) and isinstance(val.op, tvm.ir.GlobalVar):
        f = mod[val.op]
        if isinstance(f, relax.Function):
            return f
    return None


def _dims(values) -> tuple:
    # Sizes as ints, the rest as text: a Cast has a `.value` too (the expression it casts), and
    # keying by that object made every kernel whose shape holds a Cast (a dynamic Resize's
    # output) unmatchable after FuseOps.
    return tuple(int(v.value) if isinstance(v, tvm.tirx.IntImm) else str(v) for v in values)


def bindings(func):
    for block in func.body.blocks:
        yield from block.bindings


class ValueKeys:
    """Structural value keys, with Vars replaced by what they stand for in the *old* module."""

    def __init__(self):
        self._const_cache: dict = {}
        self._hash_cache: dict = {}

    def _const(self, c):
        k = self._const_cache.get(c)
        if k is None:
            k = ("c", tvm_ffi.structural_hash(c))
            self._const_cache[c] = k
        return k

    def _shash(self, obj):
        if obj is None:
            return None
        try:
            k = self._hash_cache.get(obj)
        except TypeError:  # types define __eq__ without __hash__
            return tvm_ffi.structural_hash(obj)
        if k is None:
            k = tvm_ffi.structural_hash(obj)
            self._hash_cache[obj] = k
        return k

    def _ty(self, t):
        # Cheap spelled-out key for the common tensor/tuple types; hashing every call's type
        # structurally was the largest tracking cost on ResNet-50.
        if isinstance(t, relax.TensorType) and isinstance(t.shape, relax.ShapeExpr):
            return ("T", str(t.dtype), _dims(t.shape.values))
        if isinstance(t, relax.TupleType):
            return ("Tup", tuple(self._ty(f) for f in t.fields))
        return self._shash(t)

    def function_key(self, f):
        """Relax functions are keyed by structure, not name or attributes, because
        MergeCompositeFunctions re-creates each composite as a local copy without "Primitive"."""
        k = self._hash_cache.get(f)
        if k is None:
            bare = relax.Function(f.params, f.body, f.ret_ty, f.is_pure, None)
            k = ("relaxfn", tvm_ffi.structural_hash(bare))
            self._hash_cache[f] = k
        return k

    def key(self, e, env, fns=None):
        """`fns` resolves a callee (GlobalVar name or local Var) to the Relax function it names."""
        if isinstance(e, relax.Var):
            return env.get(e, ("free", e.name))
        if isinstance(e, relax.Tuple):
            return ("tuple", tuple(self.key(f, env, fns) for f in e.fields))
        if isinstance(e, relax.TupleGetItem):
            t = self.key(e.tuple_value, env, fns)
            if t[0] == "tuple":
                return t[1][e.index]
            return ("tgi", t, e.index)
        if isinstance(e, relax.Call):
            op = e.op
            f = fns.get(expr_name(op) if isinstance(op, tvm.ir.GlobalVar) else op) if fns else None
            if f is not None:
                opk = self.function_key(f)
            else:
                opk = ("fn", expr_name(op)) if expr_name(op) is not None else self.key(op, env)
            return ("call", opk, tuple(self.key(a, env, fns) for a in e.args),
                    self._shash(e.attrs) if e.attrs is not None else None,
                    tuple(self._ty(t) for t in e.ty_args))
        n = expr_name(e)
        if n is not None:
            return ("fn", n)
        if isinstance(e, relax.ShapeExpr):
            return ("shape", _dims(e.values))
        if "Const" in type(e).__name__:
            return self._const(e)
        return ("other", type(e).__name__, self._shash(e))
