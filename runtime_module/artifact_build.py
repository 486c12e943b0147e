"""Building an artifact in memory: every partition of a plan built by its backend, the
provenance map of what each kernel computes, the manifest that names them.

Why apart from artifact.py: reading an artifact (which a stranger may have sent) needs none of
this and must not import the build's machinery (TVM among it: issue 36); the container, its
reading and its writing stay in artifact.py, what a compile assembles is here.
"""

from __future__ import annotations

import datetime as _dt
import io
import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from provmap.provenance import store
from provmap.provenance.model import Kernel, KernelSite, ProvenanceMap
from provmap.provenance.util.errors import ProvmapError

from .artifact import FORMAT, FORMAT_VERSION, Artifact
from .backend import Backend, BackendError
from .host import host_info, provmap_version as _provmap_version
from .plan import Plan, order_plan
from .spinning import quiet_spinning
from .staged import digest

if TYPE_CHECKING:  # pragma: no cover
    from .graph_view import GraphView


def build_artifact(view: GraphView, plan: Plan, backends: dict[str, Backend],
                   progress=None, blobs: dict | None = None) -> Artifact:
    """Build every partition of `plan` with its backend and assemble the artifact in memory.

    `blobs` may hold blobs already built for this view, keyed by (sorted op node indices,
    backend name, backend options as JSON); what is built here is added to it, so plans that share partitions (the
    second-level search's proposals) build each once.  Not the structural key: that one
    ignores weight values, and two identical blocks with different weights must not share code.
    The ONNX model itself is embedded afterwards, by `embed_source_model`: the view holds only
    the derived model, and the one to embed is the user's.
    """
    from .partitioned import partitioned_module
    from .index_bounds import index_inputs
    from .subgraph import Subgraph
    from .kernel_sites import kernel_sites, uncomputed

    say = progress or (lambda _msg: None)
    plan = order_plan(view, plan)
    backends = quiet_spinning(plan, backends)
    imp = view.imported
    members: dict[str, bytes] = {}
    parts = []
    kernels: list[Kernel] = []
    sites: list[KernelSite] = []
    site_exprs: list[tuple[str, str, str]] = []
    const = imp.const_exprs
    for p in plan.partitions:
        be = backends.get(p.backend)
        if be is None:
            raise ProvmapError(f"plan {plan.strategy}: backend {p.backend!r} was not configured")
        sub = Subgraph(view, p.ops)
        say(f"building {p.id} on {p.backend} ({len(p.ops)} op node{'s' if len(p.ops) != 1 else ''})")
        bkey = (tuple(sorted(p.ops)), p.backend, json.dumps(be.options(), sort_keys=True,
                                                          default=str))
        blob = (blobs or {}).get(bkey)
        if blob is None:
            try:
                blob = be.build(sub)
            except BackendError as e:
                raise ProvmapError(f"{imp.label}: partition {p.id} ({p.backend}, starting at "
                                   f"{view.describe(p.ops[0])}): {e}") from None
            if blobs is not None:
                blobs[bkey] = blob
        for note in be.build_notes(sub):
            say(f"note: {p.id} ({p.backend}): {note}")
        files = {}
        for name, data in blob.files.items():
            member = f"partitions/{p.id}/{name}"
            members[member] = data
            files[member] = digest(data)
        src_member = f"partitions/{p.id}/source.txt"
        members[src_member] = blob.source.encode()
        # Provenance: one kernel per (partition, kernel name), one site per KernelInfo.
        ks, ss, es = kernel_sites(view, p.id, p.backend, blob, sub.closure, const)
        kernels += ks
        sites += ss
        site_exprs += es
        knames = [k.name for k in ks]
        folded = uncomputed(view, p.ops, es)
        if folded:
            say(f"{p.id} on {p.backend}: its kernels compute {len(p.ops) - folded} of the "
                f"{len(p.ops)} op nodes it was given; the other {folded} "
                f"{'was' if folded == 1 else 'were'} elided (an alias, "
                f"or constant at these shapes): inspect's node states list them")
        parts.append({
            "id": p.id,
            "backend": p.backend,
            "type_key": f"provmap.{p.backend}",
            "why": p.why,
            "ops": [view.node_ids[i] for i in p.ops],
            "onnx_nodes": [view.node_ids[i] for i in sub.closure],
            "exprs": list(sub.exprs),
            "inputs": [t.to_dict() for t in sub.inputs],
            "outputs": [t.to_dict() for t in sub.outputs],
            "runner_inputs": list(blob.meta.get("input_names", [t.name for t in sub.inputs])),
            "runner_outputs": list(blob.meta.get("output_names", [t.name for t in sub.outputs])),
            "blob_meta": blob.meta,
            "files": files,
            "source": src_member,
            "kernels": knames,
            "key": sub.key,
        })

    pmap = ProvenanceMap(meta=dict(imp.pmap.meta), nodes=list(imp.pmap.nodes),
                         exprs=list(imp.pmap.exprs), kernels=kernels, sites=sites,
                         node_exprs=list(imp.pmap.node_exprs), site_exprs=site_exprs)
    pmap.meta.update({"strategy": plan.strategy, "backends": plan.backends()})
    members["map.json"] = json.dumps(pmap.to_dict(), sort_keys=True).encode()
    with tempfile.TemporaryDirectory(prefix="provmap-map-") as d:
        members["map.sqlite"] = Path(store.save_sqlite(pmap, Path(d) / "map.sqlite")).read_bytes()
    try:
        members["partitioned.relax"] = partitioned_module(view, plan).script().encode()
    except Exception as e:  # a readable extra (TVM raises many types): never a reason to fail
        members["partitioned.relax"] = (f"# the partitioned Relax module could not be printed: "
                                        f"{e}\n").encode()
    constants = {}
    for k, (name, value) in enumerate(view.constant_outputs().items()):
        member = f"constants/{k}.npy"
        buf = io.BytesIO()
        np.save(buf, value, allow_pickle=False)
        members[member] = buf.getvalue()
        constants[name] = member

    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "provmap_version": _provmap_version(),
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "host": host_info(),
        "model": {
            "name": imp.label,
            # The model as the user gave it, and the one provmap compiled (the same unless
            # `derived` says what changed): compare and annotate accept both, by these hashes.
            "sha256": view.source_sha256,
            "derived_sha256": view.model_sha256,
            "derived": list(imp.derived),
            "inputs": [view.spec(n).to_dict() for n in view.graph_inputs],
            # "shape_from": "declaration": nothing computed that shape, the run returns what
            # the backend computes (module.py; provmap.provenance.normalize.reconcile_outputs).
            "outputs": [dict(view.spec(n).to_dict(), **({"shape_from": "declaration"}
                                                        if n in getattr(imp, "output_hints", ()) else {}))
                        for n in dict.fromkeys(view.graph_outputs)],  # once each (ORT runs
            # a graph listing one output twice; the artifact named it twice and refused itself)
            "onnx_nodes": len(view.nodes),
            "op_nodes": len(view.op_nodes),
            "input_shapes_given": dict(imp.input_shapes),
            # the sizes a dynamic artifact serves (provmap.provenance.profile); absent: static
            **({"shape_profile": imp.profile.to_json()} if getattr(imp, "profile", None) else {}),
            "not_compilable_by_tvm": {view.node_ids[i]: why for i, why in imp.opaque.items()},
            "folded_before_import": len(imp.folded),
            "index_inputs": index_inputs(view),
        },
        "strategy": plan.strategy,
        "plan_info": plan.info,
        "backends": {name: backends[name].describe() for name in plan.backends()},
        "partitions": parts,
        "constant_outputs": constants,
        "coverage": pmap.coverage(),
        "warnings": list(imp.warnings),  # said at compile, and by inspect/compare from here
    }
    return Artifact(manifest=manifest, members=members, built_here=True)
