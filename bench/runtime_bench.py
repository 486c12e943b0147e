"""Artifact load time, lookup latency (p50/p99) and the container's overhead over direct calls.

    python bench/runtime_bench.py [--models squeezenet,resnet50] [--backends onnxruntime,openvino]
                                  [--repeats 30] [--json bench/results_runtime.json]

Overhead is measured on single-backend artifacts against the same backend library called
directly on the original model (ONNX Runtime InferenceSession.run; OpenVINO compiled model at
f32), interleaved run by run so machine noise hits both alike; the ratio of medians is printed.
Goal (issue 3): container overhead under 2%.

ONNX Runtime's pool threads spin after each run; with two ORT sessions interleaved in one process
on 2 cores, each session's spinning steals the other's CPU and both slow down ~2.5x.  So for the
overhead comparison both sides run ORT with `session.intra_op.allow_spinning=0` (the same
setting on both, so the ratio still isolates the container's own cost).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time

from partition.compile import compile_model, load_view
from provenance import zoo
from runtime_module.artifact import host_info
from runtime_module.backend import percentile
from runtime_module.module import load


def direct_runner(backend: str, model):
    """The backend library called directly on the whole original model, as a user would."""
    data = model.SerializeToString()
    if backend == "onnxruntime":
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        return lambda feeds: sess.run(None, feeds)
    if backend == "openvino":
        import openvino as ov
        core = ov.Core()
        compiled = core.compile_model(core.read_model(data, b""), "CPU",
                                      {"INFERENCE_PRECISION_HINT": "f32",
                                       "PERFORMANCE_HINT": "LATENCY"})
        req = compiled.create_infer_request()
        return lambda feeds: req.infer(feeds)
    if backend == "tvm":
        return None
    raise ValueError(backend)


def interleaved(fns: dict, feeds, repeats: int, warmup: int = 3) -> dict:
    for f in fns.values():
        for _ in range(warmup):
            f(feeds)
    samples = {k: [] for k in fns}
    order = list(fns)
    for _ in range(repeats):
        random.shuffle(order)
        for k in order:
            t0 = time.perf_counter()
            fns[k](feeds)
            samples[k].append(time.perf_counter() - t0)
    return samples


def bench_model(name: str, backends: list[str], repeats: int, workdir: str) -> list[dict]:
    model = zoo.with_random_weights(zoo.resolve(f"bundled:{name}")[0], seed=0)
    feeds = zoo.random_inputs(model, seed=0)
    view = load_view(model, name)
    rows = []
    for b in backends:
        path = os.path.join(workdir, f"{name}-{b}.provmap")
        t0 = time.perf_counter()
        opts = {"onnxruntime": {"allow_spinning": "0"}} if b == "onnxruntime" else {}
        compile_model(view, f"single:{b}", out=path, backend_options=opts)
        compile_s = time.perf_counter() - t0
        loads = []
        for _ in range(5):
            t0 = time.perf_counter()
            mod = load(path)
            loads.append(time.perf_counter() - t0)
        verify_only = []
        for _ in range(5):
            t0 = time.perf_counter()
            load(path, runnable=False)
            verify_only.append(time.perf_counter() - t0)
        row = {"model": name, "backend": b, "strategy": f"single:{b}",
               "artifact_bytes": os.path.getsize(path), "compile_s": round(compile_s, 3),
               "load_s_median": statistics.median(loads),
               "verify_s_median": statistics.median(verify_only)}
        direct = direct_runner(b, model)
        fns = {"container": mod.run}
        if direct is not None:
            fns["direct"] = direct
        s = interleaved(fns, feeds, repeats)
        row["container_ms_median"] = statistics.median(s["container"]) * 1e3
        if direct is not None:
            row["direct_ms_median"] = statistics.median(s["direct"]) * 1e3
            row["overhead_ratio"] = row["container_ms_median"] / row["direct_ms_median"]
        # Lookup latency: every ONNX node by name and every kernel, shuffled, many rounds.
        lk = mod.lookup
        queries = [("node", n.name or n.id) for n in lk.map.nodes] + \
                  [("kernel", k) for k in lk.kernel_names()]
        ns = []
        for _ in range(20):
            random.shuffle(queries)
            for kind, q in queries:
                t0 = time.perf_counter_ns()
                (lk.onnx_node if kind == "node" else lk.kernel)(q)
                ns.append(time.perf_counter_ns() - t0)
        t0 = time.perf_counter()
        lk2 = load(path, runnable=False).lookup
        row["lookup_build_s"] = time.perf_counter() - t0
        del lk2
        row["lookup_us_p50"] = percentile(ns, 0.5) / 1e3
        row["lookup_us_p99"] = percentile(ns, 0.99) / 1e3
        row["lookup_queries"] = len(ns)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="squeezenet,resnet50")
    ap.add_argument("--backends", default="onnxruntime,openvino")
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--json", help="write results here")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="provmap-bench-") as d:
        for name in args.models.split(","):
            rows += bench_model(name, args.backends.split(","), args.repeats, d)
    import onnxruntime, openvino, tvm
    result = {"date": time.strftime("%Y-%m-%d"), "host": host_info(),
              "versions": {"tvm": tvm.__version__, "onnxruntime": onnxruntime.__version__,
                           "openvino": openvino.__version__},
              "repeats": args.repeats, "rows": rows}
    print(f"{'model':12} {'backend':12} {'load ms':>8} {'verify ms':>9} {'run ms':>8} "
          f"{'direct ms':>9} {'overhead':>9} {'lookup p50 us':>13} {'p99 us':>7}")
    for r in rows:
        ov = f"{(r['overhead_ratio'] - 1) * 100:+.2f}%" if "overhead_ratio" in r else "-"
        print(f"{r['model']:12} {r['backend']:12} {r['load_s_median'] * 1e3:8.1f} "
              f"{r['verify_s_median'] * 1e3:9.1f} {r['container_ms_median']:8.2f} "
              f"{r.get('direct_ms_median', float('nan')):9.2f} {ov:>9} "
              f"{r['lookup_us_p50']:13.2f} {r['lookup_us_p99']:7.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
