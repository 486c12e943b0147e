"""Placement as data: one row per node of the user's ONNX model (schema `provmap.placement` v2).

Vendors asked for a per-node placement artifact rather than logs (which partition and backend
runs each node, which kernels carry it, or why it runs nowhere), keyed by the node names of the
model they know.  This table is that artifact; `annotate` writes the same rows into the model's
metadata_props, `overlays` paints them in Model Explorer, and `inspect --json` prints them
(schema in docs/map-schema.md, "Placement").

Rows are keyed to the model as the user gave it, not provmap's derived copy: nodes are matched to
the map by their output tensor names, which input-shape fixing, sorting and folding all keep.
`node` is the name Model Explorer shows (and keys overlays by): the ONNX name, or for an
unnamed or repeated one the name onnx_ir's NameFixPass gives it, computed here so that the table
needs neither onnx_ir nor Model Explorer.

Every row has one `state` from STATES, the single vocabulary inspect, annotate and the docs'
queries count with (issue 36: they had three different counts of "folded" for one artifact).
Only a node a kernel computes is placed on a backend; a folded Constant that a partition carries
as a constant is not "run" by it, and says which partitions carry it in `carried_by` instead.
"""

from __future__ import annotations

import collections
import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING

from provmap.provenance.model import FOLD_REASON

if TYPE_CHECKING:  # reading an artifact's placement needs no onnx (offline start-up)
    import onnx

SCHEMA = "provmap.placement"
#: 2: rows gained `state` and `carried_by`; `partitions`/`backends` list only partitions whose
#: kernels compute the node (v1 also listed a folded constant a partition merely carried).
VERSION = 2

#: The node states, in the order counts are printed, with the words used for them.
STATES = {
    "ran": "ran on a backend",
    "folded_before_import": "folded before import",
    "folded_at_import": "folded at import",
    "elided": "elided by a pass",
    "not_compilable": "not compilable",
    "unmatched": "not in the compiled model",
}


def state_of(answer: dict | None) -> str:
    """A node's state from its lookup answer (None: no node of the compiled model matched)."""
    if answer is None:
        return "unmatched"
    if any(k["role"] == "compute" for k in answer["kernels"]):
        return "ran"
    why = answer["elided"] or ""
    if why == FOLD_REASON:
        return "folded_before_import"
    if "not compilable by TVM" in why:
        return "not_compilable"
    if "folded at import" in why:  # "constant folded at import", "shape arithmetic ..."
        return "folded_at_import"
    return "elided"  # aliases, removed by a pass, VM-evaluated, folded by TVM's passes


def count_states(rows) -> dict:
    """How many rows are in each state, every state present (0 included), in STATES order."""
    counts = collections.Counter(r["state"] for r in rows)
    return {s: counts.get(s, 0) for s in STATES}


def describe_states(counts: dict) -> str:
    """The counts in words, zero states left out: "21 ran on a backend, 23 folded ..."; "no
    nodes" for a model without any (inspect had printed "node states: " and nothing)."""
    return ", ".join(f"{n} {STATES[s]}" for s, n in counts.items() if n) or "no nodes"


def graph_id(model: onnx.ModelProto) -> str:
    """The graph's id in Model Explorer: its name, or "<main>" when it has none."""
    return model.graph.name or "<main>"


def explorer_node_ids(model: onnx.ModelProto) -> list[str]:
    """Each top-level node's unique name as NameFixPass assigns it: an unnamed node becomes
    "node", "node_1", ...; a repeated name X becomes X_1, X_2, ... (first come, first kept)."""
    return unique_node_names([node.name for node in model.graph.node])


def unique_node_names(names: list[str]) -> list[str]:
    """explorer_node_ids over bare names (a map's nodes: no onnx import to read an artifact)."""
    used: set[str] = set()
    counter: collections.Counter[str] = collections.Counter()
    out = []
    for given in names:
        preferred = given or "node"
        name = preferred
        if given and name not in used:
            used.add(name)
            out.append(name)
            continue
        while name in used:
            counter[preferred] += 1
            name = f"{preferred}_{counter[preferred]}"
        used.add(name)
        out.append(name)
    return out


def _reason(answer: dict, backend_of: dict) -> str:
    """Why a node runs in no partition, in the map's own words."""
    if answer["elided"]:
        return answer["elided"]  # folded before import, not compilable by TVM, alias, ...
    assigned = answer.get("assigned", answer["partitions"])
    if assigned:  # given to a backend whose compiled code has no kernel for it
        return (f"given to {','.join(assigned)} "
                f"({','.join(sorted({backend_of[p] for p in assigned}))}), which compiled no "
                "kernel computing it")
    if answer["exprs"]:
        return ("its Relax bindings were folded into constants of the compiled module "
                f"({','.join(answer['exprs'])})")
    return "computes nothing at run time"


def _row(index: int, node, explorer_id: str, pnode, lookup, backend_of: dict) -> dict:
    row = {"index": index, "node": explorer_id, "name": node.name, "op_type": node.op_type,
           "id": None, "state": "unmatched", "partitions": [], "backends": [], "kernels": [],
           "carried_by": [], "exprs": [], "reason": None}
    if pnode is None:
        row["reason"] = "not a node of the compiled model"
        return row
    answer = lookup.onnx_node(pnode.id)[0]
    state = state_of(answer)
    row.update(id=pnode.id, state=state, exprs=list(answer["exprs"]))
    # Partitions in the manifest's order, each once: where its kernels compute (ran) or carry
    # its value as a constant (every other state).
    computing = {k["partition"] for k in answer["kernels"] if k["role"] == "compute"}
    carrying = {k["partition"] for k in answer["kernels"]} - computing
    if state == "ran":
        parts = [p for p in backend_of if p in computing]
        row.update(partitions=parts, backends=sorted({backend_of[p] for p in parts}),
                   kernels=[k["kernel"] for k in answer["kernels"] if k["role"] == "compute"])
    else:
        row.update(carried_by=[p for p in backend_of if p in carrying], reason=_reason(answer, backend_of))
    return row


def placement(model: onnx.ModelProto | None, mod) -> dict:
    """The table for `mod` (a loaded artifact) over `model`, the user's model; None: over the
    map's own nodes (the compiled copy's names), for an artifact without its model."""
    lookup = mod.lookup
    backend_of = {p["id"]: p["backend"] for p in mod.manifest["partitions"]}
    if model is None:
        ids = unique_node_names([n.name for n in lookup.map.nodes])
        rows = [_row(lookup.map.file_index(k), pn, ids[k], pn, lookup, backend_of)
                for k, pn in enumerate(lookup.map.nodes)]
        gid, over = "<main>", "compiled"
    else:
        by_outputs = {tuple(n.outputs): n for n in lookup.map.nodes}
        ids = explorer_node_ids(model)
        rows = [_row(k, node, ids[k], by_outputs.get(tuple(node.output)), lookup, backend_of)
                for k, node in enumerate(model.graph.node)]
        gid, over = graph_id(model), "original"
    return {"schema": SCHEMA, "version": VERSION, "model": over, "graph": gid,
            "partitions": [{"id": p["id"], "backend": p["backend"]}
                           for p in mod.manifest["partitions"]],
            "states": count_states(rows), "nodes": rows}


def group(row: dict) -> str:
    """The Model Explorer layer a node belongs to: its partition(s) and backend, or where it
    went instead ("folded", "not compiled")."""
    if row["partitions"]:
        return f"{','.join(row['partitions'])} {','.join(sorted(set(row['backends'])))}"
    return "no partition"


#: The SQLite table's columns, in order: the JSON row's keys, lists stored as JSON arrays.
COLUMNS = ("index", "node", "name", "op_type", "id", "state", "partitions", "backends",
           "kernels", "carried_by", "exprs", "reason")


def write_sqlite(table: dict, pmap, path) -> None:
    """The artifact's map (`pmap`, read from its checked map.json) as SQLite, with the table
    added as `placement` (and its schema and version in `meta`), so a tool joins rows to
    kernels and Relax bindings in one file.  Written afresh: the artifact's own map.sqlite is
    the sender's database, never compared row by row with map.json."""
    import sqlite3

    from provmap.provenance.store import save_sqlite
    from provmap.provenance.util.atomic import write_atomic

    def write(tmp) -> None:
        save_sqlite(pmap, tmp)
        con = sqlite3.connect(tmp)
        try:
            _check_schema(con)
            con.execute("CREATE TABLE placement (idx INTEGER NOT NULL, node TEXT NOT NULL, "
                        "name TEXT NOT NULL, op_type TEXT NOT NULL, id TEXT, state TEXT NOT NULL, "
                        "partitions TEXT NOT NULL, backends TEXT NOT NULL, kernels TEXT NOT "
                        "NULL, carried_by TEXT NOT NULL, exprs TEXT NOT NULL, reason TEXT)")
            con.executemany(
                f"INSERT INTO placement VALUES ({','.join('?' * len(COLUMNS))})",
                [[json.dumps(r[c]) if isinstance(r[c], list) else r[c] for c in COLUMNS]
                 for r in table["nodes"]])
            con.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                            [(f"placement_{k}", json.dumps(table[k]))
                             for k in ("schema", "version", "model", "graph")])
            con.execute("CREATE INDEX idx_placement_node ON placement (node)")
            con.commit()
        finally:
            con.close()

    write_atomic(path, write)


def check_member(map_sqlite: bytes) -> None:
    """An artifact's map.sqlite is a readable SQLite map of provmap's schema, no more (raises
    sqlite3.Error); opened on a private copy with its code never run."""
    import sqlite3
    import tempfile

    with tempfile.TemporaryDirectory(prefix="provmap-member-") as d:
        p = Path(d) / "map.sqlite"
        p.write_bytes(map_sqlite)
        con = sqlite3.connect(p)
        try:
            _check_schema(con)
            con.execute("SELECT count(*) FROM meta").fetchone()
        finally:
            con.close()


def _check_schema(con) -> None:
    """Refuse a map.sqlite whose schema is not exactly the one provmap writes.

    Why: the member comes from the artifact's sender, and rows are inserted into it here.  A
    trigger on `meta` ran on that insert (one that filled 800 MB of disk in 18 s was enough),
    and CHECK constraints, generated columns, expression indexes and views are code too; only
    provmap's own tables and indexes, as provmap declares them, are accepted."""
    import sqlite3

    con.execute("PRAGMA trusted_schema = OFF")
    got = set(con.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"))
    extra = sorted(got - _provmap_schema(), key=lambda e: (e[0] == "table", str(e)))
    if extra:
        kind, name = extra[0][0], extra[0][1]
        raise sqlite3.DatabaseError(f"holds a {kind} {str(name)[:60]!r} that is not in "
                                    "provmap's map schema")


@functools.cache
def _provmap_schema() -> frozenset:
    """sqlite_master of the map provmap writes (provenance.store), from an empty map."""
    import sqlite3
    import tempfile

    from provmap.provenance.model import ProvenanceMap
    from provmap.provenance.store import save_sqlite

    with tempfile.TemporaryDirectory(prefix="provmap-schema-") as d:
        con = sqlite3.connect(save_sqlite(ProvenanceMap(), Path(d) / "empty.sqlite"))
        try:
            return frozenset(con.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"))
        finally:
            con.close()
