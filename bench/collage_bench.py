"""Collage against the best single backend and greedy, per model, measured end to end.

    python bench/collage_bench.py [--models transformer,squeezenet,...] [--backends tvm,onnxruntime,openvino]
                                  [--cache bench/costs.sqlite] [--repeats 40] [--json bench/results_collage.json]

For each model (random weights, seed 0): a cold search (or warm, if the cache already has the
prices), then a second, warm search (must measure nothing), then single:<onnxruntime|openvino>,
greedy and collage artifacts are built and run in one process, in blocks of repeats, two passes
(so drift hits all alike); the table gives medians and ratios to the best single backend.
single:tvm is not run end to end (untuned TVM is ~75x slower); its whole-model estimate from
the search is reported.  Results are written after every model, so a partial run is usable.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

from partition.collage import CollageOptions
from partition.compile import compile_model, load_view
from provenance import zoo
from runtime_module.artifact import host_info
from runtime_module.module import ArtifactModule


def measure(arts: dict, feeds, repeats: int) -> dict:
    mods = {k: ArtifactModule(a) for k, a in arts.items()}
    for m in mods.values():
        m.load_runners()
        for _ in range(3):
            m.run(feeds)
    samples = {k: [] for k in mods}
    for _ in range(2):
        for k, m in mods.items():
            time.sleep(0.2)  # let the previous block's worker threads (spinning pools) settle
            m.run(feeds)
            for _ in range(max(repeats // 2, 1)):
                t = time.perf_counter()
                m.run(feeds)
                samples[k].append(time.perf_counter() - t)
    out = {}
    for k, s in samples.items():
        s = sorted(s)
        out[k] = {"median_ms": statistics.median(s) * 1e3,
                  "p90_ms": s[int(0.9 * (len(s) - 1) + 0.5)] * 1e3,
                  "spread": (s[int(0.9 * (len(s) - 1) + 0.5)] - s[0]) / statistics.median(s),
                  "partitions": len(arts[k].manifest["partitions"]),
                  "backends": sorted({p["backend"] for p in arts[k].manifest["partitions"]})}
    return out


def bench_model(name, backends, cache, repeats, max_size, max_depth):
    model = zoo.with_random_weights(zoo.resolve(f"bundled:{name}")[0], seed=0)
    view = load_view(model, name)
    feeds = zoo.random_inputs(model, seed=0)
    opts = CollageOptions(cache_path=cache, max_size=max_size, max_depth=max_depth)
    say = lambda m: print(f"[{name}] {m}", file=sys.stderr, flush=True)  # noqa: E731
    t0 = time.perf_counter()
    art_c = compile_model(view, f"collage:{','.join(backends)}", collage_options=opts, progress=say)
    first_s = time.perf_counter() - t0
    rep = art_c.manifest["plan_info"]["collage"]
    t0 = time.perf_counter()
    art_w = compile_model(view, f"collage:{','.join(backends)}", collage_options=CollageOptions(
        cache_path=cache, max_size=max_size, max_depth=max_depth, e2e_check=False))
    warm_s = time.perf_counter() - t0
    rep_w = art_w.manifest["plan_info"]["collage"]
    arts = {"collage": art_c}
    for b in ("onnxruntime", "openvino"):
        if b in backends:
            arts[f"single:{b}"] = compile_model(view, f"single:{b}")
    fast = [b for b in ("onnxruntime", "openvino") if b in backends]
    greedy = f"greedy:{','.join(fast + [b for b in backends if b not in fast])}"
    arts[greedy] = compile_model(view, greedy)
    res = measure(arts, feeds, repeats)
    singles = {k: v["median_ms"] for k, v in res.items() if k.startswith("single:")}
    best_single = min(singles, key=singles.get)
    for k, v in res.items():
        v["ratio_to_best_single"] = v["median_ms"] / singles[best_single]
    # Outputs of the collage artifact against ONNX Runtime on the original model.
    import onnxruntime as ort
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = sess.run(None, feeds)
    got = ArtifactModule(art_c).run(feeds)
    max_err = max(float(np.abs(got[o.name] - r).max()) for o, r in zip(sess.get_outputs(), ref))
    return {
        "model": name, "op_nodes": len(view.op_nodes), "backends": backends,
        "search_first_s": first_s, "search_warm_s": warm_s,
        "first_run_measured": rep["estimator"].get("measured"),
        "first_run_cache_hits": rep["estimator"].get("cache_hits"),
        "warm_run_measured": rep_w["estimator"].get("measured"),
        "warm_run_cache_hits": rep_w["estimator"].get("cache_hits"),
        "candidates": rep["candidates"], "invalid": rep["estimator"].get("invalid"),
        "estimated_ms": rep["estimated_ms"], "e2e_check": rep.get("e2e"),
        "chosen": art_c.manifest["strategy"],
        "measured": res, "best_single": best_single,
        "collage_vs_best_single": res["collage"]["ratio_to_best_single"],
        "collage_max_abs_err_vs_ort": max_err,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="transformer,squeezenet,bvlc_alexnet,vgg19,inception_v1,resnet50")
    ap.add_argument("--backends", default="tvm,onnxruntime,openvino")
    ap.add_argument("--cache", default=os.environ.get("PROVMAP_CACHE", "bench/costs.sqlite"))
    ap.add_argument("--repeats", type=int, default=40)
    ap.add_argument("--max-size", type=int, default=12)
    ap.add_argument("--max-depth", type=int, default=4)
    ap.add_argument("--json", default="bench/results_collage.json")
    args = ap.parse_args(argv)
    import onnxruntime, openvino, tvm
    result = {"date": time.strftime("%Y-%m-%d"), "host": host_info(),
              "versions": {"tvm": tvm.__version__, "onnxruntime": onnxruntime.__version__,
                           "openvino": openvino.__version__},
              "args": vars(args), "rows": []}
    for name in args.models.split(","):
        row = bench_model(name, args.backends.split(","), args.cache, args.repeats,
                          args.max_size, args.max_depth)
        result["rows"].append(row)
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
        m = row["measured"]
        print(f"{name:13} " + "  ".join(f"{k} {v['median_ms']:.2f} ms ({v['ratio_to_best_single']:.3f})"
                                         for k, v in m.items())
              + f"  | chosen {row['chosen']}, search {row['search_first_s']:.0f} s cold-ish, "
                f"{row['search_warm_s']:.1f} s warm ({row['warm_run_measured']} measured)",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
