"""The ONNX<->Relax half of the provenance map: which ONNX node owns each Relax binding.

The importer (provmap.provenance.importer) converts one node at a time and records where each
node's outputs end in the binding list (`TrackingImporter.node_markers`); attribution is by
position there: node i owns everything after node i-1's last marker up to its own.  Bindings
after the last marker are the graph-output plumbing, IDed by what they compute.  Nodes that
produce no binding (aliases, constants and shape arithmetic folded at import) get the reason,
and are linked "folded" to the bindings that consume their value."""

from __future__ import annotations

import tvm
from tvm import relax

from . import ids as _ids
from .model import ROLE_FOLDED, ROLE_PRODUCED, OnnxNode, ProvenanceMap, RelaxExpr
from .tracking import TrackingImporter


def _expr_op(value) -> str:
    if isinstance(value, relax.Call):
        op = value.op
        if isinstance(op, tvm.ir.Op):
            if op.name == "relax.call_pure_packed" and value.args:
                target = value.args[0]
                if isinstance(target, relax.ExternFunc):
                    return target.global_symbol
            return op.name
        if isinstance(op, tvm.ir.GlobalVar):
            return op.name_hint
        if isinstance(op, relax.ExternFunc):
            return op.global_symbol
        return type(op).__name__
    if isinstance(value, relax.Var):
        return "alias"
    return type(value).__name__


def _shape_dtype(var) -> tuple[str | None, str | None]:
    ty = var.ty
    if isinstance(ty, relax.TensorType):
        shape = None
        if isinstance(ty.shape, relax.ShapeExpr):
            # A constant dimension prints as T.int64(4) in TVMScript; the map keeps 4 (and a
            # symbolic one by its name, n).
            shape = "x".join(str(v.value) if isinstance(getattr(v, "value", None), int) else str(v)
                             for v in ty.shape.values) or "scalar"
        return shape, str(ty.dtype)
    if isinstance(ty, relax.TupleType):
        return f"tuple[{len(ty.fields)}]", None
    return None, None


def _bindings(func):
    for block in func.body.blocks:
        yield from block.bindings


def build_map(mod, imp: TrackingImporter, graph, nid: _ids.NodeIds, label: str):
    """(module with IDs on its spans, map, Var -> ID, IDs computed from constants only)."""
    func = mod["main"]
    bindings = list(_bindings(func))
    var_index = {b.var: i for i, b in enumerate(bindings)}

    # Attribute bindings to nodes by position: node i owns everything after node i-1's last
    # marker up to and including its own last marker.
    owner: list[int | None] = [None] * len(bindings)
    start = 0
    for i, markers in enumerate(imp.node_markers):
        # A converter may return a symbolic dimension (Gather of a symbolic Shape gives the TIR
        # variable itself): a Var, but no binding of the function.
        markers = [m for m in markers if m in var_index]
        if not markers:
            continue
        end = max(var_index[m] for m in markers)
        for j in range(start, end + 1):
            owner[j] = i
        # A converter may return a value an earlier node already bound (Shape of a tensor whose
        # shape a ConstantOfShape computed gives that shape's binding): the node owns nothing
        # new, and the next node's range must not reach back over bindings already owned.
        start = max(start, end + 1)

    params = set(func.params)
    const_var: dict = {}
    for b in bindings:
        fv = relax.analysis.free_vars(b.value)
        const_var[b.var] = b.var not in imp.opaque_vars and all(
            (v not in params) and const_var.get(v, False) for v in fv)

    # Expression IDs: the k-th binding of a node, or the graph-output bindings at the end.
    digests: dict[int, bytes] = {}
    per_node_k: dict[int, int] = {}
    out_pos = 0
    for j, b in enumerate(bindings):
        o = owner[j]
        if o is not None:
            k = per_node_k.get(o, 0)
            per_node_k[o] = k + 1
            digests[j] = _ids.expr_digest(nid.node_key[o], k)
        else:
            digests[j] = _ids.output_expr_digest(out_pos, _value_key(b.value, bindings, var_index, digests))
            out_pos += 1
    short = _ids.shorten(digests, "e")

    pmap = ProvenanceMap(meta={"model": label})
    for i, n in enumerate(graph.node):
        pmap.nodes.append(OnnxNode(id=nid.node_id[i], name=n.name, op_type=n.op_type,
                                   domain=n.domain or "", index=i, inputs=list(n.input),
                                   outputs=list(n.output)))
    var_expr = {}
    const_exprs = set()
    for j, b in enumerate(bindings):
        shape, dtype = _shape_dtype(b.var)
        eid = short[j]
        var_expr[b.var] = eid
        if const_var[b.var]:
            const_exprs.add(eid)
        pmap.exprs.append(RelaxExpr(id=eid, function="main", var=b.var.name, op=_expr_op(b.value),
                                    shape=shape, dtype=dtype, index=j))
        if owner[j] is not None:
            pmap.node_exprs.append((nid.node_id[owner[j]], eid, ROLE_PRODUCED))

    _link_folded(pmap, imp, graph, nid, owner, short, set(var_index) | params)
    return _attach_ids(mod, short), pmap, var_expr, const_exprs


def _value_key(value, bindings, var_index, digests) -> bytes:
    vs = relax.analysis.free_vars(value)
    return _ids._h("value", _expr_op(value), [digests[var_index[v]].hex() if v in var_index else v.name
                                             for v in vs])


def _link_folded(pmap, imp, graph, nid, owner, short, relax_vars):
    """Give zero-binding nodes a reason and link them to the bindings of their consumers."""
    produced = {}
    for j, o in enumerate(owner):
        if o is not None:
            produced.setdefault(o, []).append(short[j])
    producer_of = {}
    for i, n in enumerate(graph.node):
        for o in n.output:
            if o:
                producer_of[o] = i
    graph_outputs = {o.name for o in graph.output}

    def folded_sources(i, seen):
        # Zero-binding ancestors reachable through zero-binding nodes only (a loop, not
        # recursion: a run of a thousand Identity nodes is a thousand zero-binding nodes).
        stack = [i]
        while stack:
            for x in graph.node[stack.pop()].input:
                p = producer_of.get(x)
                if p is None or p in produced or p in seen:
                    continue
                seen.add(p)
                stack.append(p)
        return seen

    links = set()
    for i in produced:
        for p in folded_sources(i, set()):
            for eid in produced[i]:
                links.add((nid.node_id[p], eid, ROLE_FOLDED))
    # Graph outputs produced directly by a zero-binding node: link to the output binding(s).
    out_exprs = [short[j] for j, o in enumerate(owner) if o is None]
    for i, n in enumerate(graph.node):
        if i not in produced and any(o in graph_outputs for o in n.output):
            for p in folded_sources(i, {i}):
                for eid in out_exprs:
                    links.add((nid.node_id[p], eid, ROLE_FOLDED))
    pmap.node_exprs.extend(sorted(links))

    for i, node in enumerate(pmap.nodes):
        if i in produced:
            continue
        v = imp.node_values[i]
        fields = list(v.fields) if isinstance(v, relax.Tuple) else [v]
        kinds = set()
        for f in fields:
            if isinstance(f, relax.Var) and f in relax_vars:
                kinds.add("alias of an existing value (no computation)")
            elif (isinstance(f, relax.ShapeExpr) or "Prim" in type(f).__name__
                  or isinstance(getattr(f, "ty", None), tvm.ir.PrimType)):
                # A TIR expression counts too: a symbolic dimension (Gather of a symbolic
                # Shape gives the variable itself) or arithmetic on one.
                kinds.add("shape arithmetic folded at import")
            elif f is None:
                kinds.add("produces no value")
            else:
                kinds.add("constant folded at import")
        node.elided = "; ".join(sorted(kinds)) or "produces no value"


def _attach_ids(mod, short):
    """Record each binding's ID in TVM's own IR, on the binding's span (printable, inspectable).

    Passes do not keep binding spans; propagation relies on object identity and structure
    instead (see provmap.provenance.propagate).  The span is for humans and for TVM-side tools.
    """
    func = mod["main"]
    j = 0
    blocks = []
    for block in func.body.blocks:
        new = []
        for b in block.bindings:
            span = tvm.ir.Span(tvm.ir.SourceName(f"provmap:{short[j]}"), 0, 0, 0, 0)
            new.append(relax.VarBinding(b.var, b.value, span) if isinstance(b, relax.VarBinding)
                       else b)
            j += 1
        blocks.append(type(block)(new))
    body = relax.SeqExpr(blocks, func.body.body)
    out = tvm.IRModule(dict(mod.functions), attrs=mod.attrs)
    out["main"] = relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs)
    return out
