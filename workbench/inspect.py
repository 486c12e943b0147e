"""What `provmap inspect` shows of an artifact, as data: its partitions with their ONNX nodes,
kernels and boundary tensors (each input with the partition that produces it), and the placement
table.  A library function on the workbench floor, so scripts and tools get what the CLI prints
with --json without going through the command line."""

from __future__ import annotations

from provmap.runtime_module.module import load

from .placement import placement


def inspect_artifact(path: str, model=None) -> dict:
    """The data `provmap inspect --json` prints (partitions, boundary tensors, kernels, and the
    placement table over `model`, the embedded model, or else the compiled copy's nodes)."""
    mod = load(path, runnable=False)
    if model is not None or mod.manifest["model"].get("member"):
        model = mod.artifact.resolve_model(model)[0]
    man = mod.manifest
    nodes = {n.id: n for n in mod.lookup.map.nodes}
    producer = {}
    for p in man["partitions"]:
        for t in p["outputs"]:
            producer[t["name"]] = p["id"]
    parts = []
    for p in man["partitions"]:
        ran = mod.lookup.ops_run_by(p["id"])  # "ran": as placement's state, so counts agree
        parts.append({
            "id": p["id"], "backend": p["backend"], "type_key": p["type_key"], "why": p.get("why", ""),
            "onnx_nodes": [{"id": nid, "name": nodes[nid].name, "op_type": nodes[nid].op_type,
                            "helper": nid not in p["ops"], "ran": nid in ran}
                           for nid in p["onnx_nodes"]],
            "kernels": p["kernels"],
            "inputs": [dict(t, producer=producer.get(t["name"], "graph input")) for t in p["inputs"]],
            "outputs": p["outputs"],
            "files": {k: {"sha256": v, "bytes": len(mod.artifact.members[k])}
                      for k, v in p["files"].items()},
        })
    return {"artifact": path, "format_version": man["format_version"], "model": man["model"],
            "strategy": man["strategy"], "backends": man["backends"], "host": man["host"],
            "created_utc": man["created_utc"], "coverage": man["coverage"], "partitions": parts,
            "warnings": man.get("warnings", []), "schedule": man.get("schedule"),
            "placement": placement(model, mod)}
