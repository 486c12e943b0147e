"""Real PyTorch architectures, exported to ONNX the two ways users do, run through provmap.

Each model is built from its library's own classes with random weights (nothing is downloaded:
`weights=None`, `XxxModel(XxxConfig(...))`), small configurations so the whole corpus runs on two
cores, and exported with both exporters:

- torchscript: `torch.onnx.export(..., dynamo=False, opset_version=17)`
- dynamo:      `torch.onnx.export(..., dynamo=True, opset_version=18)`

Then every (model, exporter) goes through:

- map:        `import_onnx` + `compile_tvm` + `mark_not_compilable`: the provenance map's coverage
              (every ONNX node mapped or elided), and the nodes TVM could not import (opaque);
- strategies: `compile_model(model, strategy)` -> artifact file -> `load(path).run(feeds)`,
              compared with ONNX Runtime on the exported model (rtol 1e-3, atol 1e-4).

Random weights need care or comparisons prove nothing: all-zero parameters are re-drawn and
BatchNorm statistics are estimated from a seeded batch (else outputs are ~0).  Files are saved
with IR at most 10: ONNX Runtime 1.32 refuses IR 11+, which onnx 1.23's helpers write (the torch
2.14 exporters wrote IR 8 and 10, so this changed nothing in our run).

Each step runs in its own process with a deadline (a native crash or a hang is one failed step).

    pip install -e '.[torch]'
    provmap bench torch_corpus [-o OUT]
    provmap bench torch_corpus --models bert,resnet18 --exporters dynamo \\
        --strategies map,single:onnxruntime -o /tmp/t.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np

from provmap.provenance.util.errors import first_line

from .torch_models import EXPORTERS, MODELS, export

RTOL, ATOL = 1e-3, 1e-4
STEPS = ["map", "single:onnxruntime", "single:openvino", "single:tvm",
         "collage:onnxruntime,openvino"]
# collage measures candidates (~1-2 min a model here): only on `--heavy-models` unless asked for
# every model with --heavy-all.  single:tvm builds whole networks with untuned TVM: a few seconds
# to a minute each at these sizes; --skip-tvm leaves it out.
DEFAULT_HEAVY_MODELS = ["bert", "distilbert", "gpt2", "vit", "mobilenet_v3_small"]


def _heavy(step: str) -> bool:
    return step.startswith(("collage", "greedy"))


def ort_outputs(path: Path, feeds: dict) -> dict[str, np.ndarray]:
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds)))


def compare(got: dict, want: dict, rtol: float = RTOL,
            atol: float = ATOL) -> tuple[bool, float | None, str]:
    """All outputs within rtol/atol?  (ok, max abs diff, note)."""
    worst, notes = 0.0, []
    ok = True
    for name, w in want.items():
        if name not in got:
            return False, None, f"output {name!r} missing"
        g = np.asarray(got[name])
        if g.shape != w.shape:
            return False, None, f"{name}: shape {list(g.shape)} != {list(w.shape)}"
        d = float(np.max(np.abs(g.astype(np.float64) - w.astype(np.float64)))) if w.size else 0.0
        worst = max(worst, d)
        if not np.allclose(g, w, rtol=rtol, atol=atol, equal_nan=True):
            ok = False
            notes.append(f"{name}: max abs diff {d:.3g}")
    return ok, worst, "; ".join(notes)


# ---- the steps (each in a fresh worker process) -----------------------------------------------
def _step_map(task: dict) -> dict:
    from provmap.provenance.build import compile_tvm
    from provmap.provenance.importer import import_onnx, mark_not_compilable
    from provmap.runtime_module.backends.ort_types import ORT_TYPES

    imp = import_onnx(task["model"], shape_dict=task["shape_dict"], type_oracle=ORT_TYPES)
    opaque = {str(i): r for i, r in imp.opaque.items()}
    graph = imp.model.graph
    opaque_ops = {str(i): f"{graph.node[i].op_type} {graph.node[i].name}: {r}"
                  for i, r in imp.opaque.items() if i < len(graph.node)}
    try:
        b = compile_tvm(imp)
    except Exception as e:  # noqa: BLE001  (keep what the import said: it explains the build)
        return {"ok": False, "error": first_line(e, with_type=True),
                "opaque": opaque_ops or opaque,
                "folded": len(imp.folded),
                "trace": traceback.format_exc().strip().splitlines()[-12:]}
    mark_not_compilable(b.pmap, imp)
    cov = b.pmap.coverage()
    unacc = [f"#{n.id} {getattr(n, 'op_type', '')} {getattr(n, 'name', '')}".strip()
             for n in b.pmap.nodes
             if n.id not in {x for x, _, _ in b.pmap.node_sites()} and not n.elided]
    return {"ok": cov["onnx_nodes_unaccounted"] == 0, "coverage": cov,
            "opaque": opaque_ops or opaque, "folded": len(imp.folded),
            "unaccounted": unacc[:20]}


def _step_strategy(task: dict) -> dict:
    from provmap.partition.compile import compile_model
    from provmap.partition.strategy import parse_strategy
    from provmap.runtime_module.module import load

    strategy = parse_strategy(task["step"])
    opts = None
    if strategy.kind == "collage":
        from provmap.partition.collage import CollageOptions
        opts = CollageOptions(measure_budget_s=task["collage_budget_s"],
                              cache_path=task["cache_path"], accept_contended=True)
    backend_options = {b.name: {"threads": task["threads"]} for b in strategy.used
                       if b.name in ("onnxruntime", "openvino")}
    t0 = time.perf_counter()
    art = compile_model(task["model"], strategy, out=task["artifact"],
                        input_shapes=task["shape_dict"], collage_options=opts,
                        backend_options=backend_options)
    t_compile = time.perf_counter() - t0
    plan = [p.get("backend") for p in art.manifest.get("partitions", [])]
    del art
    data = np.load(task["feeds"])
    feeds = {k[len("in:"):]: data[k] for k in data.files if k.startswith("in:")}
    want = {k[len("ort:"):]: data[k] for k in data.files if k.startswith("ort:")}
    mod = load(task["artifact"])
    got = mod.run(feeds)
    mod.close()
    ok, diff, note = compare(got, want)
    res = {"ok": ok, "max_abs_diff": diff, "compile_s": round(t_compile, 1),
           "partitions": len(plan), "backends": sorted(set(plan)),
           "collage": strategy.kind == "collage"}
    if not ok:
        res["error"] = f"wrong numbers: {note}"
    return res


def _worker(task_path: str) -> None:
    task = json.loads(Path(task_path).read_text())
    for var in ("OMP_NUM_THREADS", "TVM_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(var, str(task["threads"]))
    t0 = time.perf_counter()
    try:
        res = _step_map(task) if task["step"] == "map" else _step_strategy(task)
    except BaseException as e:  # noqa: BLE001  (a step's failure is a result)
        res = {"ok": False, "error": first_line(e, with_type=True),
               "trace": traceback.format_exc().strip().splitlines()[-12:]}
    res["seconds"] = round(time.perf_counter() - t0, 1)
    Path(task["result"]).write_text(json.dumps(res, default=str))


def run_step(task: dict, workdir: Path, timeout: float) -> dict:
    tag = f"{task['name']}_{task['step'].replace(':', '-').replace(',', '+')}"
    tpath, rpath = workdir / f"{tag}.task.json", workdir / f"{tag}.result.json"
    log = workdir / f"{tag}.log"
    task = dict(task, result=str(rpath))
    tpath.write_text(json.dumps(task))
    rpath.unlink(missing_ok=True)
    code, secs = run_with_deadline([sys.executable, "-m", "provmap.bench.torch_corpus",
                                    "--worker", str(tpath)], log, timeout)
    if code is None:
        return {"ok": False, "error": f"timeout after {timeout:.0f} s", "seconds": secs}
    if rpath.exists():
        return json.loads(rpath.read_text())
    tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()][-1:]
    return {"ok": False, "error": f"worker died (exit code {code}): {tail[0][:300] if tail else ''}",
            "seconds": secs}


def run_with_deadline(cmd: list[str], log: Path, timeout: float, stdout: Path | None = None,
                      env: dict | None = None) -> tuple[int | None, float]:
    """Run `cmd`, killed after `timeout` s: a native crash or a hang is one failed step, not the
    end of the run.  stderr (and stdout unless `stdout` is given) goes to `log`.  Returns (exit
    code or None on timeout, seconds)."""
    t0 = time.perf_counter()
    with open(log, "wb") as lf, open(stdout or os.devnull, "wb") as of:
        proc = subprocess.Popen(cmd, stdout=of if stdout else lf, stderr=lf, env=env,
                                cwd=str(Path(__file__).resolve().parent.parent))
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = None
    return code, round(time.perf_counter() - t0, 1)


# ---- the report -------------------------------------------------------------------------------
def _cell(r: dict | None) -> str:
    if r is None:
        return "-"
    if r.get("skipped"):
        return "skip"
    if r.get("ok"):
        d = r.get("max_abs_diff")
        cell = "ok" if d is None else f"ok {d:.1e}"
        if r.get("partitions") and len(r.get("backends", [])) and r.get("collage"):
            cell += f" ({r['partitions']}p {'+'.join(r['backends'])})"
        return cell
    d = r.get("max_abs_diff")
    if d is not None:
        return f"**WRONG** {d:.1e}"
    return "**err**"


def markdown(results: list[dict], steps: list[str], meta: dict) -> str:
    heads = (["model", "exporter", "nodes", "ORT vs torch", "opaque", "map coverage"]
             + [s for s in steps if s != "map"])
    lines = [f"Run {meta['date']} on {meta['host']} ({meta['versions']}).", "",
             "| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for r in results:
        ex = r["export"]
        if not ex.get("ok"):
            lines.append(f"| {r['model']} | {r['exporter']} | export failed: "
                         f"{ex.get('error', '')[:120]} |" + " |" * (len(heads) - 3))
            continue
        if "ort_vs_torch" not in ex:
            lines.append(f"| {r['model']} | {r['exporter']} | {ex['nodes']} | ORT refused the "
                         f"export: {ex.get('ort_error', '')[:120]} |" + " |" * (len(heads) - 4))
            continue
        m = r["steps"].get("map")
        if m is None or m.get("skipped"):
            cov, opq = "-", "-"
        elif "coverage" not in m and m.get("opaque"):
            cov, opq = "**err**", str(len(m["opaque"]))
        elif "coverage" in m:
            c = m["coverage"]
            done = c["onnx_nodes_mapped"] + c["onnx_nodes_elided"]
            cov = (f"{done}/{c['onnx_nodes_total']}"
                   + ("" if m["ok"] else f" (**{c['onnx_nodes_unaccounted']} unaccounted**)"))
            opq = str(len(m.get("opaque", {})))
        else:
            cov, opq = "**err**", "-"
        ovt = ex["ort_vs_torch"]
        cells = [r["model"], r["exporter"], str(ex["nodes"]),
                 (f"{ovt['max_abs_diff']:.1e}" if ovt["ok"] else f"**{ovt['max_abs_diff']:.1e}**"),
                 opq, cov]
        cells += [_cell(r["steps"].get(s)) for s in steps if s != "map"]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("`ORT vs torch`: max abs diff of ONNX Runtime on the exported file against "
                 "PyTorch (the reference's own check).  Strategy cells: `ok D` = the provmap "
                 "artifact ran and matched ONNX Runtime on the exported file within "
                 f"rtol {RTOL:g}, atol {ATOL:g} (D = max abs diff; collage adds the chosen "
                 "plan: partitions and backends); `skip` = not run (collage on a model outside "
                 "--heavy-models); `err` = failed, see below.")
    errs = []
    for r in results:
        if not r["export"].get("ok"):
            errs.append(f"- {r['model']} / {r['exporter']} / export: {r['export'].get('error')}")
        for s, st in r["steps"].items():
            if not st.get("skipped") and not st.get("ok"):
                errs.append(f"- {r['model']} / {r['exporter']} / {s}: "
                            f"{st.get('error') or 'map coverage incomplete'}")
            if s == "map" and st.get("opaque"):
                for i, why in list(st["opaque"].items())[:5]:
                    errs.append(f"- {r['model']} / {r['exporter']} / map: opaque node #{i}: {why}")
    if errs:
        lines += ["", "Failures:", ""] + errs
    return "\n".join(lines) + "\n"


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version
    out = []
    for p in ["torch", "transformers", "torchvision", "onnx", "onnxruntime", "openvino",
              "apache-tvm"]:
        try:
            out.append(f"{p} {version(p)}")
        except PackageNotFoundError:
            pass
    return ", ".join(out)


def main(argv=None) -> int:
    from .steps import parser

    ap = parser("torch_corpus", __doc__, raw=True)
    ap.check_output = False  # a --worker writes no record: checked below, for the run only
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--models", default=",".join(MODELS), help=f"of {','.join(MODELS)}")
    ap.add_argument("--exporters", default=",".join(EXPORTERS))
    ap.add_argument("--strategies", default=",".join(STEPS),
                    help="steps: map and provmap strategies (default: %(default)s)")
    ap.add_argument("--heavy-models", default=",".join(DEFAULT_HEAVY_MODELS),
                    help="models that get the collage/greedy steps; others show 'skip' "
                         "(default: %(default)s)")
    ap.add_argument("--heavy-all", action="store_true", help="collage/greedy on every model")
    ap.add_argument("--no-heavy", action="store_true", help="skip collage/greedy everywhere")
    ap.add_argument("--skip-tvm", action="store_true", help="skip single:tvm everywhere")
    ap.add_argument("--out", default="/tmp/provmap-torch", help="ONNX files, artifacts, logs")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per step")
    ap.add_argument("--collage-budget", type=float, default=60,
                    help="collage's measurement budget in seconds")
    ap.add_argument("--threads", type=int, default=1, help="threads per backend (default 1)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.worker:
        _worker(args.worker)
        return 0
    ap.checked(args)

    models = [m for m in args.models.split(",") if m]
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        ap.error(f"unknown model(s) {unknown}; known: {', '.join(MODELS)}")
    exporters = [e for e in args.exporters.split(",") if e]
    steps = [s for s in _split_steps(args.strategies)]
    heavy_models = set(MODELS) if args.heavy_all else set(args.heavy_models.split(","))
    out = Path(args.out)
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    meta = {"date": datetime.date.today().isoformat(),
            "host": f"{platform.machine()}, {os.cpu_count()} cores",
            "versions": _versions(), "rtol": RTOL, "atol": ATOL, "steps": steps,
            "threads": args.threads}
    results = []
    t_all = time.perf_counter()
    for name in models:
        spec = MODELS[name]
        for exporter in exporters:
            tag = f"{name}_{exporter}"
            path = out / f"{tag}.onnx"
            rec = {"model": name, "exporter": exporter, "family": spec.family, "steps": {}}
            results.append(rec)
            print(f"[{time.perf_counter() - t_all:6.0f}s] {tag}: export", flush=True)
            try:
                info = export(spec, exporter, path, args.seed)
            except Exception as e:  # noqa: BLE001
                rec["export"] = {"ok": False, "error": first_line(e, with_type=True),
                                 "trace": traceback.format_exc().strip().splitlines()[-8:]}
                print(f"    export failed: {rec['export']['error']}", flush=True)
                continue
            feeds, torch_outs = info.pop("feeds"), info.pop("torch_outputs")
            rec["export"] = dict(info, ok=True, path=str(path))
            try:
                want = ort_outputs(path, feeds)
                # The exported file against PyTorch: is the reference itself right?
                tw = dict(zip(want, torch_outs))
                ok, diff, note = compare(want, tw)
                rec["export"]["ort_vs_torch"] = {"ok": ok, "max_abs_diff": diff, "note": note}
            except Exception as e:  # noqa: BLE001
                rec["export"]["ort_error"] = first_line(e, with_type=True)
                print(f"    onnxruntime refused the export: {first_line(e, with_type=True)}", flush=True)
                want = {}
            fpath = work / f"{tag}.feeds.npz"
            np.savez(fpath, **{f"in:{k}": v for k, v in feeds.items()},
                     **{f"ort:{k}": v for k, v in want.items()})
            for step in steps:
                if ((_heavy(step) and (args.no_heavy or name not in heavy_models))
                        or (step == "single:tvm" and args.skip_tvm)):
                    rec["steps"][step] = {"skipped": True}
                    continue
                task = {"name": tag, "step": step, "model": str(path),
                        "shape_dict": spec.shape_dict(1), "feeds": str(fpath),
                        "artifact": str(work / f"{tag}_{step.replace(':', '-').replace(',', '+')}.pmod"),
                        "cache_path": str(out / "costs.sqlite"), "threads": args.threads,
                        "collage_budget_s": args.collage_budget}
                if step != "map" and not want:
                    rec["steps"][step] = {"ok": False, "error": "no ONNX Runtime reference"}
                    continue
                r = run_step(task, work, args.timeout)
                rec["steps"][step] = r
                status = "ok" if r.get("ok") else f"FAIL {r.get('error', 'coverage')}"
                diff = r.get("max_abs_diff")
                print(f"[{time.perf_counter() - t_all:6.0f}s] {tag}: {step}: {status}"
                      + (f" (max diff {diff:.2g})" if diff is not None else "")
                      + f" [{r.get('seconds')} s]", flush=True)
            _write(args.output, results, steps, meta)
    meta["total_s"] = round(time.perf_counter() - t_all, 1)
    _write(args.output, results, steps, meta)
    print(markdown(results, steps, meta))
    return 0


def _split_steps(s: str) -> list[str]:
    """'map,single:tvm,collage:onnxruntime,openvino' -> steps (backend lists after 'collage:'
    or 'greedy:' take the following bare names)."""
    out: list[str] = []
    for part in s.split(","):
        if not part:
            continue
        if out and ":" not in part and part != "map" and out[-1].split(":")[0] in ("collage", "greedy"):
            out[-1] += "," + part
        else:
            out.append(part)
    return out


def _write(out, results, steps, meta) -> None:
    """The record so far (written after every model: a corpus run lasts up to an hour)."""
    from .records import write_record

    write_record("torch_corpus", out, {"meta": meta, "results": results},
                 markdown(results, steps, meta))


if __name__ == "__main__":
    sys.exit(main())
