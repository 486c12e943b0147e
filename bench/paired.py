"""Two alternatives measured against each other alone, in adjacent paired blocks: the
container against its library, and the kept plan against the best single configuration.

Why a second measurement for the kept plan: bench picks the best single configuration as the
fastest of eight or more (every library, thread count, spinning setting and hint) by the very
samples it then compares the kept plan with.  Among alternatives within the machine's drift of
each other, the fastest of eight by one run's minimum is lower than any one of them measured
again (the winner's curse): a kept plan equal in speed to the best configuration then reads
some percent slower (MobileNet-v3 and the detector, 2026-11-26: -4.4%, -4.6% by minimum, the
kept plan being another configuration of the same speed).  The pair measured afresh, with the
order flipping every pass, estimates the gain with data the choice did not see; the run's own
numbers stay in the table beside it.
"""

from __future__ import annotations

import statistics

from .baseline import library
from .limits import measured_with_load


def paired_overhead(fns: dict, rooms: dict, passes: int = 8, judge=None,
                    max_passes: int | None = None) -> dict:
    """How much slower the first of `fns` is than the second (the container than its library,
    the kept plan than the best single), the two alone in `passes` paired blocks, measured and
    judged by the one comparison procedure (partition/decision.py, rounds of `passes`): the
    interval of the median per-pass ratio of the blocks' fastest samples (the statistic every
    decision uses, partition/measure/evidence.py), and the median of per-pass medians' ratios
    beside it, described, not judged.  With `judge` (the slowdown's (low, high) -> a verdict),
    rounds of `passes` go on, pooled, while it says "undecided" and `max_passes` allows:
    sequential, as every decision is (a pair within the machine's drift needs more passes than
    a pair 30% apart, and a fixed count left both the detector and GPT-2 small undecided):
    `decide`'s `settled`, the judge's question as its stopping rule.

    Why not the latency run's medians: on this 2-core guest the machine's speed drifts by
    50% between passes at load 0 (MobileNet-v3, 2026-11-26: ORT pass medians 5.5, 7.1 and
    4.8 ms), and with a dozen alternatives between two blocks of the same library, the ratio
    of overall medians says more about when each block ran than about the container.  Adjacent
    blocks of the pair see the same machine; the order flips every pass (A B, B A) so a steady
    drift within a pass favours neither side."""
    from provmap.partition.decision import decide
    from provmap.partition.measure.evidence import Rule, interval, pass_ratios

    art, lib = fns

    def settled(mins: dict) -> bool:
        iv = interval(pass_ratios(mins[art], mins[lib]))
        return judge is None or not iv.passes or judge(*iv.slowdown()) != "undecided"

    d = decide(dict(fns), {art: (1,), lib: (1,)}, rooms=rooms, accept_contended=True,
               rule=Rule(round_passes=passes, max_passes=max(max_passes or passes, passes)),
               what="paired", settled=settled)
    mins, meds = d.pass_mins, d.pass_medians  # each pass's fastest sample (s), and median
    iv = interval(pass_ratios(mins[art], mins[lib]))
    med = pass_ratios(meds[art], meds[lib])
    # the fastest sample of all is the fastest of the passes' fastest
    a, b = (min(mins[k]) * 1e3 if mins[k] else None for k in (art, lib))
    return {"paired_passes": iv.passes, "paired_rounds": -(-d.passes // passes),
            "paired_interval_min": list(iv.slowdown()) if iv.passes else None,
            "paired_coverage": iv.coverage,
            "paired_overhead": statistics.median(med) - 1 if med else None,
            "paired_overhead_min": a / b - 1 if a and b else None,
            "container_min_ms": a, "library_min_ms": b}


# 16 passes: the sign test's interval is then the 5th to the 12th ratio (92% coverage); with 8
# it is the 2nd to the 7th, too wide to tell 1% on a pair within the machine's drift
CONFIRM_PASSES = 16
#: ...in rounds of 16 while the 1% item stays undecided, up to this many: the intervals here
#: narrow with the square root of the passes (GPT-2 small's [-15.8%, +1.8%] after 16)
CONFIRM_MAX_PASSES = 48
ONE_PERCENT = 0.01


def _one_percent(low: float, high: float) -> str:
    from provmap.partition.measure.evidence import within

    return within(low, high, ONE_PERCENT)


def _judge(interval, contended: bool) -> str | None:
    if contended:
        return "not judged (contended)"
    return None if interval is None else _one_percent(*interval)


def confirm_gains(rows: list[dict], fns: dict, rooms: dict, same: dict, say) -> list[dict]:
    """The kept plan (the `collage` row) against the best single configuration by minimum and
    by median of `rows`, each pair measured again alone (`paired_overhead`).  `fns`/`rooms`
    are the latency run's alternatives; `same` maps a strategy to the single strategy whose
    very plan it kept (measured once: gain 0, not measured again).  One entry per distinct
    best: {"by", "best", "gain_median", "gain_min", "slower_min" (the interval), "one_percent_min"
    (evidence.within on it: the one statistic), "passes", "same_plan", "contended"}."""
    kept = next((r for r in rows if r["strategy"].startswith("collage")), None)
    singles = [r for r in rows if library(r["strategy"])]
    if kept is None or not singles:
        return []
    out: list[dict] = []
    for by, key in (("min", "min_ms"), ("median", "median_ms")):
        best = min(singles, key=lambda r: r[key])["strategy"]
        done = next((e for e in out if e["best"] == best), None)
        if done is not None:
            out.append({**done, "by": by})
            continue
        a, b = same.get(kept["strategy"], kept["strategy"]), same.get(best, best)
        if a == b:
            out.append({"by": by, "best": best, "same_plan": True, "gain_median": 0.0,
                        "gain_min": 0.0, "one_percent_min": "within", "passes": 0,
                        "contended": False})
            continue
        if a not in fns or b not in fns:
            continue
        say(f"confirm: the kept plan against {best} again, paired blocks")
        res, window = measured_with_load(
            lambda: paired_overhead({a: fns[a], b: fns[b]}, {a: rooms[a], b: rooms[b]},
                                    passes=CONFIRM_PASSES, judge=_one_percent,
                                    max_passes=CONFIRM_MAX_PASSES), say)
        med, low = res["paired_overhead"], res["paired_overhead_min"]
        out.append({"by": by, "best": best, "same_plan": False,
                    "gain_median": None if med is None else -med,
                    "gain_min": None if low is None else -low,
                    # the slowdown's interval and the 1% item judged on it (`within`)
                    "slower_min": res["paired_interval_min"],
                    "coverage": res["paired_coverage"],
                    "one_percent_min": _judge(res["paired_interval_min"], window.contended),
                    "passes": res["paired_passes"], "contended": window.contended})
    return out
