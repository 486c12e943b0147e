"""Placement as data: one row per node of the user's ONNX model (schema `provmap.placement` v1).

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
"""

from __future__ import annotations

import collections
import json

import onnx

SCHEMA = "provmap.placement"
VERSION = 1


def graph_id(model: onnx.ModelProto) -> str:
    """The graph's id in Model Explorer: its name, or "<main>" when it has none."""
    return model.graph.name or "<main>"


def explorer_node_ids(model: onnx.ModelProto) -> list[str]:
    """Each top-level node's unique name as NameFixPass assigns it: an unnamed node becomes
    "node", "node_1", ...; a repeated name X becomes X_1, X_2, ... (first come, first kept)."""
    used: set[str] = set()
    counter: collections.Counter[str] = collections.Counter()
    out = []
    for node in model.graph.node:
        preferred = node.name or "node"
        name = preferred
        if node.name and name not in used:
            used.add(name)
            out.append(name)
            continue
        while name in used:
            counter[preferred] += 1
            name = f"{preferred}_{counter[preferred]}"
        used.add(name)
        out.append(name)
    return out


def _reason(answer: dict) -> str:
    """Why a node runs in no partition, in the map's own words."""
    if answer["elided"]:
        return answer["elided"]  # folded before import, not compilable by TVM, alias, ...
    if answer["exprs"]:
        return ("its Relax bindings were folded into constants of the compiled module "
                f"({','.join(answer['exprs'])})")
    return "computes nothing at run time"


def _row(index: int, node, explorer_id: str, pnode, lookup) -> dict:
    row = {"index": index, "node": explorer_id, "name": node.name, "op_type": node.op_type,
           "id": None, "partitions": [], "backends": [], "kernels": [], "exprs": [],
           "reason": None}
    if pnode is None:
        row["reason"] = "not a node of the compiled model"
        return row
    answer = lookup.onnx_node(pnode.id)[0]
    row.update(id=pnode.id, exprs=list(answer["exprs"]))
    if answer["backends"]:
        row.update(partitions=list(answer["partitions"]), backends=list(answer["backends"]),
                   kernels=[k["kernel"] for k in answer["kernels"] if k["role"] == "compute"])
    else:
        row["reason"] = _reason(answer)
    return row


def placement(model: onnx.ModelProto | None, mod) -> dict:
    """The table for `mod` (a loaded artifact) over `model`, the user's model; None: over the
    map's own nodes (the compiled copy's names), for an artifact without its model."""
    lookup = mod.lookup
    if model is None:
        nodes = [onnx.helper.make_node(n.op_type, list(n.inputs), list(n.outputs), name=n.name)
                 for n in lookup.map.nodes]
        ids = explorer_node_ids(onnx.helper.make_model(onnx.helper.make_graph(nodes, "", [], [])))
        rows = [_row(k, node, ids[k], pn, lookup)
                for k, (node, pn) in enumerate(zip(nodes, lookup.map.nodes))]
        gid, over = "<main>", "compiled"
    else:
        by_outputs = {tuple(n.outputs): n for n in lookup.map.nodes}
        ids = explorer_node_ids(model)
        rows = [_row(k, node, ids[k], by_outputs.get(tuple(node.output)), lookup)
                for k, node in enumerate(model.graph.node)]
        gid, over = graph_id(model), "original"
    return {"schema": SCHEMA, "version": VERSION, "model": over, "graph": gid,
            "partitions": [{"id": p["id"], "backend": p["backend"]}
                           for p in mod.manifest["partitions"]],
            "nodes": rows}


def group(row: dict) -> str:
    """The Model Explorer layer a node belongs to: its partition(s) and backend, or where it
    went instead ("folded", "not compiled")."""
    if row["partitions"]:
        return f"{','.join(row['partitions'])} {','.join(sorted(set(row['backends'])))}"
    return "no partition"


#: The SQLite table's columns, in order: the JSON row's keys, lists stored as JSON arrays.
COLUMNS = ("index", "node", "name", "op_type", "id", "partitions", "backends", "kernels",
           "exprs", "reason")


def write_sqlite(table: dict, map_sqlite: bytes, path) -> None:
    """The artifact's SQLite map with the table added as `placement` (and its schema and
    version in `meta`), so a tool joins rows to kernels and Relax bindings in one file."""
    import sqlite3

    from provmap.provenance.atomic import write_atomic

    def write(tmp) -> None:
        tmp.write_bytes(map_sqlite)
        con = sqlite3.connect(tmp)
        try:
            con.execute("CREATE TABLE placement (idx INTEGER NOT NULL, node TEXT NOT NULL, "
                        "name TEXT NOT NULL, op_type TEXT NOT NULL, id TEXT, partitions TEXT "
                        "NOT NULL, backends TEXT NOT NULL, kernels TEXT NOT NULL, exprs TEXT "
                        "NOT NULL, reason TEXT)")
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
