"""ONNX -> Relax import that records which ONNX node produced every binding.

TVM's Relax ONNX frontend attaches no provenance, and its converters return *unbound*
expressions that the consumer's normalisation emits later, so "bindings emitted while node i was
converted" would credit them to the wrong node.  We subclass the importer and force-emit each
node's outputs right after its converter returns.  Then, in the finished function, every
binding between the last output of node i-1 and the last output of node i belongs to node i:
attribution is by position in the binding list, which needs no private BlockBuilder API.

Nodes that produce no binding (Identity aliases, constants and shape arithmetic folded at import)
are recorded with the reason, and linked as "folded" to the bindings of the nodes that consume
their value, so that "which kernel carries this Shape node?" still has an answer.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field

import onnx
import tvm
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend as _fe

from . import ids as _ids
from .errors import ProvmapError, describe_node
from .fold import FOLD_REASON, fold_constants, infer_types
from .shapes import apply_input_shapes
from .model import ROLE_FOLDED, ROLE_PRODUCED, OnnxNode, ProvenanceMap, RelaxExpr

def _is_leaf(e) -> bool:
    """Vars, constants, shapes and immediates: nothing a binding would compute."""
    return not isinstance(e, (relax.Call, relax.TupleGetItem, relax.Tuple, relax.If, relax.SeqExpr))


def load_model(source, check: bool = True) -> tuple[onnx.ModelProto, str]:
    """Read and validate an ONNX model; every failure is a ProvmapError naming the file."""
    if isinstance(source, onnx.ModelProto):
        model, label = source, source.graph.name or "<model>"
    else:
        label = os.fspath(source)
        if not os.path.exists(label):
            raise ProvmapError(f"{label}: no such file")
        if os.path.isdir(label):
            raise ProvmapError(f"{label}: is a directory, not an ONNX file")
        try:
            model = onnx.load(label)
        except Exception as e:  # DecodeError, truncated files, external-data problems
            raise ProvmapError(f"{label}: not a readable ONNX model ({type(e).__name__}: "
                               f"{str(e).splitlines()[0] if str(e) else 'parse error'})") from None
        if not model.graph.node and not model.graph.output:
            raise ProvmapError(f"{label}: not a readable ONNX model (empty graph)")
    if check:
        try:
            onnx.checker.check_model(model)
        except onnx.checker.ValidationError as e:
            first = next((ln for ln in str(e).splitlines() if ln.strip()), str(e))
            raise ProvmapError(f"{label}: fails onnx.checker: {first}") from None
    return model, label


@dataclass
class Imported:
    """The imported module plus everything propagation needs (TVM objects, not serialised)."""

    mod: tvm.IRModule
    pmap: ProvenanceMap
    var_expr: dict  # Relax Var (of "main") -> expression ID
    const_exprs: set = field(default_factory=set)  # IDs of bindings computed from constants only
    label: str = ""
    # The ONNX model actually imported (topologically sorted if the file was not), and each ONNX
    # tensor name's Relax value in "main" (a Var, a param, or a folded constant).  Partitioning
    # needs both views of the same region: provmap.runtime_module.subgraph builds on these.
    model: onnx.ModelProto | None = None
    tensor_values: dict = field(default_factory=dict)
    #: ONNX node index -> why the Relax frontend could not convert it (an opaque binding).
    opaque: dict = field(default_factory=dict)
    #: ONNX node index -> why it was replaced by a Constant before import (provmap.provenance.fold).
    folded: dict = field(default_factory=dict)
    #: ONNX shape inference on `model` (tensor name -> TypeProto), computed once for the
    #: importer's opaque bindings and reused by GraphView (it is seconds on big models).
    onnx_types: dict = field(default_factory=dict)
    #: Input shapes the user fixed (NAME -> dims), recorded in artifacts.
    input_shapes: dict = field(default_factory=dict)


_ONNX_DOMAINS = ("", "ai.onnx")
#: Handled by TVM's importer only through its own If path (no dataflow block) or not at all; as
#: opaque bindings they never stop the model, and the backends that run them keep them.
_CONTROL_FLOW = {"If", "Loop", "Scan"}
OPAQUE_PREFIX = "provmap.opaque."


def _relax_type(tp) -> object:
    """Relax type of an ONNX value for an opaque binding: static where ONNX inference knows."""
    if tp is None or not tp.HasField("tensor_type") or not tp.tensor_type.elem_type:
        return relax.ObjectType()
    tt = tp.tensor_type
    try:
        dtype = str(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type))
    except Exception:
        return relax.ObjectType()
    if tt.elem_type == onnx.TensorProto.STRING or dtype == "object":
        return relax.ObjectType()
    if tt.elem_type == onnx.TensorProto.BFLOAT16:
        dtype = "bfloat16"
    if not tt.HasField("shape"):
        return relax.TensorType(None, dtype, ndim=-1)
    dims = tt.shape.dim
    if all(d.HasField("dim_value") for d in dims):
        return relax.TensorType([int(d.dim_value) for d in dims], dtype)
    return relax.TensorType(None, dtype, ndim=len(dims))


class _NotComputed(Exception):
    """A converter that succeeds but does not compute every output the model reads."""


class _TrackingImporter(_fe.ONNXGraphImporter):
    """TVM's importer, one node at a time, never stopped by a node it cannot convert.

    A node the Relax frontend cannot take (an op it lacks, a domain it ignores, control flow, a
    converter that raises) becomes an *opaque binding*: a pure packed call to
    "provmap.opaque.<op>" reading the node's inputs and typed from ONNX shape inference.  It
    carries the node's IDs like any other binding; the TVM backend declines it with the reason
    recorded here, and the backends that consume ONNX run the node as written.
    """

    def __init__(self, graph, label, shape_dict, onnx_types):
        super().__init__(shape_dict, "float32", keep_params_in_input=False, sanitize=True)
        self._graph_nodes = list(graph.node)
        self._label = label
        self._onnx_types = onnx_types
        self.node_markers: list[list] = [[] for _ in self._graph_nodes]
        self.node_values: list = [None] * len(self._graph_nodes)
        self.opaque: dict[int, str] = {}
        self.opaque_vars: set = set()
        self._known: set = set()

    def _parse_graph_input(self, graph):
        # Inputs Relax cannot type as a numeric tensor (strings, sequences, optionals) become
        # opaque object parameters; only opaque nodes read them.
        for vi in graph.input:
            if vi.name in self._nodes:
                continue
            tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
            if tt is None or not tt.elem_type or tt.elem_type == onnx.TensorProto.STRING:
                name = self._sanitize_name(vi.name) if self._sanitize else vi.name
                self._nodes[vi.name] = relax.Var(name, relax.ObjectType())
                self._num_input += 1
                self._input_names.append(vi.name)
        super()._parse_graph_input(graph)

    def _check_for_unsupported_ops(self, graph):
        pass  # decided per node in _construct_nodes: an unsupported node becomes opaque

    def _emit(self, e):
        if isinstance(e, relax.Tuple):
            return relax.Tuple([self._emit(f) for f in e.fields])
        if _is_leaf(e):
            return e
        v = self.bb.emit(e)
        if isinstance(v.ty, relax.TupleType):
            # Unpack here, not after, so the TupleGetItems land inside this node.
            return relax.Tuple([self.bb.emit(relax.TupleGetItem(v, i))
                                for i in range(len(v.ty.fields))])
        return v

    def _precheck(self, node, inputs) -> str | None:
        if node.domain not in _ONNX_DOMAINS:
            return f"operator in domain '{node.domain}' is not supported by the Relax ONNX importer"
        if node.op_type in _CONTROL_FLOW:
            return "control flow is not supported by provmap's Relax import"
        if node.op_type not in _supported_ops():
            return "operator not supported by the Relax ONNX importer"
        for x in inputs:
            if x is not None and isinstance(getattr(x, "ty", None), relax.ObjectType):
                return "reads a value the Relax import could not type (from an opaque node)"
        return None

    def _convert(self, idx, node, inputs):
        attr = self._parse_attr(node.attribute)
        attr["tvm_custom"] = {"name": node.name, "num_outputs": len(node.output)}
        if node.op_type not in _SHAPE_OK_OPS:
            # An ONNX tensor that Relax holds as a shape: give the converter a tensor.
            inputs = _fe.onnx_input(
                self._emit(relax.op.shape_to_tensor(x))
                if x is not None and isinstance(getattr(x, "ty", None), relax.ShapeType) else x
                for x in inputs)
        sym = super()._convert_operator(node.op_type, inputs, attr, self.opset)
        sym = self._emit(sym)
        outs = list(sym.fields) if isinstance(sym, relax.Tuple) else [sym]
        if node.op_type in _TUPLE_OPS:
            return sym
        wanted = [k for k, o in enumerate(node.output) if o]
        if wanted and wanted[-1] >= len(outs):
            raise _NotComputed(f"the Relax converter returns {len(outs)} of the node's "
                               f"{len(node.output)} outputs")
        # Some converters stand in a constant for an optional output they do not compute
        # (LayerNormalization's Mean/InvStdDev): a silent wrong value, unless refused here.
        runtime = any(isinstance(x, relax.Var) for x in inputs if x is not None)
        for k in wanted[1:]:
            if runtime and isinstance(outs[k], tvm.ir.Constant):
                raise _NotComputed(f"the Relax converter does not compute output {k} "
                                   f"('{node.output[k]}'): it returns a placeholder constant")
        return sym

    def _make_opaque(self, idx, node, inputs, reason):
        self.opaque[idx] = reason
        args = [x for x in inputs if isinstance(x, relax.Expr)]
        outs = [o for o in node.output]
        types = [_relax_type(self._onnx_types.get(o)) if o else relax.ObjectType() for o in outs]
        ty = types[0] if len(types) == 1 else relax.TupleType(types)
        v = self.bb.emit(relax.call_pure_packed(OPAQUE_PREFIX + node.op_type, *args, ty_args=ty))
        self.opaque_vars.add(v)
        if len(types) == 1:
            return v
        items = []
        for i in range(len(types)):
            item = self.bb.emit(relax.TupleGetItem(v, i))
            self.opaque_vars.add(item)
            items.append(item)
        return relax.Tuple(items)

    def _construct_nodes(self, graph):
        for idx, node in enumerate(graph.node):
            inputs = _fe.onnx_input(self._nodes[x] if x else None for x in node.input)
            for x in inputs:
                if isinstance(x, relax.Var):
                    self._known.add(x)
            reason = self._precheck(node, inputs)
            sym = None
            if reason is None:
                try:
                    sym = self._convert(idx, node, inputs)
                except _NotComputed as e:
                    reason = f"Relax import incomplete: {e}"
                except Exception as e:  # TVM raises many types; the message is the reason
                    msg = [ln for ln in str(e).strip().splitlines() if ln.strip()]
                    reason = f"Relax import failed: {type(e).__name__}: {msg[-1] if msg else ''}"
            if reason is not None:
                sym = self._make_opaque(idx, node, inputs, reason)
            outs = list(sym.fields) if isinstance(sym, relax.Tuple) else [sym]
            self.node_values[idx] = sym
            for o in outs:
                if isinstance(o, relax.Var) and o not in self._known:
                    self.node_markers[idx].append(o)
                    self._known.add(o)
            names = list(node.output)
            if node.op_type in _TUPLE_OPS and reason is None:
                self._nodes[names[0]] = sym
            else:
                for k, name in enumerate(names):
                    if name and k < len(outs):
                        self._nodes[name] = outs[k]


# Ops TVM's importer lets read a Relax shape directly (its own list, in _construct_nodes).
_SHAPE_OK_OPS = {"Reshape", "Resize", "ConstantOfShape", "Gather", "Slice", "Shape", "Expand",
                 "Concat", "Equal", "Where", "Cast", "CastLike", "Squeeze"}
# Ops whose converter returns a Relax tuple standing for one ONNX value (a sequence/optional).
_TUPLE_OPS = {"Optional", "OptionalGetElement", "SequenceConstruct", "SequenceEmpty",
              "SequenceErase", "SequenceInsert", "ConcatFromSequence", "SplitToSequence"}


def _supported_ops() -> set[str]:
    global _SUPPORTED
    if _SUPPORTED is None:
        _SUPPORTED = set(_fe._get_convert_map().keys())
    return _SUPPORTED


_SUPPORTED = None


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
            shape = "x".join(str(v) for v in ty.shape.values) or "scalar"
        return shape, str(ty.dtype)
    if isinstance(ty, relax.TupleType):
        return f"tuple[{len(ty.fields)}]", None
    return None, None


def _bindings(func):
    for block in func.body.blocks:
        yield from block.bindings


def _sorted(model, label):
    try:
        nid = _ids.compute_node_ids(model.graph)
    except _ids.GraphOrderError as e:
        raise ProvmapError(f"{label}: {e}") from None
    if nid.topo_order == list(range(len(model.graph.node))):
        return model, nid
    # The importer walks nodes in file order; an unsorted file would fail obscurely there.
    sorted_model = onnx.ModelProto()
    sorted_model.CopyFrom(model)
    del sorted_model.graph.node[:]
    sorted_model.graph.node.extend(model.graph.node[i] for i in nid.topo_order)
    return sorted_model, _ids.compute_node_ids(sorted_model.graph)


def import_onnx(source, shape_dict: dict | None = None, label: str | None = None,
                check: bool = True, require_static: bool = False, fold: bool = True) -> Imported:
    """Import a model (path or ModelProto) into Relax and build the ONNX<->Relax half of the map.

    `shape_dict` fixes input shapes (NAME -> dims, as `--input-shape` gives them);
    `require_static` refuses, naming each input and dimension, a model whose input shapes stay
    symbolic (partitioning needs them).  `fold` evaluates constant shape arithmetic on the ONNX
    graph first (provmap.provenance.fold).  `check=False` skips onnx.checker, for models provmap cut
    itself from a checked one (the checker serializes the whole model).
    """
    model, default_label = load_model(source, check=check)
    label = label or default_label
    model = apply_input_shapes(model, shape_dict, label, require_static=require_static)
    model, nid = _sorted(model, label)
    original = model.graph
    folded: dict[int, str] = {}
    if fold:
        res = fold_constants(model)
        model, folded = res.model, res.folded
    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in _ONNX_DOMAINS), 1)
    onnx_types = infer_types(model)
    imp = _TrackingImporter(graph, label, {}, onnx_types)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "unknown dimension" advice: shapes are checked above
            mod = imp.from_onnx(graph, opset)
    except ProvmapError:
        raise
    except Exception as e:
        msg = [ln for ln in str(e).strip().splitlines() if ln.strip()]
        raise ProvmapError(f"{label}: import failed: {type(e).__name__}: {msg[-1] if msg else ''}") from None
    imported = _build_map(mod, imp, original, nid, label)
    for i, why in folded.items():
        if why == FOLD_REASON:
            imported.pmap.nodes[i].elided = why
    imported.model = model
    imported.tensor_values = dict(imp._nodes)
    imported.opaque = dict(imp.opaque)
    imported.onnx_types = onnx_types
    imported.folded = folded
    imported.input_shapes = {k: list(v) for k, v in (shape_dict or {}).items()}
    return imported


def _build_map(mod, imp: _TrackingImporter, graph, nid: _ids.NodeIds, label: str) -> Imported:
    func = mod["main"]
    bindings = list(_bindings(func))
    var_index = {b.var: i for i, b in enumerate(bindings)}

    # Attribute bindings to nodes by position: node i owns everything after node i-1's last
    # marker up to and including its own last marker.
    owner: list[int | None] = [None] * len(bindings)
    start = 0
    for i, markers in enumerate(imp.node_markers):
        if not markers:
            continue
        end = max(var_index[m] for m in markers)
        for j in range(start, end + 1):
            owner[j] = i
        start = end + 1

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

    _link_folded(pmap, imp, graph, nid, owner, short)
    return Imported(mod=_attach_ids(mod, short), pmap=pmap, var_expr=var_expr,
                    const_exprs=const_exprs, label=label)


def _value_key(value, bindings, var_index, digests) -> bytes:
    vs = relax.analysis.free_vars(value)
    return _ids._h("value", _expr_op(value), [digests[var_index[v]].hex() if v in var_index else v.name
                                             for v in vs])


def _link_folded(pmap, imp, graph, nid, owner, short):
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
        # Zero-binding ancestors reachable through zero-binding nodes only.
        for x in graph.node[i].input:
            p = producer_of.get(x)
            if p is None or p in produced or p in seen:
                continue
            seen.add(p)
            folded_sources(p, seen)
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
            if isinstance(f, relax.Var):
                kinds.add("alias of an existing value (no computation)")
            elif isinstance(f, relax.ShapeExpr) or "Prim" in type(f).__name__:
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


def mark_not_compilable(pmap: ProvenanceMap, imported: Imported) -> int:
    """In an all-TVM map, report opaque nodes as "not compilable by TVM: reason".

    The build compiles around them (an opaque binding is a packed call TVM never resolves), so
    their placeholder call sites are dropped from the map rather than shown as kernels; every
    other node maps as usual.  Returns how many nodes were marked.
    """
    if not imported.opaque:
        return 0
    fake = {s.id for s in pmap.sites if s.kernel.startswith(OPAQUE_PREFIX)}
    pmap.sites = [s for s in pmap.sites if s.id not in fake]
    pmap.site_exprs = [t for t in pmap.site_exprs if t[0] not in fake]
    pmap.kernels = [k for k in pmap.kernels if not k.name.startswith(OPAQUE_PREFIX)]
    for i, reason in imported.opaque.items():
        pmap.nodes[i].elided = f"not compilable by TVM: {reason}"
    return len(imported.opaque)
