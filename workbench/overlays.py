"""provmap's data as Model Explorer node-data overlays, on the user's own model.

Vendors debugging a boundary already open models in Google's Model Explorer, whose node-data
overlays colour a graph by any per-node number.  This writes three, each keyed to the nodes of
the model the user compiled (names from placement.py, as Model Explorer's ONNX adapter names
them): where each node runs (partition and backend, explicit colours), how long it takes (a
profile, gradient) and how far its outputs are from the reference (compare or bisect,
thresholds).  Beside them goes the annotated model (annotate.py), whose `namespace` metadata
groups the nodes by partition, so opening it with the overlays shows both.

Format (model_explorer/node_data_builder.py): {graph id: {"results": {node: {"value": number,
"bgColor": colour}}, "thresholds": [...] | "gradient": [...]}}.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from .annotate import annotate_model
from .placement import placement
from .report_html import EXTRA, PALETTE

NO_PARTITION = "#bbbbbb"
#: compare's verdict per node: within tolerance, within 100x of it, beyond.
ERROR_COLORS = ("#59a14f", "#edc948", "#e15759")


def _shade(color: str, k: int) -> str:
    """The k-th partition of one backend: its colour, then ever lighter (mixed with white)."""
    mix = (0.0, 0.4, 0.65, 0.8)[min(k, 3)]
    rgb = [int(color[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c + (255 - c) * mix):02x}" for c in rgb)


def partition_colors(table: dict) -> dict[str, str]:
    """partition id -> colour: the backend's colour of the HTML report, shaded per partition."""
    base: dict[str, str] = {}
    seen: dict[str, int] = {}
    out = {}
    for p in table["partitions"]:
        b = p["backend"]
        base.setdefault(b, PALETTE.get(b) or EXTRA[len(base) % len(EXTRA)])
        out[p["id"]] = _shade(base[b], seen.get(b, 0))
        seen[b] = seen.get(b, 0) + 1
    return out


def partition_overlay(table: dict) -> dict:
    """Value: the partition's number (p3 -> 3, -1 for none); colour: its backend's."""
    colors = partition_colors(table)
    results = {}
    for r in table["nodes"]:
        pid = r["partitions"][0] if r["partitions"] else None
        results[r["node"]] = {"value": int(pid[1:]) if pid and pid[1:].isdigit() else -1,
                              "bgColor": colors[pid] if pid else NO_PARTITION}
    return {table["graph"]: {"name": "provmap partition", "results": results}}


def time_overlay(table: dict, profile: dict) -> dict:
    """Milliseconds per node from `provmap profile --json` (its rows carry the map's node id)."""
    by_id = {r["id"]: r["ms"] for r in profile.get("onnx_nodes", []) if r.get("id")}
    results = {r["node"]: {"value": round(by_id[r["id"]], 6)} for r in table["nodes"]
               if r["id"] in by_id}
    return {table["graph"]: {"name": "provmap time (ms)", "results": results,
                             "gradient": [{"stop": 0, "bgColor": "#ffffff"},
                                          {"stop": 1, "bgColor": "#e15759"}]}}


def error_overlay(model, table: dict, result: dict) -> dict:
    """Max abs error per node from `provmap compare --json` or `provmap bisect --json`: each
    compared tensor's error on the node that produces it (the worst of its outputs)."""
    producer = {}
    for node, r in zip(model.graph.node, table["nodes"]):
        for o in node.output:
            producer[o] = r["node"]
    results: dict[str, dict] = {}
    for t in result.get("tensors", []):
        node = producer.get(t.get("tensor"))
        err = t.get("max_abs")
        if node is None or err is None or not math.isfinite(err):
            continue
        if node not in results or err > results[node]["value"]:
            results[node] = {"value": err}
    atol = float(result.get("atol", 1e-4))
    return {table["graph"]: {"name": "provmap max abs error", "results": results,
                             "thresholds": [{"value": atol, "bgColor": ERROR_COLORS[0]},
                                            {"value": atol * 100, "bgColor": ERROR_COLORS[1]},
                                            {"value": 1e300, "bgColor": ERROR_COLORS[2]}]}}


def write_overlays(out_dir, model, mod, profile: dict | None = None,
                   errors: dict | None = None) -> dict:
    """model.onnx (annotated) and one JSON per overlay in `out_dir`; returns their paths."""
    from provmap.provenance.util.atomic import write_bytes_atomic
    from provmap.provenance.weights import serialize

    out = Path(out_dir).resolve()  # Model Explorer resolves paths from its own directory
    table = placement(model, mod)
    files = {"model": out / "model.onnx", "partition": out / "partition.json"}
    write_bytes_atomic(files["model"], serialize(annotate_model(model, mod)))
    overlays = {"partition": partition_overlay(table)}
    if profile is not None:
        overlays["time"] = time_overlay(table, profile)
    if errors is not None:
        overlays["error"] = error_overlay(model, table, errors)
    for name, data in overlays.items():
        files[name] = out / f"{name}.json"
        write_bytes_atomic(files[name], json.dumps(data, indent=1).encode())
    return {k: str(v) for k, v in files.items()}


def explorer_command(files: dict, port: int) -> list[str]:
    """The model-explorer command line that opens the model with every overlay.  Model
    Explorer paints the graph with the overlay loaded last: the partitions."""
    data = [v for k, v in files.items() if k not in ("model", "partition")] + [files["partition"]]
    return ["model-explorer", files["model"], "--extensions=model_explorer_onnx",
            f"--node_data_paths={','.join(data)}", "--no_open_in_browser", "--port", str(port)]
