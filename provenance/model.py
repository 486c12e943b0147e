"""The provenance map's in-memory data model.

Everything a user can ask of a build ("which ONNX nodes does kernel K implement?", "which kernels
carry ONNX node X?") is answered from these plain records, so they are deliberately free of TVM
objects: a map loaded from JSON or SQLite on a machine without TVM is the same thing as one built
in-process.  Links are stored explicitly in both directions' join tables (the store indexes both
columns) rather than as nested lists, because dispatch-time lookups must be one indexed query.
"""

from __future__ import annotations

from dataclasses import dataclass, field, asdict

SCHEMA_VERSION = 1

# Roles of an ONNX node -> Relax expression link.
ROLE_PRODUCED = "produced"  # the node's converter emitted this binding
ROLE_FOLDED = "folded"      # the node produced no binding; its value was folded into this consumer

# Roles of a kernel site -> Relax expression link.
ROLE_COMPUTE = "compute"    # the kernel computes this binding (directly or fused)
ROLE_CONSTANT = "constant"  # the binding was constant-folded into an argument of the kernel

#: The elision reason of a node provenance/fold.py evaluated before import; kept here, with the
#: map's other words, so reading an artifact never imports onnx to compare against it.
FOLD_REASON = "folded to a constant before import (evaluated by onnx.reference)"


@dataclass
class OnnxNode:
    """One node of the source ONNX graph.

    `id` is content-derived (see provmap.provenance.ids); `name` is recorded for humans but never used
    as a key, because ONNX names may be empty, duplicated or renamed by tools.
    """

    id: str
    name: str
    op_type: str
    domain: str
    index: int
    inputs: list[str]
    outputs: list[str]
    elided: str | None = None  # why the node produced no Relax binding, if it produced none


@dataclass
class RelaxExpr:
    """One binding of the imported Relax function (the stable unit of provenance)."""

    id: str
    function: str
    var: str
    op: str
    shape: str | None
    dtype: str | None
    index: int  # position of the binding in its function at import time


@dataclass
class Kernel:
    """A compiled kernel: a PrimFunc, a VM builtin, or an external/packed function.

    One kernel is often called from several sites (TVM deduplicates structurally equal
    functions), so provenance hangs off KernelSite, and a kernel's provenance is the union of its
    sites'.  `function` names the module-level function that holds the kernel's code (for TVM,
    its global symbol; for an offloaded partition, the partition function).
    """

    name: str
    function: str
    backend: str
    kind: str  # "primfunc" | "builtin" | "packed" | "external"


@dataclass
class KernelSite:
    """One call of a kernel from the executable (e.g. the 3rd call of fused_conv2d_add_relu)."""

    id: str       # "<caller>/<kernel>#<k>", k = occurrence of this kernel in the caller
    kernel: str
    caller: str
    ordinal: int  # position of the call among the caller's kernel calls


@dataclass
class ProvenanceMap:
    meta: dict = field(default_factory=dict)
    nodes: list[OnnxNode] = field(default_factory=list)
    exprs: list[RelaxExpr] = field(default_factory=list)
    kernels: list[Kernel] = field(default_factory=list)
    sites: list[KernelSite] = field(default_factory=list)
    node_exprs: list[tuple[str, str, str]] = field(default_factory=list)  # (node_id, expr_id, role)
    site_exprs: list[tuple[str, str, str]] = field(default_factory=list)  # (site_id, expr_id, role)

    # ---- derived views -------------------------------------------------------------------
    def file_index(self, index: int) -> int:
        """The position in the model as the user gave it of the node at `index` (its position
        in the graph provmap imported).  They differ when provmap sorted an unsorted model
        (meta "file_order": position as imported -> position in the file); "ONNX node #52" then
        named another node of the user's file (issue 36's sixth afternoon).  A map read from a
        file keeps file_order only when it is a permutation of its nodes (from_dict)."""
        order = self.meta.get("file_order")
        return order[index] if order and 0 <= index < len(order) else index

    def node_sites(self) -> list[tuple[str, str, str]]:
        """(node_id, site_id, role) for every ONNX node reachable from a kernel site.

        The role says how the kernel carries the node, strongest path wins: "compute" (the
        kernel computes one of the node's bindings), "constant" (a binding was constant-folded
        into the kernel's arguments), "folded" (the node's value was folded at import into a
        binding the kernel computes, e.g. shape arithmetic or an Identity).
        """
        rank = {ROLE_COMPUTE: 0, ROLE_CONSTANT: 1, ROLE_FOLDED: 2}
        by_expr: dict[str, list[tuple[str, str]]] = {}
        for nid, eid, nrole in self.node_exprs:
            by_expr.setdefault(eid, []).append((nid, nrole))
        best: dict[tuple[str, str], str] = {}
        for sid, eid, srole in self.site_exprs:
            for nid, nrole in by_expr.get(eid, ()):
                role = ROLE_FOLDED if nrole == ROLE_FOLDED else srole
                key = (nid, sid)
                if key not in best or rank[role] < rank[best[key]]:
                    best[key] = role
        return [(n, s, r) for (n, s), r in sorted(best.items())]

    def coverage(self) -> dict:
        """Counts the CLI prints: every node must be mapped or elided, every kernel mapped.

        A node is mapped when a kernel computes it (role "compute"), as placement's "ran on a
        backend" counts it; a node only folded into a kernel's value (a Shape chain, an
        Identity) or elided is elided.  Counting those as mapped made coverage say 11/11
        mapped where the node states said 3 ran, 7 folded, 1 elided (issue 36)."""
        sites = self.node_sites()
        carried = {n for n, _, _ in sites}
        mapped_nodes = {n for n, _, r in sites if r == ROLE_COMPUTE}
        site_kernel = {s.id: s.kernel for s in self.sites}
        mapped_kernels = {site_kernel[s] for s, _, _ in self.site_exprs if s in site_kernel}
        elided = [n for n in self.nodes if n.id not in mapped_nodes and
                  (n.elided or n.id in carried)]
        unmapped = [n for n in self.nodes if n.id not in mapped_nodes and not n.elided and
                    n.id not in carried]
        return {
            "onnx_nodes_total": len(self.nodes),
            "onnx_nodes_mapped": len(mapped_nodes & {n.id for n in self.nodes}),
            "onnx_nodes_elided": len(elided),
            "onnx_nodes_unaccounted": len(unmapped),
            "relax_exprs_total": len(self.exprs),
            "kernels_total": len(self.kernels),
            "kernels_mapped": sum(1 for k in self.kernels if k.name in mapped_kernels),
            "kernel_sites_total": len(self.sites),
            "kernel_sites_mapped": len({s for s, _, _ in self.site_exprs}),
        }

    def to_dict(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "meta": self.meta,
            "onnx_nodes": [asdict(n) for n in self.nodes],
            "relax_exprs": [asdict(e) for e in self.exprs],
            "kernels": [asdict(k) for k in self.kernels],
            "kernel_sites": [asdict(s) for s in self.sites],
            "node_exprs": [list(t) for t in self.node_exprs],
            "site_exprs": [list(t) for t in self.site_exprs],
        }

    @classmethod
    def from_dict(cls, d: dict) -> "ProvenanceMap":
        if d.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(
                f"provenance map schema version {d.get('schema_version')!r} is not supported "
                f"(this provmap reads version {SCHEMA_VERSION})"
            )
        meta = dict(d.get("meta", {}))
        order = meta.get("file_order")
        if order is not None and not _is_permutation(order, len(d["onnx_nodes"])):
            del meta["file_order"]  # a stranger's: "#N" then counts as imported, never past it
        return cls(
            meta=meta,
            nodes=[OnnxNode(**n) for n in d["onnx_nodes"]],
            exprs=[RelaxExpr(**e) for e in d["relax_exprs"]],
            kernels=[Kernel(**k) for k in d["kernels"]],
            sites=[KernelSite(**s) for s in d["kernel_sites"]],
            node_exprs=[tuple(t) for t in d["node_exprs"]],
            site_exprs=[tuple(t) for t in d["site_exprs"]],
        )


#: Relax ops the VM evaluates itself, through a builtin that is plumbing, not a kernel
#: (relax_keys.PLUMBING_PACKED): a tensor's shape read at run time.  A Shape node of a tensor
#: whose sizes are known only then (an opaque node's output) is such a binding.
VM_EVALUATED = {"relax.shape_of": "vm.builtin.shape_of"}


def mark_vm_evaluated(pmap: ProvenanceMap) -> int:
    """Give a node that reaches no kernel only because the VM evaluates all of its bindings
    itself that reason (else it would count as unaccounted).  Run again once placeholder sites
    are dropped (importer.mark_not_compilable): before that, an opaque consumer's placeholder
    still seems to reach such a binding.  Returns how many nodes it marked."""
    from collections import defaultdict

    reached = {e for _, e, _ in pmap.site_exprs}
    op = {e.id: e.op for e in pmap.exprs}
    by_node = defaultdict(list)
    for nid, eid, _ in pmap.node_exprs:
        by_node[nid].append(eid)
    marked = 0
    for n in pmap.nodes:
        exprs = by_node.get(n.id, ())
        if n.elided or not exprs or any(e in reached for e in exprs):
            continue
        if all(op.get(e) in VM_EVALUATED for e in exprs):
            builtins = sorted({VM_EVALUATED[op[e]] for e in exprs})
            n.elided = (f"evaluated by the VM itself ({', '.join(builtins)}: the shape of a "
                        "tensor known only at run time), not by a kernel")
            marked += 1
    return marked


def _is_permutation(order, n: int) -> bool:
    return (isinstance(order, list) and len(order) == n and all(type(x) is int for x in order)
            and sorted(order) == list(range(n)))
