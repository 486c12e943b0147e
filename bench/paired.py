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

import math
import statistics

from .baseline import library
from .limits import measured_with_load


def median_interval(values: list[float], coverage: float = 0.9) -> tuple[float, float, float]:
    """A distribution-free interval for the median of `values` (the sign test's order
    statistics): (low, high, its actual coverage), the narrowest pair of order statistics
    whose coverage is at least `coverage`, or the whole range with what it covers.

    Why this and not a t interval: per-pass ratios on this guest are skewed by the odd slow
    pass (a step of +45% for both libraries at once, bench/drift.py); the sign test assumes only
    that passes are independent and the ratio's median is what is estimated."""
    v = sorted(values)
    n = len(v)
    if not n:
        return math.nan, math.nan, 0.0
    tail = 0.0  # P(Binomial(n, 1/2) <= k - 1): the median below the k-th order statistic
    best = (v[0], v[-1], 1.0 - 2 * 0.5 ** n)
    for k in range(1, (n + 1) // 2 + 1):
        tail += math.comb(n, k - 1) * 0.5 ** n
        if 1.0 - 2 * tail < coverage:
            break
        best = (v[k - 1], v[n - k], 1.0 - 2 * tail)
    return best


def within(low: float, high: float, limit: float) -> str:
    """The 1% item on a slowdown interval: 'within' when even its high end is at most `limit`,
    'slower' when even its low end is above it, else 'undecided' (the pair is closer than this
    many passes can tell apart)."""
    if high <= limit:
        return "within"
    if low > limit:
        return "slower"
    return "undecided"


def paired_overhead(fns: dict, rooms: dict, repeats: int, passes: int = 8) -> dict:
    """How much slower the first of `fns` is than the second (the container than its library,
    the kept plan than the best single), the two alone in `passes` short paired blocks: the
    median of the per-pass ratios, and the ratio of minimums, less one.

    Why not the latency run's medians: on this 2-core guest the machine's speed drifts by
    50% between passes at load 0 (MobileNet-v3, 2026-11-26: ORT pass medians 5.5, 7.1 and
    4.8 ms), and with a dozen alternatives between two blocks of the same library, the ratio
    of overall medians says more about when each block ran than about the container.  Adjacent
    blocks of the pair see the same machine; the median over passes drops the odd pass, and the
    order flips every pass (A B, B A) so a steady drift within a pass favours neither side."""
    from provmap.partition.measure.interleave import measure_interleaved

    art, lib = fns
    lat = measure_interleaved(fns, repeats=max(2 * passes, repeats), passes=passes,
                              min_block_s=0.3, rooms=rooms, never_cap=tuple(fns),
                              alternate=True)
    ratios = sorted(a / d for a, d in zip(lat[art].pass_medians_s, lat[lib].pass_medians_s))
    lows = [a / d for a, d in zip(lat[art].pass_mins_s, lat[lib].pass_mins_s)]
    med_lo, med_hi, cover = median_interval(ratios)
    min_lo, min_hi, _ = median_interval(lows)
    return {"paired_passes": len(ratios),
            # where the median per-pass ratio lies (sign test, `coverage`): by median, and by
            # each pass's minimum (the ratio of overall minimums has no interval of its own)
            "paired_interval": [med_lo - 1, med_hi - 1] if ratios else None,
            "paired_interval_min": [min_lo - 1, min_hi - 1] if lows else None,
            "paired_coverage": cover,
            "paired_overhead": statistics.median(ratios) - 1 if ratios else None,
            "paired_overhead_min": (min(lat[art].samples_s) / min(lat[lib].samples_s) - 1
                                    if lat[art].samples_s and lat[lib].samples_s else None),
            "container_min_ms": min(lat[art].samples_s) * 1e3 if lat[art].samples_s else None,
            "library_min_ms": min(lat[lib].samples_s) * 1e3 if lat[lib].samples_s else None}


# 16 passes: the sign test's interval is then the 5th to the 12th ratio (92% coverage); with 8
# it is the 2nd to the 7th, too wide to tell 1% on a pair within the machine's drift
CONFIRM_PASSES = 16
ONE_PERCENT = 0.01


def _judge(interval, contended: bool) -> str | None:
    if contended:
        return "not judged (contended)"
    return None if interval is None else within(interval[0], interval[1], ONE_PERCENT)


def confirm_gains(rows: list[dict], fns: dict, rooms: dict, same: dict, repeats: int,
                  say) -> list[dict]:
    """The kept plan (the `collage` row) against the best single configuration by minimum and
    by median of `rows`, each pair measured again alone (`paired_overhead`).  `fns`/`rooms`
    are the latency run's alternatives; `same` maps a strategy to the single strategy whose
    very plan it kept (measured once: gain 0, not measured again).  One entry per distinct
    best: {"by", "best", "gain_median", "gain_min", "slower_median", "slower_min" (intervals),
    "one_percent_median", "one_percent_min" (`within`), "passes", "same_plan", "contended"}."""
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
                        "gain_min": 0.0, "one_percent_median": "within",
                        "one_percent_min": "within", "passes": 0, "contended": False})
            continue
        if a not in fns or b not in fns:
            continue
        say(f"confirm: the kept plan against {best} again, paired blocks")
        res, window = measured_with_load(
            lambda: paired_overhead({a: fns[a], b: fns[b]}, {a: rooms[a], b: rooms[b]},
                                    repeats, passes=CONFIRM_PASSES), say)
        med, low = res["paired_overhead"], res["paired_overhead_min"]
        out.append({"by": by, "best": best, "same_plan": False,
                    "gain_median": None if med is None else -med,
                    "gain_min": None if low is None else -low,
                    # the slowdown's interval and the 1% item judged on it (`within`)
                    "slower_median": res["paired_interval"],
                    "slower_min": res["paired_interval_min"],
                    "coverage": res["paired_coverage"],
                    "one_percent_median": _judge(res["paired_interval"], window.contended),
                    "one_percent_min": _judge(res["paired_interval_min"], window.contended),
                    "passes": res["paired_passes"], "contended": window.contended})
    return out
