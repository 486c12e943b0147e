"""Collage over tuned TVM, ONNX Runtime and OpenVINO, run twice on one tuning database.

What issue 13 asks to see: `provmap compile MODEL --strategy collage --backends
tvm,onnxruntime,openvino --backend-option tvm.tune=metaschedule ...` completes within a stated
budget, the second run tunes nothing, and the artifact matches ONNX Runtime.  Each model is
compiled through the CLI: run 1 with empty cost cache and tuning database; run 2 the same
command again (cost cache and database of run 1: nothing is measured, so nothing is tuned; the
artifact's TVM partitions, if any, build from the database); run 3 (--fresh-cache) with an
empty cost cache and run 1's database: every candidate is built again and asks the database
(a search asks for the regions its prices lead it to, so run 3 may meet, and tune, regions run
1 never asked for).  The last artifact is run and compared with ONNX Runtime on the whole
model.

    provmap bench tuned_collage --models transformer,squeezenet --trials 8
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def compile_once(model: str, out: Path, cache: Path, db: Path, args) -> dict:
    cmd = [sys.executable, "-m", "provmap.cli.main", "compile", f"bundled:{model}",
           "-o", str(out), "--strategy", "collage", "--backends", "tvm,onnxruntime,openvino",
           "--backend-option", "tvm.tune=metaschedule",
           "--backend-option", f"tvm.trials={args.trials}",
           "--backend-option", f"tvm.tune_budget={args.tune_budget}",
           "--tuning-db", str(db), "--cache", str(cache),
           "--max-size", str(args.max_size), "--refine-budget", str(args.refine_budget), "--json"]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "failed",
                "wall_s": wall}
    summary = json.loads(r.stdout)
    search = summary.get("search") or {}
    return {"wall_s": round(wall, 1), "command": " ".join(cmd[2:]),
            "partitions": summary["partitions"],
            "search_tuning": (search.get("estimator") or {}).get("tuning"),
            "artifact_tuning": summary.get("tuning"),
            "measured": (search.get("estimator") or {}).get("measured"),
            "level": search.get("level"),
            "e2e": {k: v.get("median_ms") for k, v in
                    ((search.get("e2e") or {}).get("measured") or {}).items()}}


def check_against_ort(model: str, artifact: Path) -> float:
    import provmap
    from provmap.provenance.bundled import zoo
    from provmap.runtime_module.registry import get_backend
    from provmap.partition.model_source import load_view
    from provmap.runtime_module.subgraph import Subgraph  # here: it imports TVM (3-4 s)

    onnx_model = zoo.resolve(f"bundled:{model}")[0]
    feed = zoo.random_inputs(onnx_model, seed=0)
    got = provmap.load(str(artifact)).run(feed)
    view = load_view(onnx_model, model)
    ort = get_backend("onnxruntime")
    r = ort.load(ort.build(Subgraph(view, view.op_nodes)))
    want = r([feed[n] for n in r.input_names])
    return max(float(np.abs(np.asarray(got[n]) - w).max())
               for n, w in zip(r.output_names, want))


def markdown(res: dict) -> str:
    """One row a run: its wall time, what it tuned and measured, and the plan it kept."""
    lines = ["# Collage over tuned TVM, ONNX Runtime and OpenVINO (`provmap bench tuned_collage`)",
             "", "| model | run | wall s | tuned tasks (trials) | measured | kept plan | "
             "max abs err vs ONNX Runtime |", "|---|---|---:|---|---:|---|---|"]
    for model, row in res["models"].items():
        runs = [k for k in ("run1", "run2", "run3") if k in row]
        for k in runs:
            r, err = row[k], row.get("max_abs_err_vs_onnxruntime")
            if "error" in r:
                lines.append(f"| {model} | {k[3:]} | {r['wall_s']:.1f} | failed: {r['error']} "
                             "| | | |")
                continue
            t = r.get("search_tuning") or {}
            plan = ", ".join(f"{p['backend']} ({p['op_nodes']} nodes)" for p in r["partitions"])
            lines.append(f"| {model} | {k[3:]} | {r['wall_s']} | "
                         f"{t.get('tuned', 0)} ({t.get('trials', 0)}) | {r.get('measured')} | "
                         f"{plan} | {f'{err:.1e}' if k == runs[-1] and err is not None else ''}"
                         " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    from .records import record_stem, write_record
    from .steps import parser

    ap = parser("tuned_collage", __doc__, output=("--out",))
    ap.add_argument("--models", default="transformer,squeezenet")
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--tune-budget", type=int, default=2000)
    ap.add_argument("--max-size", type=int, default=12)
    ap.add_argument("--refine-budget", type=float, default=60.0)
    ap.add_argument("--append", action="store_true", help="keep the record's other models")
    ap.add_argument("--fresh-cache", action="store_true",
                    help="a third run with an empty cost cache on run 1's tuning database")
    args = ap.parse_args(argv)
    record = record_stem("tuned_collage", args.output).with_suffix(".json")
    res = {"models": {}}
    if args.append and record.exists():
        res = {k: v for k, v in json.loads(record.read_text()).items() if k != "record"}
    for model in args.models.split(","):
        with tempfile.TemporaryDirectory(prefix="provmap-tc-") as tmp:
            tmp = Path(tmp)
            row = {"date": time.strftime("%Y-%m-%d"), "trials": args.trials,
                   "tune_budget": args.tune_budget, "max_size": args.max_size,
                   "refine_budget_s": args.refine_budget}
            runs = (1, 2, 3) if args.fresh_cache else (1, 2)
            for i in runs:
                print(f"tuned_collage: {model} run {i}", file=sys.stderr, flush=True)
                cache = tmp / ("costs3.sqlite" if i == 3 else "costs1.sqlite")
                row[f"run{i}"] = compile_once(model, tmp / f"a{i}.provmap", cache,
                                              tmp / "db", args)
                if "error" in row[f"run{i}"]:
                    break
            else:
                row["max_abs_err_vs_onnxruntime"] = check_against_ort(
                    model, tmp / f"a{runs[-1]}.provmap")
            res["models"][model] = row
        write_record("tuned_collage", args.output, res, markdown(res))
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
