"""Dispatch-time lookups over an artifact: ONNX node <-> backend/partition/kernel <-> Relax expr.

Everything is precomputed into dicts when the Lookup is built (once per loaded artifact), so a
query is a few dict reads and can be made from inside an execution loop; bench/ reports p99.
Kernel names are qualified by partition ("p2:fused_conv2d_add_relu") because two partitions
may both contain a kernel of the same name; a bare name matches it in every partition.
"""

from __future__ import annotations

from provmap.provenance.model import ProvenanceMap
from provmap.provenance.map_index import MapIndex


class Lookup:
    def __init__(self, manifest: dict, pmap: ProvenanceMap):
        self.map = pmap
        self._pmap = pmap
        self._index = MapIndex(pmap)
        self._kernels = {k.name: k for k in pmap.kernels}
        self._by_bare: dict[str, list[str]] = {}
        for k in pmap.kernels:
            self._by_bare.setdefault(k.name.split(":", 1)[1], []).append(k.name)
        self._partition_backend = {p["id"]: p["backend"] for p in manifest["partitions"]}
        self._nodes = {n.id: n for n in pmap.nodes}
        self._exprs = {e.id: e for e in pmap.exprs}
        self._partition_of_node: dict[str, list[str]] = {}
        for p in manifest["partitions"]:
            for nid in p["onnx_nodes"]:
                self._partition_of_node.setdefault(nid, []).append(p["id"])
        self._node_answers: dict[str, dict] = {}
        for n in pmap.nodes:
            self._node_answers[n.id] = self._answer_node(n)
        self._kernel_answers = {name: self._answer_kernel(name) for name in self._kernels}

    # -- answers ---------------------------------------------------------------------------
    def _node_dict(self, nid: str) -> dict:
        n = self._nodes[nid]
        return {"id": n.id, "name": n.name, "op_type": n.op_type,
                "index": self._pmap.file_index(n.index)}

    def _answer_node(self, n) -> dict:
        per_kernel: dict[str, dict] = {}
        for sid, kname, role in self._index.kernels_for_node(n.id):
            if kname is None:
                continue
            k = self._kernels[kname]
            entry = per_kernel.setdefault(kname, {"kernel": kname, "partition": k.function,
                                                  "backend": k.backend, "kind": k.kind,
                                                  "role": role, "sites": []})
            entry["sites"].append(sid)
            if role == "compute":
                entry["role"] = "compute"
        d = self._node_dict(n.id)
        assigned = self._partition_of_node.get(n.id, [])
        # The partitions that run the node are those whose kernels compute it: an Identity the
        # plan gave p0, aliased into a kernel of p1, was named "partition p0" while placement
        # said it ran nowhere (issue 36).  A node no kernel carries at all keeps the plan's
        # word, unless a pass elided it.
        # A kernel naming no partition of the manifest (a map from someone else) names none.
        computing = {e["partition"] for e in per_kernel.values()
                     if e["role"] == "compute" and e["partition"] in self._partition_backend}
        parts = ([p for p in assigned if p in computing] + sorted(computing - set(assigned))
                 if computing else [] if n.elided or per_kernel else assigned)
        d.update({"elided": n.elided, "partitions": parts, "assigned": assigned,
                  "backends": sorted({self._partition_backend[p] for p in parts
                                      if p in self._partition_backend}),
                  "exprs": [e for e, _ in self._index.exprs_for_node(n.id)],
                  "kernels": sorted(per_kernel.values(), key=lambda e: e["kernel"])})
        return d

    def _answer_kernel(self, kname: str) -> dict:
        k = self._kernels[kname]
        nodes = []
        for nid, _name, role in self._index.nodes_for_kernel(kname):
            d = self._node_dict(nid)
            d["role"] = role
            nodes.append(d)
        return {"kernel": kname, "partition": k.function, "backend": k.backend, "kind": k.kind,
                "onnx_nodes": sorted(nodes, key=lambda d: d["index"])}

    # -- queries ---------------------------------------------------------------------------
    def onnx_node(self, name_or_id: str) -> list[dict]:
        """Every node with this ID or name, each with its partitions, backends and kernels."""
        return [self._node_answers[n.id] for n in self._index.nodes(name_or_id)]

    def kernel(self, name: str) -> list[dict]:
        """The kernel with this qualified name, or every partition's kernel with this bare name."""
        if name in self._kernel_answers:
            return [self._kernel_answers[name]]
        return [self._kernel_answers[q] for q in self._by_bare.get(name, ())]

    def expr(self, expr_id: str) -> dict | None:
        e = self._exprs.get(expr_id)
        if e is None:
            return None
        kernels = []
        for sid, kname, role in self._index.kernels_for_expr(expr_id):
            k = self._kernels.get(kname)
            kernels.append({"kernel": kname, "site": sid, "role": role,
                            "partition": k.function if k else None,
                            "backend": k.backend if k else None})
        nodes = []
        for nid, role in self._index.nodes_for_expr(expr_id):
            d = self._node_dict(nid)
            d["role"] = role
            nodes.append(d)
        return {"expr": e.id, "function": e.function, "var": e.var, "op": e.op, "shape": e.shape,
                "dtype": e.dtype, "onnx_nodes": nodes, "kernels": kernels}

    def ops_run_by(self, partition: str) -> set[str]:
        """The ONNX nodes a kernel of `partition` computes: what its op-node count counts, so
        that an Identity the plan gave it but no kernel computes is not counted as run."""
        return {nid for nid, a in self._node_answers.items() if partition in a["partitions"]}

    def backend_of(self, name_or_id: str) -> list[str]:
        """The cheapest dispatch question: which backend(s) run this ONNX node."""
        return [b for a in self.onnx_node(name_or_id) for b in a["backends"]]

    def kernel_names(self) -> list[str]:
        return list(self._kernels)

    def node_ids(self) -> list[str]:
        return list(self._nodes)
