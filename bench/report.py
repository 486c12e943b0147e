"""A latency record's results -> its markdown (the tables of docs/results.md) and its chart (.png).
Pure functions of the results, so the tables or the chart can be regenerated from a saved
record (`provmap bench report bench/out/latency/HOST.json`)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from provmap.bench.output_err import err_cell
from provmap.bench.report_chart import chart
from provmap.provenance.util.atomic import write_atomic, write_bytes_atomic
from provmap.workbench.headroom import verdict

from .record_docs import END, START, put_tables  # noqa: F401  (START, END re-exported)
from .md import fmt as _f, table as _table
from .records import write_record
from .search_table import search_tables


def _bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _final_verdict(o: dict, p: dict) -> str:
    """A win the one comparison procedure decided (workbench/oracle_plan.py `_again`), else the
    tightened verdict (a win of one run, from results older than that, is said as such)."""
    won = next((r for r in o.get("tried", []) if r["plan"] == o.get("captured_by")), None)
    if won is None:
        return verdict(p.get("tightened_share", p["headroom_share"]))
    if won.get("again"):
        how = "decided faster" if won["again"].get("decision") else "faster in two runs"
        return f"**win**: {won['plan']} {how}"
    return (f"{verdict(p.get('tightened_share', p['headroom_share']))}; {won['plan']} faster "
            "in one run, not measured again")


def priced_table(limits: list[dict]) -> list[str]:
    """The limit again with each cut priced at what this run's oracle plans measured
    (workbench/cut_price.py): the room left once boundaries cost something."""
    rows = []
    for h in limits:
        p = (h.get("oracle_plans") or {}).get("priced")
        if not p or p.get("headroom_share") is None:
            continue
        src = p.get("kappa_from") or {}
        be = p.get("break_even_ms")
        rows.append([h["model"], f"{p['kappa_ms']:.3f}" + (
            f" ({src['plan']}, {src['by']})" if p.get("priced") else " (not priced)"),
                     f"{p['whole_ms']:.3f}", f"{p['priced_ms']:.3f}", p["cuts"],
                     f"{p['headroom_share']:.1%}", verdict(p["headroom_share"]),
                     f"{be:.3f}" if be is not None else "- (under 5% even free)",
                     _f(p.get("tightened_share"), "{:.1%}", "- (no plan to measure)")
                     + (f" after {len(p.get('rounds') or [])} measured plan(s): "
                        f"{p['stopped']}" if p.get("stopped") else ""),
                     _final_verdict(h["oracle_plans"], p)
                     + (" **noisy**" if p.get("noisy") or h["oracle_plans"].get("contended")
                        else "")])
    if not rows:
        return []
    return _table(
        "The limit with cuts priced: each change of backend along the run order costs kappa, "
        "the smallest average excess per cut over additivity that this run's oracle plans "
        "measured (by median or by minimum); the cheapest path over the fused units then "
        "leaves this headroom over the best single's calibrated whole; break-even = the "
        "largest price per cut that would still leave 5% of room.  Tightened = the same "
        "path after its plans were built and measured, each moved region's cost replaced by "
        "its time measured in the plan (workbench/tighten.py), until the path stays on the "
        "best single, repeats, or a plan wins.  Assumes run-order partitions and cuts costing "
        "at least kappa on average (docs/collage.md).",
        ["model", "kappa ms/cut (from)", "best single ms", "priced limit ms", "cuts",
         "headroom", "verdict", "break-even ms/cut", "tightened headroom", "final verdict"],
        rows)

def _load(r: dict) -> str:
    """A row's load cell: other processes' CPUs / CPUs, and the noisy mark (bench/limits.py)."""
    ld = r.get("load")
    if not ld:
        return "-"
    return f"{ld['others_cores']:.1f}/{ld['cores']}" + (" **noisy**" if r.get("noisy") else "")


def _ms(x) -> str:
    """Milliseconds with three significant digits below 10 ms (0.031), two decimals above."""
    return "-" if x is None else (f"{x:.3g}" if x < 10 else f"{x:.2f}")


def _pct(x) -> str:
    return "-" if x is None else f"{x * 100:+.1f}%"


def _pair(g: dict, what: str) -> str:
    """'min / median' of a gain: 10% = the plan takes 10% less time."""
    return f"{_pct(g.get(what + '_min'))} / {_pct(g.get(what + '_median'))}"


def _one_percent(g: dict) -> str:
    """The 1% item, judged on the paired run's interval of the kept plan's slowdown (the one
    statistic, partition/measure/evidence.py: per-pass ratios of the blocks' fastest samples),
    the interval beside it where one was measured."""
    parts = []
    for by in ("min",):
        state, iv = g.get(f"one_percent_{by}"), g.get(f"confirmed_slower_{by}")
        n = g.get(f"confirmed_passes_{by}") or 0
        parts.append((state or "-") + (f" [{iv[0]:+.1%}, {iv[1]:+.1%}]" if iv else "")
                     + (f" ({n} passes)" if n > 16 else ""))
    return " / ".join(parts)


def _limit_verdict(g: dict, h: dict | None) -> str:
    """The headline's word on the limit: the limit table's final verdict where its cuts were
    priced (free cuts said "room 6%" on the row where the priced, measured limit said no room);
    the free-cut verdict only where nothing was priced, and said to be that."""
    p = ((h or {}).get("oracle_plans") or {}).get("priced")
    if p and p.get("headroom_share") is not None:
        return _final_verdict(h["oracle_plans"], p)
    if g.get("limit_ms") is None:
        return "-"
    return verdict(g.get("limit_headroom")) + " (cuts free)"


def gains_table(res: dict) -> list[str]:
    """The headline: per model, the partitioning gain (kept plan vs the best single-library
    configuration) beside the variant gain (that configuration vs its library's default)."""
    gs = [g for g in res.get("gains") or [] if g]
    if not gs:
        return []
    limits = {h.get("model"): h for h in res.get("headroom") or []}
    rows = []
    for g in gs:
        bound = "-"
        if g.get("limit_ms") is not None:
            bound = f"{_ms(g['limit_ms'])} ({_pct(g.get('limit_headroom'))})"
            if g.get("limit_is_bound") is False:
                bound += " capped"
        pred = "-"
        if g.get("predicted_ms") is not None and g.get("measured_ms") is not None:
            pred = (f"{_ms(g['predicted_ms'])} / {_ms(g['measured_ms'])} "
                    f"({_pct(g.get('predicted_error'))})")
            if g.get("predicted_basis") == "second level's measurement":
                pred += " (search measured)"
        ld = g.get("load") or {}
        load = (f"{ld['others_cores']:.1f}/{ld['cores']} (load1 {ld['load1']:.1f})" if ld
                else "-") + (" **noisy**" if g.get("noisy") else "")
        rows.append([
            g["model"],
            f"{g.get('best_default_median') or '-'} {_ms(g.get('best_default_median_ms'))}",
            f"{g.get('best_config_median') or '-'} {_ms(g.get('best_config_median_ms'))}"
            + (f" (min: {g['best_config_min']})"
               if g.get("best_config_min") != g.get("best_config_median") else ""),
            (f"{g['kept']} [{', '.join(g.get('kept_backends') or [])}] "
             f"{_ms(g.get('kept_median_ms'))}"
             + (" (searched beside a one-core hog)" if g.get("beside_hog") else "")
             if g.get("kept") else "- (no collage row)"),
            _pair(g, "variant_gain"), f"**{_pair(g, 'partitioning_gain')}**",
            _pair(g, "confirmed_gain") + (" (contended)" if g.get("confirmed_contended_min")
                                          or g.get("confirmed_contended_median") else ""),
            _one_percent(g), pred, bound,
            _limit_verdict(g, limits.get(g["model"])), load])
    return _table(
        "Gains, all from one interleaved latency run per model (ms are medians; gains by "
        "minimum / by median; +10% = 10% less time). best default single = the fastest library "
        "at its default settings; best single configuration = the fastest configuration of one "
        "library, each thread count, spinning setting and performance hint a user sets in one "
        "option included; variant gain = that configuration against its library's default; "
        "**partitioning gain** = the kept plan against the best single configuration (what "
        "provmap adds over setting one option); measured again = the kept plan against that "
        "best configuration (by minimum, then by median) in a fresh paired run, order flipping "
        "every pass: the best of eight configurations picked by the same samples reads low, so "
        "the run's own gain is biased against the kept plan (bench/paired.py); '+0.0%' without "
        "a run when the kept plan is that very configuration; 1% item = the kept plan no more "
        "than 1% slower than that configuration, judged on the paired run's 92% interval of its "
        "slowdown (the one statistic, partition/measure/evidence.py: the sign test over 16 "
        "passes' ratios of each pass's fastest samples; since 2026-11-30 in rounds of 16 more, "
        "up to 48, while undecided, the count shown past 16): 'within' when the whole interval is at "
        "most +1%, "
        "'slower' when all of it is above, 'undecided' when the pair is closer than the run can "
        "tell; predicted / measured = the search's estimate "
        "of the kept plan (for a plan its second level found, the median it was kept on: 'search "
        "measured') and the plan's median in this run; bound = the per-node oracle with each "
        "configuration's node times calibrated to add up to its median in this latency run "
        "(its profiled whole in results from before 2026-11-27), so at most every measured "
        "single configuration; its headroom over the best single configuration comes from "
        "those same numbers (bound and best single of one source), and the bound "
        "is shown on this run's scale, as that share below the fastest single minimum (so "
        "never above a measured single configuration); 'capped' only in results from before "
        "the profile recorded its share; verdict = the limit table's final verdict (cuts priced, "
        "its plans measured) where the limit was priced, else 'no room (<5%)' when the bound's "
        "headroom is under 5% and 'room N%' above, marked '(cuts free)'; load = CPUs other processes used / CPUs during the latency run.",
        ["model", "best default single", "best single configuration", "kept plan",
         "variant gain", "partitioning gain", "measured again", "1% item",
         "predicted / measured ms", "bound ms", "verdict",
         "load"],
        rows)


def markdown(res: dict) -> str:
    from .baseline import with_gains
    from .record_docs import runs_lines

    res = with_gains(res)
    v, h = res["versions"], res["host"]
    lines = [
        f"provmap bench, {res.get('started') or res['date']}, {h.get('machine')} "
        + (f"{h['cpu_model']}, " if h.get("cpu_model") else "")
        + (f"load average at start {h['load_at_start'][0]:.1f}, "
           if h.get("load_at_start") else "")
        + f"{h.get('cpus')} CPUs "
        f"({h.get('platform')}); TVM {v.get('tvm')}, ONNX Runtime {v.get('onnxruntime')}, "
        f"OpenVINO {v.get('openvino')}, Python {v.get('python')}; "
        + ("runs took" if len(res.get("runs") or ()) > 1 else "run took")
        + f" {_f((res.get('duration_s') or 0) / 60, '{:.1f}')} min"
        + (" (--quick)" if res["options"].get("quick") else "") + "."
        + (" Gains and ratios re-derived from this run's own rows against the best single "
           "configuration (the run predates that baseline; its limit table keeps the best "
           "default backend)." if res.get("gains_derived") else "")]
    lines += runs_lines(res)
    lines += gains_table(res)
    rows = []
    for r in res["rows"]:
        ratio = _f(r.get("ratio_to_best_single"), "{:.3f}")
        ratio_min = _f(r.get("ratio_min_to_best_single"), "{:.3f}")
        if r["strategy"].startswith("collage") and ratio != "-":
            ratio, ratio_min = f"**{ratio}**", f"**{ratio_min}**"
        capped = " (capped)" if r.get("capped") else ""
        twin = f" (= {r['same_plan_as']}'s plan, measured once)" if r.get("same_plan_as") else ""
        rows.append([r["model"], r["strategy"],
                     f"{r['kept']} [{', '.join(r.get('backends') or [])}]{twin}",
                     f"{r['median_ms']:.2f}{capped}", f"{r['p90_ms']:.2f}", f"{r['min_ms']:.2f}",
                     f"{r['spread']:.2f}", ratio, ratio_min, r["partitions"], err_cell(r), _load(r)])
    lines += _table(
        "End-to-end latency (all strategies of a model measured together, interleaved blocks; below 1 ms a "
        "sample is the mean of enough calls to last 1 ms); ratio = median / best single configuration's "
        "median (the fastest row of one library, its thread, spinning and hint variants included); ratio "
        "(min) = the same with minimums (steadier on a noisy machine); kept = the plan the artifact runs (a "
        "plan identical to a single-backend plan is measured once and reported for both); err = max abs "
        "difference from ONNX Runtime on the original model (and in steps for a quantized output, one step "
        "agreeing; **bold**: outside the accuracy guard's tolerance, which refuses a region that far, a "
        "mixed plan only further than each of its libraries alone, and never a library alone: the user's "
        "own baseline); load = CPUs other processes used during "
        "the model's latency run / CPUs, and **noisy** when that run was contended or the row's samples "
        "spread over 0.75 (its ratio is then not a result).",
        ["model", "strategy", "kept", "median ms", "p90 ms", "min ms", "spread", "ratio",
         "ratio (min)", "partitions", "err", "load"], rows)
    if res.get("headroom"):
        lines += _table(
            "The limit: the oracle (each ONNX node, or group of nodes some backend's kernel "
            "fuses, priced whole, on the fastest of the searched backends and variants, as "
            "profile attributes time, each configuration's node times scaled to add up to "
            "its whole; boundaries free), so at most every single configuration, and never "
            "above the kept plan; raw = the same sum unscaled; headroom = (best single - "
            "oracle) / best single, 'no room' under 5%; captured = (best single - kept) / "
            "(best single - oracle); best single, kept and oracle from one source: the wholes "
            "are this latency run's medians where it measured every configuration, else the "
            "profiled runs' (the 'wholes' column).",
            ["model", "best single", "best single ms", "kept", "kept ms", "oracle ms",
             "raw ms", "headroom", "verdict", "captured", "nodes fastest on", "wholes"],
            [[h["model"], h.get("best_single") or "-", _f(h.get("best_single_ms"), "{:.3f}"),
              h.get("kept") or "-", _f(h.get("kept_ms"), "{:.3f}"),
              _f(h.get("oracle_ms"), "{:.3f}", "- (no attributable profile)"),
              _f(h.get("oracle_sum_ms"), "{:.3f}"),
              _f(h.get("headroom_share"), "{:.1%}"), verdict(h.get("headroom_share")),
              _f(h.get("captured"), "{:.0%}", "- (no headroom)") + (" noisy" if h.get("noisy")
                                                                     else ""),
              ", ".join(f"{b} {n}" for b, n in sorted(h["nodes_fastest_on"].items()))
              + "".join(f"; {b}: {w}" for b, w in
                        sorted((h.get("unattributed") or {}).items()))
              + (f"; bound: {h['bound_by']}" if h.get("bound_by") else ""),
              h.get("wholes_from") or "profiled runs"]
             for h in res["headroom"]])
        tried = [(h["model"], r, h["oracle_plans"]) for h in res["headroom"]
                 for r in (h.get("oracle_plans") or {}).get("tried", [])]
        if tried:
            lines += _table(
                "The oracle's own plans, built and measured: a unit leaves the best single "
                "configuration when the oracle says it saves more than tau of that "
                "configuration's whole (tau 0: the oracle's assignment); partitions grouped as "
                "greedy groups them.  Predicted = the calibrated profile times the plan picked "
                "against the best single's; measured = both run alone, interleaved.  Measured "
                "far above predicted means the oracle's room is how the libraries attribute "
                "time, not a plan's.",
                ["model", "plan", "partitions", "backends", "predicted vs best single",
                 "measured (median)", "measured (min)"],
                [[m, r["plan"], r["partitions"], ", ".join(r["backends"]),
                  _f(r.get("predicted_vs_best"), "{:+.1%}"),
                  (_f(r.get("vs_best_median"), "{:+.1%}") if "failed" not in r
                   else "did not build: " + r["failed"].replace("|", "/")),
                  _f(r.get("vs_best_min"), "{:+.1%}")] for m, r, _o in tried])
        lines += priced_table(res["headroom"])
    lines += search_tables(res["search"])
    if res["artifacts"]:
        lines += _table(
            "Artifacts: size, load (verify + load every partition's code), verify only, "
            "lookup latency over every ONNX node and kernel name.",
            ["model", "strategy", "size", "build s", "load ms", "verify ms", "lookup p50 us",
             "lookup p99 us"],
            [[a["model"], a["strategy"], _bytes(a["artifact_bytes"]), f"{a['build_s']:.1f}",
              f"{a['load_ms']:.1f}", f"{a['verify_ms']:.1f}", f"{a['lookup_us_p50']:.2f}",
              f"{a['lookup_us_p99']:.2f}"] for a in res["artifacts"]])
    if res["container"]:
        lines += _table(
            "Container overhead: single-backend artifact against the same library called "
            "directly on the original model: from the interleaved run's medians, then from "
            "the two alone in paired blocks (median of the per-pass ratios, and the ratio of "
            "minimums): the paired numbers are the result, the first drifts with the machine.",
            ["model", "backend", "artifact ms", "direct ms", "overhead (run medians)",
             "paired overhead", "paired, by minimum"],
            [[c["model"], c["backend"], f"{c['container_ms']:.2f}", f"{c['direct_ms']:.2f}",
              f"{c['overhead'] * 100:+.1f}%",
              _f(c.get("paired_overhead"), "{:+.1%}"),
              _f(c.get("paired_overhead_min"), "{:+.1%}")] for c in res["container"]])
    if res["provenance"]:
        lines += _table(
            "Provenance: TVM import + compile with provmap's tracking against plain TVM "
            "(interleaved, medians), and writing the map (JSON + SQLite).",
            ["model", "plain s", "tracked s", "ratio", "map write s"],
            [[p["model"], f"{p['plain_s']:.2f}", f"{p['tracked_s']:.2f}", f"{p['ratio']:.3f}",
              f"{p['map_write_s']:.3f}"] for p in res["provenance"]])
    sc = res.get("scaling")
    if sc:
        stages = [k for k in ("tag", "support", "candidates", "search", "map_write")
                  if all(f"{k}_s" in p for p in sc["points"])]
        rows = [[p["nodes"], p["candidates"], *(f"{p[f'{s}_s']:.3f}" for s in stages)]
                for p in sc["points"]]
        rows.append(["fitted k", "", *(_f((sc["fit"].get(s) or {}).get("exponent"), "{:.2f}")
                                       for s in stages)])
        lines += _table(
            f"Scaling on synthetic graphs ({sc['model']}; {sc['prices']}): seconds per stage, "
            "and the fitted growth t ~ n^k.",
            ["nodes", "candidates", *(f"{s} s" for s in stages)], rows)
    return "\n".join(lines) + "\n"


def write_all(res: dict, step: str, out: str | os.PathLike | None) -> Path:
    """STEP's record from a run's results (records.py), and its chart beside it (.png)."""
    md = write_record(step, out, res, markdown(res))
    if res["rows"]:
        write_atomic(md.with_suffix(".png"), lambda tmp: chart(res, tmp))
    return md


def update_readme(readme: str | os.PathLike, res: dict, record: str) -> None:
    """A run's tables into a page with provmap-bench markers (record_docs.put_tables)."""
    put_tables(readme, markdown(res), record)


def main(argv=None) -> int:
    """`provmap bench report RECORD.json [FILE.md]`: re-render a latency record's tables (its .md
    and .png beside it; the JSON is left as it was measured) and FILE.md's, e.g.
    docs/results.md, linking the record relative to that file's folder as `provmap bench
    --readme` does.  A directory stands for its results.json (runs from before records.py)."""
    from .records import footer
    from .steps import parser

    ap = parser("report", main.__doc__, output=None)
    ap.add_argument("record", help="a latency record's .json (or a directory with results.json)")
    ap.add_argument("readme", nargs="?", help="a markdown file with provmap-bench markers")
    ap.add_argument("--merge", nargs="+", metavar="RECORD", default=None,
                    help="first write RECORD (the positional one) as one record of these runs "
                         "of the same step and host, each a subset of models")
    a = ap.parse_args(argv)
    src = Path(a.record)
    src = src / "results.json" if src.is_dir() else src
    if a.merge:
        from .record_docs import merge

        res = merge([json.loads(Path(m).read_text()) for m in a.merge], a.merge)
        write_bytes_atomic(src, json.dumps(res, indent=1, default=str).encode())
    res = json.loads(src.read_text())
    text = markdown(res) + (footer(res["record"]) if "record" in res else "")
    write_bytes_atomic(src.with_suffix(".md"), text.encode())
    if res["rows"]:
        write_atomic(src.with_suffix(".png"), lambda tmp: chart(res, tmp))
    if a.readme:
        rel = os.path.relpath(src.with_suffix(""), os.path.dirname(os.path.abspath(a.readme)))
        update_readme(a.readme, res, rel)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
