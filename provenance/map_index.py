"""Queries on a saved provenance map: "which kernels run ONNX node X?" and "which ONNX nodes
does kernel K implement?".

`MapIndex` answers from a loaded map; `SqliteMapIndex` answers each question with one indexed
query on the SQLite file, without loading the map (what a dispatcher does at run time).  Both
give the same answers (tested); `open_index` picks by file type."""

from __future__ import annotations

import json
import os
from pathlib import Path

from provmap.provenance.model import ROLE_COMPUTE, OnnxNode, ProvenanceMap

from .store import SQLITE_SUFFIXES, check_version, open_readonly, sqlite_errors, load


def _kernel_role(roles) -> str:
    roles = set(roles)
    return ROLE_COMPUTE if ROLE_COMPUTE in roles else min(roles)


class MapIndex:
    """Dict-based lookups over an in-memory map (built once, O(1) per query)."""

    def __init__(self, pmap: ProvenanceMap):
        self.map = pmap
        self._node_by_id = {n.id: n for n in pmap.nodes}
        self._nodes_by_name: dict[str, list[OnnxNode]] = {}
        for n in pmap.nodes:
            self._nodes_by_name.setdefault(n.name, []).append(n)
        site_kernel = {s.id: s.kernel for s in pmap.sites}
        self._sites_by_node: dict[str, set] = {}
        roles_by_kernel: dict[str, dict[str, set]] = {}
        for nid, sid, role in pmap.node_sites():
            kernel = site_kernel.get(sid)
            self._sites_by_node.setdefault(nid, set()).add((sid, kernel, role))
            roles_by_kernel.setdefault(kernel, {}).setdefault(nid, set()).add(role)
        self._nodes_by_kernel = {
            k: sorted(
                ((nid, self._node_name(nid), _kernel_role(rs)) for nid, rs in by_node.items()),
                key=lambda t: t[0],
            )
            for k, by_node in roles_by_kernel.items()
        }
        self._exprs_by_node: dict[str, set] = {}
        self._nodes_by_expr: dict[str, set] = {}
        for nid, eid, role in pmap.node_exprs:
            self._exprs_by_node.setdefault(nid, set()).add((eid, role))
            self._nodes_by_expr.setdefault(eid, set()).add((nid, role))
        self._sites_by_expr: dict[str, set] = {}
        for sid, eid, role in pmap.site_exprs:
            self._sites_by_expr.setdefault(eid, set()).add((sid, site_kernel.get(sid), role))

    def _node_name(self, node_id: str) -> str | None:
        n = self._node_by_id.get(node_id)
        return n.name if n is not None else None

    def nodes(self, name_or_id: str) -> list[OnnxNode]:
        """Exact id first (unambiguous), else every node with that name (names may repeat)."""
        if name_or_id in self._node_by_id:
            return [self._node_by_id[name_or_id]]
        return sorted(self._nodes_by_name.get(name_or_id, ()), key=lambda n: (n.index, n.id))

    def kernels_for_node(self, node_id: str) -> list[tuple[str, str | None, str]]:
        # (site_id, role) is unique per node, so sorting on those never compares kernel=None.
        return sorted(self._sites_by_node.get(node_id, ()), key=lambda t: (t[0], t[2]))

    def nodes_for_kernel(self, kernel_name: str) -> list[tuple[str, str | None, str]]:
        return list(self._nodes_by_kernel.get(kernel_name, ()))

    def exprs_for_node(self, node_id: str) -> list[tuple[str, str]]:
        return sorted(self._exprs_by_node.get(node_id, ()))

    def nodes_for_expr(self, expr_id: str) -> list[tuple[str, str]]:
        return sorted(self._nodes_by_expr.get(expr_id, ()))

    def kernels_for_expr(self, expr_id: str) -> list[tuple[str, str | None, str]]:
        return sorted(self._sites_by_expr.get(expr_id, ()), key=lambda t: (t[0], t[2]))


class SqliteMapIndex:
    """The same lookups as MapIndex, each one indexed query against the file.

    For dispatch-time use: opening costs a version check, not a load, so a runtime can answer
    "which ONNX nodes is this kernel?" for a multi-GB map without reading it.  Not thread-safe
    (one sqlite3 connection); open one per thread.
    """

    # Public so that tests and docs can EXPLAIN exactly what runs.
    QUERIES = {
        "node_by_id":
            "SELECT id, name, op_type, domain, idx, inputs, outputs, elided "
            "FROM onnx_nodes WHERE id = ?",
        "nodes_by_name":
            "SELECT id, name, op_type, domain, idx, inputs, outputs, elided "
            "FROM onnx_nodes WHERE name = ? ORDER BY idx, id",
        "kernels_for_node":
            "SELECT site_id, kernel, role FROM node_sites WHERE node_id = ? "
            "ORDER BY site_id, role",
        "nodes_for_kernel":
            "SELECT node_id, node_name, "
            f"CASE WHEN MAX(role = '{ROLE_COMPUTE}') THEN '{ROLE_COMPUTE}' ELSE MIN(role) END "
            "FROM node_sites WHERE kernel = ? GROUP BY node_id, node_name ORDER BY node_id, node_name",
        "exprs_for_node":
            "SELECT DISTINCT expr_id, role FROM node_exprs WHERE node_id = ? "
            "ORDER BY expr_id, role",
        "nodes_for_expr":
            "SELECT DISTINCT node_id, role FROM node_exprs WHERE expr_id = ? "
            "ORDER BY node_id, role",
        "kernels_for_expr":
            "SELECT DISTINCT se.site_id, ks.kernel, se.role FROM site_exprs AS se "
            "LEFT JOIN kernel_sites AS ks ON ks.id = se.site_id WHERE se.expr_id = ? "
            "ORDER BY se.site_id, se.role",
    }

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._conn = open_readonly(self.path)
        try:
            with sqlite_errors(self.path):
                check_version(self._conn, self.path)
        except BaseException:
            self._conn.close()
            raise

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> "SqliteMapIndex":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _q(self, name: str, *args) -> list[tuple]:
        with sqlite_errors(self.path):
            return self._conn.execute(self.QUERIES[name], args).fetchall()

    @staticmethod
    def _node(row) -> OnnxNode:
        i, n, o, dm, x, ins, outs, el = row
        return OnnxNode(id=i, name=n, op_type=o, domain=dm, index=x,
                        inputs=json.loads(ins), outputs=json.loads(outs), elided=el)

    def nodes(self, name_or_id: str) -> list[OnnxNode]:
        rows = self._q("node_by_id", name_or_id) or self._q("nodes_by_name", name_or_id)
        return [self._node(r) for r in rows]

    def kernels_for_node(self, node_id: str) -> list[tuple[str, str | None, str]]:
        return self._q("kernels_for_node", node_id)

    def nodes_for_kernel(self, kernel_name: str) -> list[tuple[str, str | None, str]]:
        return self._q("nodes_for_kernel", kernel_name)

    def exprs_for_node(self, node_id: str) -> list[tuple[str, str]]:
        return self._q("exprs_for_node", node_id)

    def nodes_for_expr(self, expr_id: str) -> list[tuple[str, str]]:
        return self._q("nodes_for_expr", expr_id)

    def kernels_for_expr(self, expr_id: str) -> list[tuple[str, str | None, str]]:
        return self._q("kernels_for_expr", expr_id)


def open_index(path: str | os.PathLike) -> MapIndex | SqliteMapIndex:
    """Query a map file without caring about its format (SQLite is queried in place)."""
    path = Path(path)
    if path.suffix.lower() in SQLITE_SUFFIXES:
        return SqliteMapIndex(path)
    return MapIndex(load(path))
