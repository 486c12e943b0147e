"""The limit of partitioning alone, without a search: `provmap bench limit`.

Why a step of its own: whether a model has room for a partitioned plan is the question before
any search, and the full bench spends most of its time (the search, the latency run of every
strategy) on other questions.  This profiles each searched backend and its thread variants on
the whole model, builds and measures the oracle's own plans, prices a cut from them and gives
the limit with cuts priced (workbench/cut_price.py), the same rows `provmap bench` writes in
its limit tables, for the user-sized models on a quiet machine in minutes per model.

    provmap bench limit --user-models mobilenet_v3_large,bert_base
    provmap bench limit model.onnx -o DIR

Its record: OUT/limit/<host>.json (one row per model under `limits`, as the latency record's
`headroom`) and .md (OUT: -o, default bench/out; records.py).
"""

from __future__ import annotations

import sys
import time


def latency_rows(path: str | None) -> dict[str, list[dict]]:
    """model -> its latency rows from a `provmap bench` results.json of the same host and hour
    (`--wholes-from`): their medians are the wholes the limit calibrates to, so its best single
    is that table's."""
    if not path:
        return {}
    import json

    out: dict[str, list[dict]] = {}
    with open(path, encoding="utf-8") as f:
        for r in json.load(f).get("rows", []):
            out.setdefault(r["model"], []).append(r)
    return out


def limit_rows(specs: list[str], repeats: int, say, wholes_from: str | None = None) -> list[dict]:
    from provmap.partition.compile import load_view

    from .limits import headroom
    from .suite import SuiteOptions, _load_model

    opts = SuiteOptions(models=specs, backends=["onnxruntime", "openvino"])
    rows, latency = [], latency_rows(wholes_from)
    for spec in specs:
        model, name = _load_model(spec, False)
        log = lambda m, n=name: say(f"[{n}] {m}")  # noqa: E731
        t0 = time.perf_counter()
        row = headroom(load_view(model, name), opts, latency.get(name, []), log, repeats)
        if row is not None:
            row["model"], row["seconds"] = name, round(time.perf_counter() - t0, 1)
            rows.append(row)
        log(f"done in {time.perf_counter() - t0:.0f} s")
    return rows


def markdown(res: dict) -> str:
    from provmap.workbench.headroom import verdict
    from provmap.workbench.oracle_plan import describe

    from .md import fmt as _f, table as _table
    from .report import priced_table

    h = res["host"]
    lines = [f"# The limit of partitioning, {res['date']}", "",
             f"Host: {h.get('cpu_model')} ({h.get('machine')}, {h.get('cpus')} CPUs), load at "
             f"start {res['load_at_start']}; `provmap bench limit`; "
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
    from .step_run import run_step, step_parser

    ap = step_parser("limit_run", __doc__)
    ap.add_argument("--repeats", type=int, default=10, help="profiled runs per configuration")
    ap.add_argument("--wholes-from", metavar="RECORD.json",
                    help="a latency record's JSON (same host, same hour): each "
                    "configuration's latency median is the whole its node times add up to")
    a = ap.parse_args(argv)
    return run_step("limit_run", a, "limits",
                    lambda specs, say: limit_rows(specs, a.repeats, say, a.wholes_from),
                    markdown, "limit")


if __name__ == "__main__":
    sys.exit(main())
