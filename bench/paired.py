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
    return {"paired_passes": len(ratios),
            "paired_overhead": statistics.median(ratios) - 1 if ratios else None,
            "paired_overhead_min": (min(lat[art].samples_s) / min(lat[lib].samples_s) - 1
                                    if lat[art].samples_s and lat[lib].samples_s else None),
            "container_min_ms": min(lat[art].samples_s) * 1e3 if lat[art].samples_s else None,
            "library_min_ms": min(lat[lib].samples_s) * 1e3 if lat[lib].samples_s else None}


def confirm_gains(rows: list[dict], fns: dict, rooms: dict, same: dict, repeats: int,
                  say) -> list[dict]:
    """The kept plan (the `collage` row) against the best single configuration by minimum and
    by median of `rows`, each pair measured again alone (`paired_overhead`).  `fns`/`rooms`
    are the latency run's alternatives; `same` maps a strategy to the single strategy whose
    very plan it kept (measured once: gain 0, not measured again).  One entry per distinct
    best: {"by", "best", "gain_median", "gain_min", "passes", "same_plan", "contended"}."""
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
                        "gain_min": 0.0, "passes": 0, "contended": False})
            continue
        if a not in fns or b not in fns:
            continue
        say(f"confirm: the kept plan against {best} again, paired blocks")
        res, window = measured_with_load(
            lambda: paired_overhead({a: fns[a], b: fns[b]}, {a: rooms[a], b: rooms[b]},
                                    repeats), say)
        med, low = res["paired_overhead"], res["paired_overhead_min"]
        out.append({"by": by, "best": best, "same_plan": False,
                    "gain_median": None if med is None else -med,
                    "gain_min": None if low is None else -low,
                    "passes": res["paired_passes"], "contended": window.contended})
    return out
