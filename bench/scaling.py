"""How provmap's own algorithms grow with graph size, on synthetic graphs of 100 to 10,000 nodes.

Stages timed per size: tagging (ONNX import with IDs on every node and binding), support checks
(the real ONNX Runtime and OpenVINO backends' `verdicts`), candidate generation + pruning, the
shortest-path search, and writing the provenance map (JSON + SQLite).  The search here is priced
by a deterministic synthetic cost table (`provmap.partition.measure.cost.MockEstimator`), on purpose: measuring
thousands of candidates on real backends would time the backends, not the search; real prices
are what the per-model search rows of the suite measure.

The growth of each stage is fitted as t = c * n^k by least squares on log-log points; k near 1
is linear, near 2 quadratic.

    python -m provmap.bench.scaling [--sizes 100,300,1000,3000,10000] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

STAGES = ("tag", "support", "candidates", "search", "map_write")


def synthetic_model(n_nodes: int, width: int = 8, seed: int = 0) -> onnx.ModelProto:
    """A chain of residual MLP blocks (MatMul, Add bias, Relu, Add skip): ~n_nodes ONNX nodes.

    Residual blocks give the candidate generator real branching (every block is a diamond), so
    convexity and the search's frontier are exercised, not just a path.
    """
    rng = np.random.default_rng(seed)
    blocks = max(1, n_nodes // 4)
    nodes, inits = [], []
    x = "x"
    for b in range(blocks):
        w, bias = f"w{b}", f"b{b}"
        inits.append(numpy_helper.from_array(
            (rng.standard_normal((width, width)) / math.sqrt(width)).astype(np.float32), w))
        inits.append(numpy_helper.from_array(
            (0.1 * rng.standard_normal(width)).astype(np.float32), bias))
        nodes += [
            helper.make_node("MatMul", [x, w], [f"mm{b}"], name=f"block{b}/matmul"),
            helper.make_node("Add", [f"mm{b}", bias], [f"ab{b}"], name=f"block{b}/bias"),
            helper.make_node("Relu", [f"ab{b}"], [f"r{b}"], name=f"block{b}/relu"),
            helper.make_node("Add", [f"r{b}", x], [f"y{b}"], name=f"block{b}/residual"),
        ]
        x = f"y{b}"
    graph = helper.make_graph(
        nodes, f"synthetic{n_nodes}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, width])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


# Synthetic prices: per-op seconds per backend, and a fusion discount per extra op in a
# candidate, so the search faces real trade-offs (each backend wins some ops; bigger candidates
# win through fusion; crossings cost).
_OP_COST = {"onnxruntime": {"MatMul": 2e-6, "Add": 3e-6, "Relu": 3e-6},
            "openvino": {"MatMul": 8e-6, "Add": 0.3e-6, "Relu": 0.3e-6}}


def synthetic_price(view, cand) -> float:
    """Per-call overhead + op costs, with a fusion discount that grows with size up to 30%."""
    base = sum(_OP_COST[cand.backend].get(view.nodes[i].op_type, 3e-6) for i in cand.ops)
    return 0.2e-6 + base * (0.7 + 0.3 * 0.8 ** (len(cand.ops) - 1))


def time_size(n_nodes: int) -> dict:
    from provmap.partition.generate import generate
    from provmap.partition.prune import prune
    from provmap.partition.measure.cost import MockEstimator
    from provmap.partition.search import search
    from provmap.provenance import store
    from provmap.provenance.importer import import_onnx
    from provmap.runtime_module.backends.ort_types import ORT_TYPES
    from provmap.runtime_module.registry import get_backend
    from provmap.runtime_module.graph_view import GraphView

    model = synthetic_model(n_nodes)
    row = {"nodes": len(model.graph.node)}
    t = time.perf_counter()
    imp = import_onnx(model, label=f"synthetic{n_nodes}", type_oracle=ORT_TYPES)
    view = GraphView(imp)
    row["tag_s"] = time.perf_counter() - t
    row["bindings"] = len(imp.pmap.exprs)

    t = time.perf_counter()
    verdicts = {b: get_backend(b).verdicts(view) for b in ("onnxruntime", "openvino")}
    row["support_s"] = time.perf_counter() - t

    t = time.perf_counter()
    raw = generate(view, verdicts)
    kept, _report = prune(view, raw)
    row["candidates_s"] = time.perf_counter() - t
    row["candidates"] = len(raw)
    row["candidates_after_pruning"] = len(kept)

    est = MockEstimator(synthetic_price)
    t = time.perf_counter()
    res = search(view, kept, lambda c: est.estimate(view, c),
                 crossing=lambda nbytes, a, b: 0.2e-6 + nbytes * 1e-10)
    row["search_s"] = time.perf_counter() - t
    row["states_expanded"] = res.states_expanded
    row["partitions"] = len(res.plan.partitions)

    with tempfile.TemporaryDirectory(prefix="provmap-scaling-") as d:
        t = time.perf_counter()
        store.save(imp.pmap, Path(d) / "map")
        row["map_write_s"] = time.perf_counter() - t
    return row


def fit_growth(points: list[dict], stages=STAGES) -> dict:
    """t = c * n^k per stage, least squares in log-log space (stages with all times > 0)."""
    out = {}
    for stage in stages:
        xs = [(p["nodes"], p[f"{stage}_s"]) for p in points if p.get(f"{stage}_s", 0) > 0]
        if len(xs) < 2:
            continue
        lx = np.log([x for x, _ in xs])
        ly = np.log([y for _, y in xs])
        k, logc = np.polyfit(lx, ly, 1)
        pred = logc + k * lx
        ss_res = float(((ly - pred) ** 2).sum())
        ss_tot = float(((ly - ly.mean()) ** 2).sum()) or 1.0
        out[stage] = {"exponent": round(float(k), 3), "coef_s": float(math.exp(logc)),
                      "r2": round(1 - ss_res / ss_tot, 4)}
    return out


def run(sizes: list[int], progress=None) -> dict:
    points = []
    for n in sizes:
        row = time_size(n)
        points.append(row)
        if progress:
            progress(f"scaling: {row['nodes']} nodes: " + ", ".join(
                f"{s} {row[f'{s}_s']:.2f} s" for s in STAGES))
    return {"model": "residual MLP chain (MatMul, Add, Relu, Add per block), width 8",
            "prices": "synthetic (MockEstimator); see bench/scaling.py",
            "points": points, "fit": fit_growth(points)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100,300,1000,3000,10000")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    res = run([int(s) for s in a.sizes.split(",")],
              progress=lambda m: print(m, file=sys.stderr, flush=True))
    print(json.dumps(res, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
