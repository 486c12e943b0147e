"""The partitioned model as a Relax module: one outlined function per partition, called from main.

This follows Relax's BYOC convention so TVM's own tools read it: a partition for an external
backend is a function with a "Codegen" attribute (the backend) and a "global_symbol"; TVM
partitions are plain private functions.  Every partition function also carries
"provmap.backend", "provmap.exprs" (the expression IDs it computes) and "provmap.onnx_nodes",
so the printed module is itself a readable source map.  `mod.script()` prints it.
"""

from __future__ import annotations

import tvm
from tvm import relax

from .plan import Plan
from .graph_view import GraphView
from .subgraph import Subgraph


def partition_function(sub: Subgraph, pid: str, backend: str) -> relax.Function:
    fn, _var_expr, _params, _outs = sub.relax_function()
    attrs = {
        "provmap.backend": backend,
        "provmap.partition": pid,
        "provmap.exprs": list(sub.exprs),
        "provmap.onnx_nodes": [sub.view.node_ids[i] for i in sub.closure],
    }
    if backend != "tvm":
        attrs["Codegen"] = backend
        attrs["global_symbol"] = pid
    for k, v in attrs.items():
        fn = fn.with_attr(k, v)
    return fn


def partitioned_module(view: GraphView, plan: Plan) -> tvm.IRModule:
    """Build main(inputs) -> outputs calling one outlined function per partition, in plan order."""
    bb = relax.BlockBuilder()
    gvars, subs = [], []
    for p in plan.partitions:
        sub = Subgraph(view, p.ops)
        subs.append(sub)
        gvars.append(bb.add_func(partition_function(sub, p.id, p.backend), p.id))
    by_name = {}
    params = []
    for name in view.graph_inputs:
        old = view.imported.tensor_values[name]
        v = relax.Var(old.name, old.ty)
        params.append(v)
        by_name[name] = v
    with bb.function("main", params):
        with bb.dataflow():
            for gv, sub in zip(gvars, subs):
                _fn, _ve, in_names, out_names = sub.relax_function()
                call = relax.Call(gv, [by_name[n] for n in in_names])
                res = bb.emit(call, name_hint=f"{gv.name_hint}_out")
                if len(out_names) == 1:
                    by_name[out_names[0]] = res
                else:
                    for k, n in enumerate(out_names):
                        by_name[n] = bb.emit(relax.TupleGetItem(res, k))
            for n in view.graph_outputs:
                if n not in by_name:  # a constant output (see GraphView.constant_outputs)
                    val = view.imported.tensor_values.get(n)
                    if isinstance(val, relax.Expr):
                        by_name[n] = val
            outs = [by_name[n] for n in view.graph_outputs]
            ret = bb.emit_output(outs[0] if len(outs) == 1 else relax.Tuple(outs))
        bb.emit_func_output(ret)
    mod = bb.get()
    return mod.with_attrs({"provmap.strategy": plan.strategy}) if hasattr(mod, "with_attrs") else mod
