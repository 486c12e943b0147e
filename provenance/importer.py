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

from . import ids as _ids, weights
from .binding_map import build_map
from .util.errors import ProvmapError, first_line
from .util.files import refuse_absent_model, unreadable_model
from .fold import FOLD_REASON, fold_constants, infer_types, weightless
from .int8_pairs import saturation_warning
from .model import ProvenanceMap, mark_vm_evaluated
from .normalize import (drop_stale_value_info, duplicate_node_names, file_order_of,
                        for_checker, frozen_inputs, normalize, reconcile_outputs)
from .profile import profile_text
from .shapes import apply_input_shapes, build_profile, failure_hint, named_size_conflicts
from .symbolic import open_input_symbols
from .tracking import ONNX_DOMAINS, OPAQUE_PREFIX, TrackingImporter
from .type_oracle import TypeOracle


def read_model(source) -> tuple[onnx.ModelProto, str]:
    """The model as the user gave it (a path or a ModelProto), unchanged: its hash is the one
    artifacts record as the user's.  Read from a file, its large external weights stay there
    (provenance.weights: every derived copy below would copy them otherwise).  Every failure
    is a ProvmapError naming the file."""
    if isinstance(source, onnx.ModelProto):
        return source, source.graph.name or "<model>"
    label = os.fspath(source)
    refuse_absent_model(label)
    try:
        model = weights.load(label)  # large external weights stay in their file, mapped
    except Exception as e:  # DecodeError, truncated files, external-data problems
        raise unreadable_model(label, first_line(e, with_type=True)) from None
    if not model.graph.node and not model.graph.output:
        raise ProvmapError(f"{label}: not a readable ONNX model (empty graph)")
    return model, label


def checked(model: onnx.ModelProto, label: str, check: bool = True) -> onnx.ModelProto:
    """`model` normalized as ONNX Runtime would read it (provmap.provenance.normalize; the same
    object when nothing needed it), then validated with onnx.checker unless `check` is False."""
    model = normalize(model)
    if check:
        try:
            onnx.checker.check_model(for_checker(weights.checkable(model)))
        except onnx.checker.ValidationError as e:
            first = next((ln for ln in str(e).splitlines() if ln.strip()), str(e))
            raise ProvmapError(f"{label}: fails onnx.checker: {first}") from None
    return model


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
    #: ONNX node index -> why TVM computes it in float32 between Casts (provmap.provenance.half).
    widened: dict = field(default_factory=dict)
    #: ONNX node index -> why it was replaced by a Constant before import (provmap.provenance.fold).
    folded: dict = field(default_factory=dict)
    #: ONNX shape inference on `model` (tensor name -> TypeProto), computed once for the
    #: importer's opaque bindings and reused by GraphView (it is seconds on big models).
    onnx_types: dict = field(default_factory=dict)
    #: Input shapes the user fixed (NAME -> dims), recorded in artifacts.
    input_shapes: dict = field(default_factory=dict)
    #: The sizes a dynamic import serves (provmap.provenance.profile); None when every input
    #: dimension is a size (a static import) or nothing was required of them (the map).
    profile: object = None
    #: The model as the user gave it is the reference (compare, annotate, --embed-model), not
    #: `model`, which provmap derived from it.  What was derived, in words (empty: `model` is the
    #: given model), and the given model's SHA-256 (provmap.provenance.ids.model_sha256), taken
    #: before anything changed it; None when nothing did (then it is `model`'s own).
    derived: list = field(default_factory=list)
    source_sha256: str | None = None
    #: What the user should hear once about the model (a graph output declared with a shape
    #: it does not compute: provmap.provenance.normalize.reconcile_outputs).
    warnings: list = field(default_factory=list)
    #: Graph outputs whose shape (or some size of it) only the model's declaration gives:
    #: a hint the executor does not hold a backend to (provmap.provenance.normalize).
    output_hints: list = field(default_factory=list)
    #: ONNX node index -> why TVM cannot legalize its bindings; None until first asked
    #: (provmap.provenance.salvage.failing_nodes).
    tvm_failures: dict | None = None


def _sorted(model, label, as_given):
    """`model` in topological order, and its node IDs with the graph inputs typed as in
    `as_given` (the model before the input shapes were fixed): an ID names the node, not the
    sizes one compile gave its inputs, so a static import and a dynamic one agree."""
    inputs = list(as_given.graph.input)
    try:
        nid = _ids.compute_node_ids(model.graph, inputs=inputs)
    except _ids.GraphOrderError as e:
        raise ProvmapError(f"{label}: {e}") from None
    if nid.topo_order == list(range(len(model.graph.node))):
        return model, nid
    # The importer walks nodes in file order; an unsorted file would fail obscurely there.
    sorted_model = onnx.ModelProto()
    sorted_model.CopyFrom(model)
    del sorted_model.graph.node[:]
    sorted_model.graph.node.extend(model.graph.node[i] for i in nid.topo_order)
    return sorted_model, _ids.compute_node_ids(sorted_model.graph, inputs=inputs)


def import_onnx(source, *args, **kwargs) -> Imported:
    """`_import_onnx` with the weights' pages shed as it goes (provenance.weights.shedding):
    the node IDs' digests, the frontend and the model's hash each read every weight once, and
    the pages read stayed resident until the end (a 1B decoder's import peaked at its 4 GB of
    weights plus 1.5 GB)."""
    with weights.shedding():
        return _import_onnx(source, *args, **kwargs)


def _import_onnx(source, shape_dict: dict | None = None, label: str | None = None,
                 check: bool = True, require_static: bool = False, fold: bool = True,
                 not_compilable: dict | None = None,
                 type_oracle: TypeOracle | None = None, dims: dict | None = None) -> Imported:
    """Import a model (path or ModelProto) into Relax and build the ONNX<->Relax half of the map.

    `shape_dict` sizes input axes (NAME -> dims, each a size or a provenance.profile.DimRange,
    as `--input-shape` gives them), `dims` the model's symbols (`--dim`);
    `require_static` refuses, naming each input and dimension, a model whose input dimensions
    are left with neither a size nor a range (partitioning needs one of them); the ranges form
    the shape profile the artifact serves (`Imported.profile`).  `fold` evaluates constant shape arithmetic on the ONNX
    graph first (provmap.provenance.fold).  `check=False` skips onnx.checker, for models provmap cut
    itself from a checked one (the checker serializes the whole model).  `not_compilable` (node
    index -> reason) makes those nodes opaque as if the frontend could not convert them: nodes
    a previous import's TVM build failed on (provmap.provenance.salvage).  `type_oracle` types
    what ONNX's inference cannot (provmap.provenance.type_oracle): without it, tensors after
    operators onnx has no schema for stay untyped.
    """
    given, default_label = read_model(source)
    label = label or default_label
    model = checked(given, label, check)
    derived = ["normalized as ONNX Runtime reads it (provmap.provenance.normalize)"] \
        if model is not given else []
    normalized = model
    write, profile = build_profile(model, shape_dict, dims, label, require_all=require_static)
    model = apply_input_shapes(model, write, label, require_static=False)
    if model is not normalized:
        derived.append(f"input shapes fixed ({profile_text(shape_dict, dims)})")
    model, stale = drop_stale_value_info(model)
    if stale:
        derived.append("stale value_info dropped")
    shaped = model
    model, nid = _sorted(model, label, normalized)
    if model is not shaped:
        derived.append("nodes sorted into topological order")
    original = model.graph
    folded: dict[int, str] = {}
    if fold:
        res = fold_constants(model, type_oracle=type_oracle)
        model, folded = res.model, res.folded
    if folded:
        derived.append(f"{len(folded)} node(s) folded to constants")
    reconciled = model
    declared: set[str] = set()
    model, onnx_types, notes, hints = reconcile_outputs(
        model, infer_types(model, declared, type_oracle), declared)
    if model is not reconciled:
        derived.append("graph output shapes as computed, not as declared")
    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ONNX_DOMAINS), 1)
    imp = TrackingImporter(graph, label, {}, onnx_types, not_compilable,
                           symbolic_types(model, type_oracle))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "unknown dimension" advice: shapes are checked above
            mod = imp.from_onnx(graph, opset)
    except ProvmapError:
        raise
    except Exception as e:
        msg = [ln for ln in str(e).strip().splitlines() if ln.strip()]
        raise ProvmapError(f"{label}: import failed: {type(e).__name__}: {msg[-1] if msg else ''}"
                           f"{failure_hint(model)}") from None
    mod, pmap, var_expr, const_exprs = build_map(mod, imp, original, nid, label)
    imported = Imported(mod=mod, pmap=pmap, var_expr=var_expr, const_exprs=const_exprs,
                        label=label)
    file_order = file_order_of(given, imported.pmap.nodes)
    if file_order is not None:  # "#N" says the node's position in the user's file
        imported.pmap.meta["file_order"] = file_order
    for i, why in folded.items():
        if why == FOLD_REASON:
            imported.pmap.nodes[i].elided = why
    imported.model = model
    imported.tensor_values = dict(imp._nodes)
    imported.opaque = dict(imp.opaque)
    imported.widened = dict(imp.widened)
    imported.onnx_types = onnx_types
    imported.folded = folded
    imported.input_shapes = {k: list(v) for k, v in (shape_dict or {}).items()
                             if all(isinstance(d, int) for d in v)}
    imported.profile = profile if profile.dynamic or profile.symbols else None
    imported.derived = derived
    if model is not given:
        imported.source_sha256 = _ids.model_sha256(given)
    imported.warnings = [f"{label}: {w}" for w in stale + notes + saturation_warning(model)
                         + frozen_inputs(given) + duplicate_node_names(given)
                         + named_size_conflicts(given, shape_dict)]
    imported.output_hints = sorted(hints)
    weights.release()  # hashed and imported: what is read again is read from the file
    return imported


def symbolic_types(model: onnx.ModelProto, type_oracle: TypeOracle | None) -> dict:
    """The oracle's symbolic types when some input dimension stays open ({} otherwise: a static
    model's shapes are all Relax needs, and the inference costs seconds on big graphs)."""
    ask = getattr(type_oracle, "symbolic_types", None)
    if ask is None or not open_input_symbols(model):
        return {}
    return ask(weightless(model))


def mark_not_compilable(pmap: ProvenanceMap, imported: Imported) -> int:
    """In an all-TVM map, report opaque nodes as "not compilable by TVM: reason".

    The build compiles around them (an opaque binding is a packed call TVM never resolves), so
    their placeholder call sites are dropped from the map rather than shown as kernels; every
    other node maps as usual.  Returns how many nodes were marked.
    """
    if not imported.opaque:
        return 0
    fake = {s.id for s in pmap.sites if s.kernel.startswith(OPAQUE_PREFIX)}
    via_placeholder = {e for sid, e, _ in pmap.site_exprs if sid in fake}
    pmap.sites = [s for s in pmap.sites if s.id not in fake]
    pmap.site_exprs = [t for t in pmap.site_exprs if t[0] not in fake]
    pmap.kernels = [k for k in pmap.kernels if not k.name.startswith(OPAQUE_PREFIX)]
    for i, reason in imported.opaque.items():
        pmap.nodes[i].elided = f"not compilable by TVM: {reason}"
    mark_vm_evaluated(pmap)  # a Shape read only by an opaque node reached its placeholder only
    # A node whose every binding only ever reached placeholders (a QuantizeLinear of a constant
    # that FoldConstant folded into a com.microsoft op's arguments): nothing of it runs in TVM.
    # Only when every reader really is such a node: one a mapped kernel reads was lost by
    # propagation, and stays unaccounted for debugify to report.
    reached = {e for _, e, _ in pmap.site_exprs}
    exprs: dict = {}
    for nid, eid, _ in pmap.node_exprs:
        exprs.setdefault(nid, set()).add(eid)
    readers: dict = {}
    for n in pmap.nodes:
        for t in n.inputs:
            readers.setdefault(t, []).append(n.index)
    outputs = {o.name for o in imported.model.graph.output} if imported.model else set()
    unbuilt = set(imported.opaque)
    for n in reversed(pmap.nodes):  # readers first (graph order is topological): chains too
        mine = exprs.get(n.id, set())
        if n.elided or not mine or mine & reached or not mine & via_placeholder:
            continue
        if any(o in outputs for o in n.outputs) or not all(
                r in unbuilt for o in n.outputs if o for r in readers.get(o, ())):
            continue
        n.elided = ("read only by nodes not compilable by TVM: its value goes into their "
                    "placeholder calls, and no TVM kernel computes it")
        unbuilt.add(n.index)
    return len(imported.opaque)

