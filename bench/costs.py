"""What an artifact and provenance cost besides latency: load, verify and lookup times of an
artifact, and TVM's import + compile with provmap's tracking against plain TVM.  Apart from
suite.py so each file stays one subject."""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path


def artifact_stats(path: str, say) -> dict:
    import random

    from provmap.runtime_module.backend import percentile
    from provmap.runtime_module.module import load

    loads, verifies = [], []
    for _ in range(3):
        t0 = time.perf_counter()
        mod = load(path)
        loads.append(time.perf_counter() - t0)
        mod.close()
        del mod
        t0 = time.perf_counter()
        ver = load(path, runnable=False)
        verifies.append(time.perf_counter() - t0)
    lk = ver.lookup
    queries = [("node", n.name or n.id) for n in lk.map.nodes] + \
              [("kernel", k) for k in lk.kernel_names()]
    rng = random.Random(0)
    ns = []
    for _ in range(max(1, 2000 // max(len(queries), 1))):
        rng.shuffle(queries)
        for kind, q in queries:
            t0 = time.perf_counter_ns()
            (lk.onnx_node if kind == "node" else lk.kernel)(q)
            ns.append(time.perf_counter_ns() - t0)
    return {"artifact_bytes": os.path.getsize(path),
            "load_ms": statistics.median(loads) * 1e3,
            "verify_ms": statistics.median(verifies) * 1e3,
            "lookup_us_p50": percentile(ns, 0.5) / 1e3, "lookup_us_p99": percentile(ns, 0.99) / 1e3,
            "lookup_queries": len(ns)}


def provenance_cost(model, repeats: int) -> dict:
    import tvm
    from tvm.relax.frontend.onnx import from_onnx

    from provmap.provenance import store
    from provmap.provenance.build import compile_tvm, cpu_pipeline, cpu_target
    from provmap.provenance.importer import import_onnx
    from provmap.runtime_module.backends.ort_types import ORT_TYPES

    def plain():
        t = cpu_target()
        mod = from_onnx(model)
        with tvm.transform.PassContext(opt_level=3):
            tvm.compile(mod, target=t, relax_pipeline=cpu_pipeline(t))

    plain()  # the first TVM compile pays one-off JIT/registry costs
    times = {"plain": [], "tracked": []}
    build = None
    for _ in range(max(1, repeats)):
        for variant in ("plain", "tracked"):
            t0 = time.perf_counter()
            if variant == "plain":
                plain()
            else:
                build = compile_tvm(import_onnx(model, type_oracle=ORT_TYPES))
            times[variant].append(time.perf_counter() - t0)
    with tempfile.TemporaryDirectory(prefix="provmap-bench-map-") as d:
        t0 = time.perf_counter()
        store.save(build.pmap, Path(d) / "map")
        write_s = time.perf_counter() - t0
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"plain_s": med["plain"], "tracked_s": med["tracked"],
            "ratio": med["tracked"] / med["plain"], "map_write_s": write_s,
            "repeats": max(1, repeats)}
