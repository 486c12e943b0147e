"""The limit of partitioning alone, without a search: `python -m provmap.bench.limit_run`.

Why a step of its own: whether a model has room for a partitioned plan is the question before
any search, and the full bench spends most of its time (the search, the latency run of every
strategy) on other questions.  This profiles each searched backend and its thread variants on
the whole model, builds and measures the oracle's own plans, prices a cut from them and gives
the limit with cuts priced (workbench/cut_price.py), the same rows `provmap bench` writes in
its limit tables, for the user-sized models on a quiet machine in minutes per model.

    python -m provmap.bench.limit_run --user-models mobilenet_v3_large,bert_base -o DIR
    python -m provmap.bench.limit_run model.onnx -o DIR

DIR gets limits.json (one row per model, as results.json's `headroom`) and limits.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def limit_rows(specs: list[str], repeats: int, say) -> list[dict]:
    from provmap.partition.compile import load_view

    from .limits import headroom
    from .suite import SuiteOptions, _load_model

    opts = SuiteOptions(models=specs, backends=["onnxruntime", "openvino"])
    rows = []
    for spec in specs:
        model, name = _load_model(spec, False)
        log = lambda m, n=name: say(f"[{n}] {m}")  # noqa: E731
        t0 = time.perf_counter()
        row = headroom(load_view(model, name), opts, [], log, repeats)
        if row is not None:
            row["model"], row["seconds"] = name, round(time.perf_counter() - t0, 1)
            rows.append(row)
        log(f"done in {time.perf_counter() - t0:.0f} s")
    return rows


def markdown(res: dict) -> str:
    from provmap.workbench.headroom import verdict
    from provmap.workbench.oracle_plan import describe

    from .report import _f, _table, priced_table

    h = res["host"]
    lines = [f"# The limit of partitioning, {res['date']}", "",
             f"Host: {h.get('cpu_model')} ({h.get('machine')}, {h.get('cpus')} CPUs), load at "
             f"start {res['load_at_start']}; `python -m provmap.bench.limit_run`; "
             f"{res['versions']}.", ""]
    lines += _table(
        "The unpriced limit (each fused unit on its fastest configuration, calibrated profile "
        "times, boundaries free) against the best single configuration, both profiled alone.",
        ["model", "best single", "best single ms", "limit ms", "headroom", "verdict",
         "seconds"],
        [[r["model"], r["best_single"], _f(r["best_single_ms"], "{:.3f}"),
          _f(r["oracle_ms"], "{:.3f}"), _f(r["headroom_share"], "{:.1%}"),
          verdict(r["headroom_share"]) + (" **noisy**" if r.get("noisy") else ""),
          r.get("seconds")] for r in res["limits"]])
    lines += priced_table(res["limits"])
    for r in res["limits"]:
        if r.get("oracle_plans"):
            lines += [f"## {r['model']}", ""] + [f"- {t}" for t in describe(r["oracle_plans"])]
            lines.append("")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    from provmap.provenance.util.atomic import write_bytes_atomic
    from provmap.provenance.util.errors import ProvmapError
    from provmap.runtime_module.artifact import host_info
    from provmap.runtime_module.host import _cpu_model

    from .suite import versions
    from .user_bench import prepare

    ap = argparse.ArgumentParser(prog="python3 -m provmap.bench.limit_run",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", help="ONNX files or bundled: names")
    ap.add_argument("--user-models", help="comma-separated user-sized models (exported once)")
    ap.add_argument("--models-dir", help="where the user-sized models are (or go)")
    ap.add_argument("--repeats", type=int, default=10, help="profiled runs per configuration")
    ap.add_argument("-o", "--output", required=True, help="directory for limits.json/.md")
    a = ap.parse_args(argv)
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    try:
        out = Path(a.output)
        if out.exists() and not out.is_dir():
            raise ProvmapError(f"-o {out}: not a directory")
        if not out.parent.is_dir():
            raise ProvmapError(f"-o {out}: directory {out.parent} does not exist")
        specs = list(a.models)
        if a.user_models:
            specs += prepare([n for n in a.user_models.split(",") if n],
                             Path(a.models_dir) if a.models_dir else None, progress=say)
        if not specs:
            raise ProvmapError("no model: name ONNX files or --user-models")
        from provmap.provenance.bundled import zoo

        for spec in specs:  # every model resolves before anything is written
            zoo.resolve(spec if spec.startswith("bundled:") or os.path.exists(spec)
                        else f"bundled:{spec}")
        res = {"date": time.strftime("%Y-%m-%d"), "started": time.strftime("%H:%M:%S"),
               "host": {**host_info(), "cpu_model": _cpu_model()},
               "load_at_start": [round(x, 2) for x in os.getloadavg()],
               "versions": versions(), "limits": limit_rows(specs, a.repeats, say)}
        res["load_at_end"] = [round(x, 2) for x in os.getloadavg()]
        out.mkdir(exist_ok=True)
        write_bytes_atomic(out / "limits.json", json.dumps(res, indent=1, default=str).encode())
        write_bytes_atomic(out / "limits.md", markdown(res).encode())
    except ProvmapError as e:
        print(f"limit_run: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("limit_run: interrupted", file=sys.stderr)
        return 130
    print(out / "limits.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
