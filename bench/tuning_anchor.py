"""Tuning a fused region as one task vs tuning its anchor operator alone (issue 13's experiment).

For each region (conv+bias+relu from SqueezeNet, the conv+bn+add+relu residual tail of
ResNet-50, matmul+add+gelu from the transformer block), the same trial budget is spent twice:

(a) anchor-only: the anchor operator alone (the convolution without bias, the MatMul) is tuned
    as its own task; its best trace is then replayed on the fused region's TIR with
    MetaSchedule's anchor-trace transfer (the fused epilogue blocks inlined or parallelised);
(b) fused: the region's own fused TIR function is tuned as one task.

Then the region is built four ways with TVM (untuned, (a), (b)) plus ONNX Runtime and OpenVINO,
all at float32 on this host's CPU, and timed in interleaved passes in one run; the report gives
medians, minima and ratios.  Outputs are checked against ONNX Runtime first.

    provmap bench tuning_anchor --trials 32 [-o OUT]
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

# TVM (and the libraries' backends) are imported where a region is tuned, not here: `provmap
# bench tuning_anchor --help` or a mistyped option answers before TVM's 3-4 s import.


def _consumers(nodes, out):
    return [j for j, n in enumerate(nodes) if out in n.input]


def region_squeezenet(model):
    """fire2/expand3x3: Conv 3x3 (+bias) -> Relu."""
    nodes = list(model.graph.node)
    conv = next(i for i, n in enumerate(nodes) if n.op_type == "Conv"
                and "expand3x3" in n.input[1])
    relu = _consumers(nodes, nodes[conv].output[0])[0]
    return "squeezenet fire2/expand3x3 conv+bias+relu", [conv, relu], conv


def region_resnet50(model):
    """The first bottleneck's tail: Conv 1x1 -> BatchNormalization -> Sum (residual) -> Relu."""
    nodes = list(model.graph.node)
    prod = {o: i for i, n in enumerate(nodes) for o in n.output}
    s = next(i for i, n in enumerate(nodes) if n.op_type == "Sum")
    bn = prod[nodes[s].input[0]]
    conv = prod[nodes[bn].input[0]]
    relu = _consumers(nodes, nodes[s].output[0])[0]
    return "resnet50 res2_0 conv+bn+add+relu tail", [conv, bn, s, relu], conv


def region_transformer(model):
    """ffn/fc1: MatMul -> Add (bias) -> Gelu (Erf form, five ops)."""
    nodes = list(model.graph.node)
    ops = [i for i, n in enumerate(nodes) if n.name.startswith(("ffn/fc1/", "ffn/gelu/"))]
    anchor = next(i for i in ops if nodes[i].op_type == "MatMul")
    return "transformer ffn fc1 matmul+add+gelu", ops, anchor


def region_transformer_residual(model):
    """attn/out_proj then the residual: MatMul -> Add (bias) -> Add (residual input)."""
    nodes = list(model.graph.node)
    names = ("attn/out_proj/MatMul", "attn/out_proj/Add", "attn/residual/Add")
    ops = [i for i, n in enumerate(nodes) if n.name in names]
    return "transformer attn out_proj matmul+add+residual add", ops, ops[0]


def region_alexnet(model):
    """conv1: Conv 11x11 stride 4 (+bias) -> Relu, the largest convolution of the bundled
    models' first layers."""
    nodes = list(model.graph.node)
    conv = next(i for i, n in enumerate(nodes) if n.op_type == "Conv")
    relu = _consumers(nodes, nodes[conv].output[0])[0]
    return "alexnet conv1 11x11 conv+bias+relu", [conv, relu], conv


# Region name -> (bundled model, picker).  ResNet-50's residual tail is kept although it does
# not fuse into one function (Relax imports Sum as broadcast_to+stack+sum and leaves
# BatchNormalization unfused in the default CPU pipeline): the row says so.
REGIONS = {"squeezenet": ("squeezenet", region_squeezenet),
           "alexnet": ("bvlc_alexnet", region_alexnet),
           "resnet50": ("resnet50", region_resnet50),
           "transformer_residual": ("transformer", region_transformer_residual),
           "transformer": ("transformer", region_transformer)}


def anchor_model(view, anchor: int) -> onnx.ModelProto:
    """The anchor operator alone, with the shapes it has in the region: a Conv without its
    bias, or the MatMul; constant operands stay initializers (the same TIR workload)."""
    from provmap.runtime_module.subgraph import Subgraph

    node = view.nodes[anchor]
    keep = list(node.input[:2])
    sub = Subgraph(view, [anchor])
    info = {t.name: t for t in sub.inputs}
    inits = {t.name: t for t in view.model.graph.initializer}
    inputs, initializers = [], []
    for name in keep:
        if name in inits:
            initializers.append(inits[name])
        else:
            t = info[name]
            inputs.append(helper.make_tensor_value_info(
                name, onnx.helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype)), list(t.shape)))
    out = helper.make_tensor_value_info(node.output[0], onnx.TensorProto.FLOAT, None)
    n = helper.make_node(node.op_type, keep, [node.output[0]], name="anchor",
                         **{a.name: helper.get_attribute_value(a) for a in node.attribute})
    g = helper.make_graph([n], "anchor", inputs, [out], initializers)
    m = helper.make_model(g, opset_imports=list(view.model.opset_import))
    m.ir_version = 8
    return onnx.shape_inference.infer_shapes(m)


def _only_task(mod, target):
    from tvm.s_tir.meta_schedule.relax_integration import extract_tasks

    import tvm

    from provmap.runtime_module.backends.tvm_tuning import fuse_passes

    with target:
        fused = tvm.transform.Sequential(fuse_passes(target))(mod)
    tasks = extract_tasks(fused, target)
    return tasks


def anchor_database(anchor_task, fused_task, record, target):
    """A database holding one record for the fused region's workload: the anchor's best trace
    replayed on the fused TIR (MetaSchedule's ScheduleUsingAnchorTrace)."""
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.trace_apply import schedule_using_anchor_trace

    fused_mod = fused_task.dispatched[0]
    sch = tvm.s_tir.Schedule(fused_mod)
    schedule_using_anchor_trace(sch, record.trace, target)
    mem = ms.database.MemoryDatabase()
    wl = mem.commit_workload(fused_mod)
    mem.commit_tuning_record(ms.database.TuningRecord(sch.trace, wl, record.run_secs, target))
    return mem


def _best_record(db, task, target):
    return db.open().query_tuning_record(task.dispatched[0], target, task.task_name)


def run_region(name: str, trials: int, passes: int, log) -> dict:
    from provmap.partition.model_source import load_view
    from provmap.provenance.bundled import zoo
    from provmap.runtime_module.backend import time_runner
    from provmap.runtime_module.backends.tvm_tuning import (TuningDatabase, make_target,
                                                            tune_region)
    from provmap.runtime_module.registry import get_backend
    from provmap.runtime_module.subgraph import Subgraph

    bundled, pick = REGIONS[name]
    model = zoo.resolve(f"bundled:{bundled}")[0]  # seeded random weights
    label, ops, anchor = pick(model)
    view = load_view(model, name)
    sub = Subgraph(view, ops)
    target = make_target("native", os.cpu_count())
    tvm_be = get_backend("tvm", mcpu="native")
    row = {"region": label, "onnx_nodes": [view.describe(i) for i in ops], "trials": trials,
           "target": str(target)}
    fused_mod = tvm_be.region(sub)[0]
    tasks = _only_task(fused_mod, target)
    row["fused_tasks"] = [t.task_name for t in tasks]
    if len(tasks) != 1:
        row["skipped"] = f"the region fuses into {len(tasks)} TIR functions, not one"
        return row
    aview = load_view(anchor_model(view, anchor), f"{name}-anchor")
    anchor_mod = tvm_be.region(Subgraph(aview, aview.op_nodes))[0]
    atasks = _only_task(anchor_mod, target)
    row["anchor_task"] = atasks[0].task_name

    with tempfile.TemporaryDirectory(prefix="provmap-anchor-") as tmp:
        dba, dbf = TuningDatabase(Path(tmp) / "a", target), TuningDatabase(Path(tmp) / "f", target)
        t0 = time.perf_counter()
        sa = tune_region(anchor_mod, target, dba, trials, trials, log=log)
        t1 = time.perf_counter()
        sf = tune_region(fused_mod, target, dbf, trials, trials, log=log)
        t2 = time.perf_counter()
        row["tuning_s"] = {"anchor": round(t1 - t0, 1), "fused": round(t2 - t1, 1)}
        row["trials_spent"] = {"anchor": sa.trials, "fused": sf.trials}
        arec = _best_record(dba, atasks[0], target)
        frec = _best_record(dbf, tasks[0], target)
        row["tuner_best_ms"] = {
            "anchor_alone": _ms(arec), "fused": _ms(frec)}
        blobs = {"tvm_untuned": tvm_be.build(sub)}
        if arec is not None:
            blobs["tvm_anchor_tuned"] = tvm_be.build_with_database(
                sub, anchor_database(atasks[0], tasks[0], arec, target), target)
        blobs["tvm_fused_tuned"] = tvm_be.build_with_database(sub, dbf.open(), target)
    others = {"onnxruntime": get_backend("onnxruntime"), "openvino": get_backend("openvino")}
    for b, be in others.items():
        blobs[b] = be.build(sub)
    backends = {k: (tvm_be if k.startswith("tvm") else others[k]) for k in blobs}
    runners = {k: backends[k].load(b) for k, b in blobs.items()}
    rng = np.random.default_rng(0)
    feed = {t.name: rng.standard_normal(t.shape).astype(t.dtype) for t in sub.inputs}
    ref = None
    errs = {}
    for k, r in runners.items():
        out = r([feed[n] for n in r.input_names])[0]
        if ref is None:
            ref = runners["onnxruntime"]([feed[n] for n in runners["onnxruntime"].input_names])[0]
        errs[k] = float(np.abs(out - ref).max())
    row["max_abs_err_vs_onnxruntime"] = errs
    samples: dict[str, list[float]] = {k: [] for k in runners}
    for _ in range(passes):  # interleaved: every build in every pass, same order
        for k, r in runners.items():
            args = [feed[n] for n in r.input_names]
            tm = time_runner(r, args, warmup=3, repeats=30, min_time_s=0.2)
            samples[k].append(tm.median_s)
            samples[k + ":min"] = samples.get(k + ":min", []) + [tm.min_s]
    for r in runners.values():
        r.close()
    row["median_ms"] = {k: statistics.median(samples[k]) * 1e3 for k in runners}
    row["min_ms"] = {k: min(samples[k + ":min"]) * 1e3 for k in runners}
    med = row["median_ms"]
    row["ratios_by_median"] = {
        "fused_vs_anchor": _ratio(med.get("tvm_fused_tuned"), med.get("tvm_anchor_tuned")),
        "fused_vs_untuned": _ratio(med.get("tvm_fused_tuned"), med.get("tvm_untuned")),
        "fused_vs_onnxruntime": _ratio(med.get("tvm_fused_tuned"), med.get("onnxruntime")),
        "fused_vs_openvino": _ratio(med.get("tvm_fused_tuned"), med.get("openvino")),
        "anchor_vs_onnxruntime": _ratio(med.get("tvm_anchor_tuned"), med.get("onnxruntime")),
    }
    return row


def _ms(rec):
    if rec is None or not rec.run_secs:
        return None
    secs = [float(x) for x in rec.run_secs]
    return sum(secs) / len(secs) * 1e3


def _ratio(a, b):
    return round(a / b, 3) if a and b else None


def to_markdown(res: dict) -> str:
    lines = [f"# Fused-region vs anchor-only tuning ({res['date']})", "",
             f"Host: {res['host']['processor'] or res['host']['machine']} "
             f"({res['host']['llvm_cpu']}, {res['host']['cpus']} cores).  {res['trials']} MetaSchedule trials per tuning, the same "
             "budget for (a) the anchor operator alone, replayed on the fused region, and (b) "
             "the fused region as one task.  Medians over "
             f"{res['passes']} interleaved passes, ms; ratios < 1 mean the first is faster.", "",
             "| region | TVM untuned | TVM anchor-tuned | TVM fused-tuned | ONNX Runtime | "
             "OpenVINO | fused/anchor | fused/ORT | fused/OV |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in res["regions"]:
        if "skipped" in r:
            lines.append(f"| {r['region']} | skipped: {r['skipped']} |||||||")
            continue
        m, q = r["median_ms"], r["ratios_by_median"]

        def f(k):
            return f"{m[k]:.3f}" if k in m else "-"
        lines.append(f"| {r['region']} | {f('tvm_untuned')} | {f('tvm_anchor_tuned')} | "
                     f"{f('tvm_fused_tuned')} | {f('onnxruntime')} | {f('openvino')} | "
                     f"{q['fused_vs_anchor']} | {q['fused_vs_onnxruntime']} | "
                     f"{q['fused_vs_openvino']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    from .records import record_stem, write_record
    from .steps import parser

    ap = parser("tuning_anchor", __doc__, output=("--out",))
    ap.add_argument("--trials", type=int, default=32)
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--regions", default=",".join(REGIONS))
    ap.add_argument("--append", action="store_true",
                    help="keep the other regions' rows of the record (same trials and passes)")
    args = ap.parse_args(argv)
    record = record_stem("tuning_anchor", args.output).with_suffix(".json")
    from provmap.runtime_module.backends.tvm_tuning import system_cpu
    from provmap.runtime_module.host import host_info

    def log(msg):
        print(f"tuning_anchor: {msg}", file=sys.stderr, flush=True)

    res = {"date": time.strftime("%Y-%m-%d"), "host": {**host_info(), "llvm_cpu": system_cpu()}, "trials": args.trials,
           "passes": args.passes, "regions": []}
    if args.append and record.exists():
        old = json.loads(record.read_text())
        if (old.get("trials"), old.get("passes")) == (args.trials, args.passes):
            res["regions"] = old["regions"]
    for name in args.regions.split(","):
        log(f"region from {name}")
        row = run_region(name, args.trials, args.passes, log)
        row["date"] = res["date"]
        res["regions"] = [r for r in res["regions"] if r["region"] != row["region"]] + [row]
        write_record("tuning_anchor", args.output, res, to_markdown(res))
    md = to_markdown(res)
    write_record("tuning_anchor", args.output, res, md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
