"""Where the time goes: per partition, per kernel, per ONNX node, across every backend.

Partition times are measured by the executor's hook around each partition call (the same calls
a normal run makes).  They do not add up to the end-to-end latency of those runs (`e2e_ms`; plain
runs interleaved with them give `e2e_plain_ms`, which differs only by this machine's run-to-run
noise): between the calls the executor gathers each partition's inputs, converts boundary
tensors and dispatches, which on a plan of many partitions is 10-20% of the run (ResNet-18
greedy, 17 partitions: 32.7 of 40.3 ms in partitions).  That remainder is its own row,
`between_partitions_ms`, so the rows add up to `e2e_ms`.  Inside a partition, each backend's own profiler (ORT
session profiling, OpenVINO PERF_COUNT, the Relax VM's instrument hook) gives the *shares* of its kernels; those shares scale the
partition's measured time (profilers add their own overhead, and do not see a library's
per-call cost, which is reported as the partition's "outside kernels" row).  A kernel that
implements several ONNX nodes (a fused conv+bias+relu) says so (`shared_with`) and splits its
time by a rough FLOPs rule: its contractions (`CONTRACTIONS`: Conv, Gemm, MatMul...) take it,
evenly among them, and the elementwise epilogue fused into them costs nothing; a kernel with no
contraction splits evenly.  The epilogue's FLOPs are one per output element against a
contraction's reduction length per element (576 for a 3x3 convolution over 64 channels), and
an even split made the per-node oracle mix halves of kernels (a ReLU priced at half of one
library's fused convolution beside the convolution priced at half of another's).  A backend
without a profiler gets an even split over its kernels, flagged.

What reaches no ONNX node is reported, not dropped: `attributed_share` is the share of the
partitions' time on nodes, and `unattributed` lists the rest by partition and reason (the
library's time outside its kernels, profiled layers that pair with no kernel, kernels mapped to
no node).  OpenVINO's layers pair with the kernel map by position (ov_kernels), which took
ResNet-50 from 1% to all of its kernels' time on nodes (issue 35).
"""

from __future__ import annotations

import statistics
import time

from provmap.partition.measure.contention import Window
from provmap.provenance.util import native_stop
from provmap.runtime_module.backend import PROFILED_UNMATCHED, PROFILED_WALL
from provmap.runtime_module.registry import get_backend


#: ONNX ops whose work is a contraction (a reduction per output element): in a fused kernel,
#: they take its time (module doc).
CONTRACTIONS = frozenset({"Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "Gemm", "MatMul",
                          "MatMulInteger", "QLinearMatMul", "Einsum", "LSTM", "GRU", "RNN"})


def profile_artifact(mod, inputs: dict, repeats: int = 20, kernel_repeats: int = 10,
                     progress=None) -> dict:
    say = progress or (lambda msg: None)
    say(f"profile: loading {len(mod.partitions)} partition(s)")
    mod.load_runners()
    for _ in range(3):
        mod.run(inputs)
    e2e, per_part = [], {m.id: [] for m in mod.partitions}
    part_inputs: dict[str, list] = {}

    def hook(m, ins, _outs, dt):
        per_part[m.id].append(dt)
        if m.id not in part_inputs:
            part_inputs[m.id] = [ins[n] for n in m.runner.input_names]

    trace_run = None
    plain = []
    n = max(1, repeats)
    say(f"profile: {n} end-to-end run{'s' if n != 1 else ''} (plain and hooked, interleaved)")
    win = Window()  # the conditions the runs were measured under (partition/measure/contention)
    for k in range(max(1, repeats)):
        t0 = time.perf_counter()
        mod.run(inputs)
        plain.append(time.perf_counter() - t0)
        # Hooked runs, interleaved with plain ones: their partition times and their own wall
        # time (the hook costs a perf_counter call per partition) are what is attributed; the
        # plain runs' median is reported beside it, as a check that the hook distorts nothing.
        marks = []
        start = time.perf_counter()
        mod.run(inputs, on_partition=lambda m, i, o, dt: (hook(m, i, o, dt),
                                                          marks.append((m, time.perf_counter(), dt))))
        e2e.append(time.perf_counter() - start)
        if k == 0:
            trace_run = (start, marks)
    e2e_ms = statistics.median(e2e) * 1e3
    conditions = win.stop(plain)
    if conditions.contended:
        say(conditions.line("profile"))
    lk = mod.lookup
    node_name = {n.id: (n.name or n.id) for n in lk.map.nodes}
    contraction = {n.id for n in lk.map.nodes if n.op_type in CONTRACTIONS}
    partitions, kernels_out, nodes_out, unattributed = [], [], {}, []
    for n_part, m in enumerate(mod.partitions, 1):
        say(f"profile: kernels of {m.id} ({m.backend}), {n_part}/{len(mod.partitions)}")
        p_ms = statistics.median(per_part[m.id]) * 1e3
        blob = mod.artifact.blob(m.id)
        options = mod.manifest["backends"].get(m.backend, {}).get("options", {})
        try:
            # the library's own profiled calls, on runners profile_kernels makes: Ctrl-C ends
            # the process if they do not return (native_stop), as it stops `run`
            with native_stop.running():
                prof = get_backend(m.backend, **options).profile_kernels(
                    blob, part_inputs[m.id], kernel_repeats)
            source = "profiler" if prof else "even split (backend has no profiler)"
        except Exception as e:  # a profiler failing must not hide the partition-level numbers
            prof, source = None, f"even split (profiler failed: {type(e).__name__}: {e})"
        k_rows, part, lost = _attribute(m, blob, prof, p_ms, source, lk, node_name, nodes_out,
                                      contraction)
        kernels_out.extend(k_rows)
        partitions.append(part)
        unattributed.extend(lost)
    for row in nodes_out.values():
        if "shared_with" in row:
            row["shared_with"] = sorted(node_name.get(i, i) for i in row["shared_with"])
    total = sum(p["ms"] for p in partitions)
    attributed = sum(r["ms"] for r in nodes_out.values())
    return {"e2e_ms": e2e_ms, "e2e_plain_ms": statistics.median(plain) * 1e3,
            "partitions_total_ms": total,
            # Medians of the parts need not sum to the median of the whole: the remainder is
            # defined as the difference, so the rows add up exactly (it can be a hair negative
            # when the executor's own time is below the medians' disagreement).
            "between_partitions_ms": e2e_ms - total,
            "artifact_digest": mod.artifact.digest,
            "coverage": total / e2e_ms if e2e_ms else None, "repeats": repeats,
            "conditions": conditions.to_dict(),
            # The share of the partitions' measured time that reached ONNX nodes, and the rest
            # with its reasons (rows add up to partitions_total_ms - attributed_ms).
            "attributed_ms": attributed,
            # float sums of the same times differ in the last bits (-4.4e-16 ms was printed)
            "attributed_share": min(attributed / total, 1.0) if total > 0 else None,
            "unattributed": {"ms": max(total - attributed, 0.0),
                             "rows": sorted(unattributed, key=lambda r: -r["ms"])},
            "partitions": partitions,
            "kernels": sorted(kernels_out, key=lambda r: -r["ms"]),
            "onnx_nodes": sorted(nodes_out.values(), key=lambda r: -r["ms"]),
            "trace": chrome_trace(trace_run, partitions, kernels_out) if trace_run else None}


def _attribute(m, blob, prof, p_ms: float, source: str, lk, node_name: dict,
               nodes_out: dict, contraction: set) -> tuple[list, dict, list]:
    """One partition: its kernel rows, its partition row and its unattributed rows; adds its
    node times to `nodes_out`.

    Scaling: the profiler's times (kernels and `PROFILED_UNMATCHED`) are shares of the
    partition's measured time: their share of the profiled calls' wall time where the backend
    gives it (`PROFILED_WALL`), else at most all of it; a kernel shared by several ONNX nodes
    goes to its contractions (`contraction`: node ids), else evenly (module doc).  What
    reaches no node is reported: the library's time outside its kernels, profiled time the
    backend could not pair with a kernel, kernels with no node.
    """
    names = [k.name for k in blob.kernels]
    unmatched_share = 0.0
    if not prof:
        share = {n: 1.0 / len(names) for n in names} if names else {}
        inside_ms = p_ms
    else:
        prof = dict(prof)
        wall = prof.pop(PROFILED_WALL, None)
        tot = sum(prof.values())
        # Profilers see only kernel time; what the library spends around them stays with
        # the partition.  With the profiled calls' own wall time, the kernels' share of it
        # is their share of the partition's time; without, kernel times are scaled to at most
        # the measured partition time.
        inside_ms = p_ms * min(1.0, tot / wall) if wall else min(p_ms, tot * 1e3)
        share = {n: prof.get(n, 0.0) / tot for n in names} if tot > 0 else {}
        unmatched_share = prof.get(PROFILED_UNMATCHED, 0.0) / tot if tot > 0 else 0.0
    k_rows, orphan_ms = [], 0.0
    for k in blob.kernels:
        q = f"{m.id}:{k.name}"
        ms = share.get(k.name, 0.0) * inside_ms
        answer = lk.kernel(q)
        # Time goes to the nodes the kernel computes; nodes folded into it (a ConstantOfShape
        # weight, a Shape chain) cost nothing at run time.  Only a kernel made of folded
        # nodes alone keeps them, so its time still has an owner.
        every = [d for a in answer for d in a["onnx_nodes"]]
        nodes = [d for d in every if d.get("role") not in ("constant", "folded")] or \
            [d for d in every if d.get("role") != "constant"]
        ids = sorted({d["id"] for d in nodes})
        onnx_nodes = [node_name.get(i, i) for i in ids]
        k_rows.append({"kernel": q, "partition": m.id, "backend": m.backend, "ms": ms,
                       "onnx_nodes": onnx_nodes, "source": source})
        if not ids:
            orphan_ms += ms
        payers = [i for i in ids if i in contraction] or ids
        for i in ids:
            row = nodes_out.setdefault(i, {"onnx_node": node_name.get(i, i), "id": i,
                                          "ms": 0.0, "kernels": [], "backend": m.backend})
            row["ms"] += ms / len(payers) if i in payers else 0.0
            row["kernels"].append(q)
            if len(ids) > 1:
                row.setdefault("shared_with", set()).update(set(ids) - {i})
    kernels_ms = inside_ms if share else 0.0
    part = {"partition": m.id, "backend": m.backend, "ms": p_ms, "kernels_ms": kernels_ms,
            "outside_kernels_ms": p_ms - kernels_ms, "kernels": len(names),
            "kernel_times": source}
    lost = [{"partition": m.id, "backend": m.backend, "ms": ms, "what": what} for ms, what in (
        (p_ms - kernels_ms, "outside kernels (the library's own per-call time)"),
        (unmatched_share * inside_ms, "profiled layers that are no kernel of the blob"),
        (orphan_ms, "kernels mapped to no ONNX node")) if ms > 1e-9]
    return k_rows, part, lost


def chrome_trace(trace_run, partitions, kernels) -> dict:
    """Chrome trace (chrome://tracing, Perfetto): partitions as measured in one run; inside
    each, its kernels laid end to end with their attributed durations."""
    start, marks = trace_run
    events = []
    by_part: dict[str, list] = {}
    for k in kernels:
        by_part.setdefault(k["partition"], []).append(k)
    prev_end = 0.0
    for m, end, dt in marks:
        ts = (end - dt - start) * 1e6
        if ts > prev_end:  # what the executor did before this call: boundary tensors, dispatch
            events.append({"name": "between partitions", "cat": "executor", "ph": "X",
                           "ts": prev_end, "dur": ts - prev_end, "pid": 1, "tid": "executor"})
        prev_end = (end - start) * 1e6
        events.append({"name": f"{m.id} ({m.backend})", "cat": "partition", "ph": "X",
                       "ts": ts, "dur": dt * 1e6, "pid": 1, "tid": m.backend,
                       "args": {"partition": m.id}})
        t = ts
        for k in sorted(by_part.get(m.id, []), key=lambda r: r["kernel"]):
            if k["ms"] <= 0:
                continue
            events.append({"name": k["kernel"], "cat": "kernel", "ph": "X", "ts": t,
                           "dur": k["ms"] * 1e3, "pid": 1, "tid": f"{m.backend} kernels",
                           "args": {"onnx_nodes": k["onnx_nodes"], "source": k["source"]}})
            t += k["ms"] * 1e3
    return {"traceEvents": events, "displayTimeUnit": "ms"}
