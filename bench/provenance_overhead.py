"""Cost of provenance on a model: import+compile with tracking vs plain TVM, in one run.

Variants are interleaved (plain, tracked, plain, tracked, ...) so machine noise hits both alike;
the ratio of medians is what README quotes.  "plain" is TVM's own from_onnx + tvm.compile with the
same CPU pipeline; "tracked" is provmap's import + tracked compile + bytecode join (what
`provmap map` does before writing files); map writing is timed separately.

    python bench/provenance_overhead.py [bundled:resnet50] [--repeats 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time

import tvm
from tvm import relax
from tvm.relax.frontend.onnx import from_onnx

from provenance import store, zoo
from provenance.build import compile_tvm, cpu_pipeline, cpu_target
from provenance.importer import import_onnx


def plain(model):
    t = cpu_target()
    mod = from_onnx(model)
    with tvm.transform.PassContext(opt_level=3):
        tvm.compile(mod, target=t, relax_pipeline=cpu_pipeline(t))


def tracked(model):
    return compile_tvm(import_onnx(model))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default="bundled:resnet50")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", help="also write results here")
    a = ap.parse_args(argv)
    model, name = zoo.resolve(a.model)
    plain(model)  # warm-up: first TVM compile pays one-off JIT/registry costs
    times = {"plain": [], "tracked": []}
    build = None
    for _ in range(a.repeats):
        for variant in ("plain", "tracked"):
            t0 = time.perf_counter()
            r = plain(model) if variant == "plain" else tracked(model)
            times[variant].append(time.perf_counter() - t0)
            if variant == "tracked":
                build = r
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        store.save(build.pmap, f"{d}/map")
        write_s = time.perf_counter() - t0
    med = {k: statistics.median(v) for k, v in times.items()}
    res = {
        "model": name,
        "repeats": a.repeats,
        "plain_s": times["plain"],
        "tracked_s": times["tracked"],
        "plain_median_s": round(med["plain"], 3),
        "tracked_median_s": round(med["tracked"], 3),
        "overhead_ratio": round(med["tracked"] / med["plain"], 4),
        "map_write_s": round(write_s, 3),
        "coverage": build.pmap.coverage(),
        "tvm": tvm.__version__,
        "host": f"{platform.machine()} {platform.processor() or ''} {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d"),
    }
    print(json.dumps(res, indent=2))
    print(f"{name}: import+compile plain {med['plain']:.2f} s, with provenance "
          f"{med['tracked']:.2f} s -> ratio {res['overhead_ratio']:.3f} "
          f"(goal < 1.05); map write {write_s:.2f} s", file=sys.stderr)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
