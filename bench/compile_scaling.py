"""How `provmap compile` grows with node count, on the graphs where it once went quadratic.

Issue 33: a Neg/Relu chain under single:onnxruntime took 2.3 s at 1,000 nodes and 230 s at
10,000, a descendants walk per kernel in the ORT kernel map; real exported LLM graphs have 5,000
to 20,000 nodes.  This bench compiles chains of 1k to 10k nodes and GPT-2-style decoders
(`decoder_model.gpt2_like`, about 34 nodes a layer) in one process, times each stage of the
compile path, and fits t = c * n^k per stage by least squares on log-log points
(`scaling.fit_growth`); k near 1 is linear.  Imports are paid once by a warm-up compile before
the first point, so they do not flatten the fit.  Stages: import (ONNX -> Relax with IDs, the
graph view), plan (the strategy, with the backends' support checks), build (every partition
built, kernels mapped to ONNX nodes, the map propagated), save (the artifact written).

    provmap bench compile_scaling [--chain 1000,2000,4000,10000] [--decoder 30,60,120]
        [--strategy single:onnxruntime] [--backend-option openvino.exclude_ops=Softmax] [-o OUT]

Its record: OUT/compile_scaling/<host>.json and .md (records.py); a run with other options
replaces the last one, which stays in git history.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from .decoder_model import gpt2_like
from .scaling import fit_growth

STAGES = ("import", "plan", "build", "save", "total")


def neg_relu_chain(n_nodes: int, width: int = 16) -> onnx.ModelProto:
    """Neg, Relu, Neg, ... : issue 33's reproduction (one input, one output, no weights)."""
    nodes, x = [], "x"
    for i in range(n_nodes):
        nodes.append(helper.make_node("Neg" if i % 2 == 0 else "Relu", [x], [f"t{i}"],
                                      name=f"n{i}"))
        x = f"t{i}"
    graph = helper.make_graph(
        nodes, f"chain{n_nodes}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, width])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def time_compile(model: onnx.ModelProto, strategy: str, backend_options=None) -> dict:
    from provmap.partition.compile import make_plan
    from provmap.partition.strategy import parse_strategy
    from provmap.partition.model_source import load_view
    from provmap.runtime_module.artifact_build import build_artifact

    row = {"nodes": len(model.graph.node)}
    t0 = t = time.perf_counter()
    view = load_view(model)
    row["import_s"] = time.perf_counter() - t
    t = time.perf_counter()
    plan, backends = make_plan(view, parse_strategy(strategy), backend_options)
    row["plan_s"] = time.perf_counter() - t
    t = time.perf_counter()
    art = build_artifact(view, plan, backends)
    row["build_s"] = time.perf_counter() - t
    row["kernels"] = sum(len(p.get("kernels", [])) for p in art.manifest["partitions"])
    row["partitions"] = len(art.manifest["partitions"])
    with tempfile.TemporaryDirectory(prefix="provmap-compile-scaling-") as d:
        t = time.perf_counter()
        art.save(Path(d) / "a.provmap")
        row["save_s"] = time.perf_counter() - t
    row["total_s"] = time.perf_counter() - t0
    return row


def run(chain_sizes, decoder_layers, strategy: str = "single:onnxruntime", progress=None,
        backend_options=None) -> dict:
    time_compile(neg_relu_chain(50), strategy, backend_options)  # warm-up: imports, first calls
    series = {}
    for name, models in (("chain", [neg_relu_chain(n) for n in chain_sizes]),
                         ("decoder", [gpt2_like(k) for k in decoder_layers])):
        if not models:
            continue
        points = []
        for m in models:
            row = time_compile(m, strategy, backend_options)
            row["model"] = m.graph.name
            points.append(row)
            if progress:
                progress(f"compile scaling: {row['model']} ({row['nodes']} nodes): " + ", ".join(
                    f"{s} {row[f'{s}_s']:.2f} s" for s in STAGES))
        series[name] = {"points": points, "fit": fit_growth(points, STAGES)}
    return {"strategy": strategy, "backend_options": backend_options or {},
            "models": {"chain": "Neg/Relu chain, [1, 16] float32",
                       "decoder": "GPT-2-style decoder (bench/decoder_model.py), ~34 nodes a layer"},
            "series": series}


def markdown(res: dict) -> str:
    opts = "; ".join(f"{b}.{k}={v}" for b, o in res.get("backend_options", {}).items()
                     for k, v in o.items())
    lines = [f"# Compile time against node count ({res['strategy']}"
             + (f", {opts}" if opts else "") + ")", "",
             "| model | nodes | partitions | " + " | ".join(f"{s} s" for s in STAGES) + " |",
             "|---|---:|---:|" + "---:|" * len(STAGES)]
    for name, s in res["series"].items():
        for p in s["points"]:
            lines.append(f"| {p['model']} | {p['nodes']} | {p.get('partitions', '')} | "
                         + " | ".join(f"{p[f'{st}_s']:.2f}" for st in STAGES) + " |")
    lines += ["", "Fitted exponent k of t = c * n^k (log-log least squares):", "",
              "| series | " + " | ".join(STAGES) + " |", "|---|" + "---:|" * len(STAGES)]
    for name, s in res["series"].items():
        lines.append(f"| {name} | " + " | ".join(
            f"{s['fit'][st]['exponent']:.2f}" if st in s["fit"] else "-" for st in STAGES) + " |")
    return "\n".join(lines) + "\n"


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv=None) -> int:
    from .steps import finish, parser, say

    ap = parser("compile_scaling", __doc__, output=("--out",))
    ap.add_argument("--chain", default="1000,2000,4000,10000", help="chain sizes in nodes")
    ap.add_argument("--decoder", default="30,60,120", help="decoder sizes in layers")
    ap.add_argument("--strategy", default="single:onnxruntime")
    ap.add_argument("--backend-option", action="append", default=[], metavar="B.KEY=V[,V]",
                    help="e.g. openvino.exclude_ops=Softmax: a partition per decoder layer")
    a = ap.parse_args(argv)
    opts: dict = {}
    for item in a.backend_option:
        key, _, value = item.partition("=")
        backend, _, option = key.partition(".")
        opts.setdefault(backend, {})[option] = value.split(",") if option.endswith("_ops") else value
    res = run(_ints(a.chain), _ints(a.decoder), a.strategy, progress=say, backend_options=opts)
    finish("compile_scaling", a, res, markdown)
    for name, s in res["series"].items():
        print(f"{name}: compile time grows as n^{s['fit']['total']['exponent']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
