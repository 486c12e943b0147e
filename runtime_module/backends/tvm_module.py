"""A region as the IRModule TVM builds: its Relax function as "main", the functions it calls
from the imported module, and the shape profile's bounds.  Beside tvm.py, which decides what
TVM takes and how it is compiled and loaded."""

from __future__ import annotations

import tvm
from tvm import relax


def bounded(fn, profile):
    """`fn` with the shape profile's ranges as Relax's symbolic-shape bounds: memory planning
    (StaticPlanBlockMemory) then sizes each buffer for the largest shape once, instead of
    allocating per call at run time."""
    if profile is None or not profile.symbols:
        return fn
    fn = fn.with_attr("tir_var_upper_bound", {s: r.max for s, r in profile.symbols.items()})
    return fn.with_attr("tir_var_lower_bound", {s: r.min for s, r in profile.symbols.items()})


def module_for(fn, imported_mod) -> tvm.IRModule:
    """`fn` as "main" of a module that also holds the functions it calls from the imported
    module: some converters (Einsum, reflect/edge Pad, ...) emit call_tir to PrimFuncs
    they add beside "main".  Only those reachable from `fn` are copied, so a partition's
    library does not carry other partitions' kernels."""
    by_gv = {gv: f for gv, f in imported_mod.functions.items() if gv.name_hint != "main"}
    funcs = {}
    stack = [fn]
    while stack:
        f = stack.pop()
        if not isinstance(f, relax.Function):
            continue  # PrimFuncs call nothing that lives in the module
        for gv in relax.analysis.all_global_vars(f):
            if gv in by_gv and gv not in funcs:
                funcs[gv] = by_gv[gv]
                stack.append(by_gv[gv])
    funcs[tvm.ir.GlobalVar("main")] = fn
    return tvm.IRModule(funcs)
