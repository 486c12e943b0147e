"""A one-library plan measured once more against its closest one-library rival, minutes after the
first measurement, and kept on both measurements pooled (issue 35).

Why: on this 2-core guest the *ratio* between two libraries drifts, not only their speed.  On
MobileNet-v3 (2026-11-27) ONNX Runtime / OpenVINO by median was 0.93 in the search's check at
~18:10, 1.09-1.19 in fresh processes at 18:32 and 0.99-1.09 at 19:25; EfficientNet-B0's
tie-break kept ONNX Runtime ahead on median, minimum and 3 of 4 passes, and the bench measured
it 3-7% slower by minimum.  One measurement, however long, is a snapshot of that drift; a plan
between two equally simple whole-model plans that a 10% swing can reverse should be decided on
more than one moment.  So, after the second level (a minute or more later), the kept plan and
the rival are measured again, and the decision is the geometric mean of the two moments'
ratios: the rival replaces the kept plan only if it is faster by pooled minimum and not slower
by pooled median beyond the tie margin (break_tie's rule, over time instead of within one run).

Only whole-model (one-partition) plans are compared: a kept mixed plan was already confirmed
against where it started (confirm.py), and it must beat the simpler plan by a margin anyway.
"""

from __future__ import annotations

import math
import statistics

from provmap.partition.measure.interleave import brief, measure_artifacts

from .collage_types import EndToEnd, FirstLevel, SecondLevel
from .measure.hygiene import measure_clean

#: A rival whose first-moment median was within this of the kept plan's is measured again: the
#: ratio's swing between moments measured here (MobileNet-v3, above).
BAND = 0.10


def _stats(summary: dict) -> tuple[float, float]:
    return summary["min_ms"], summary["median_ms"]


def _label_of(plan, labels: dict) -> str | None:
    sig = plan.signature()
    return next((k for k, p in labels.items() if p.signature() == sig), None)


def rival(e2e_measured: dict, plans: dict, kept_plan) -> tuple[str | None, str | None]:
    """(the kept plan's label in the end-to-end check or None, the closest one-partition rival
    within BAND by median or faster by minimum, or None)."""
    kept_label = _label_of(kept_plan, plans)
    if kept_label is None or kept_label not in e2e_measured:
        return kept_label, None
    k_min, k_med = _stats(e2e_measured[kept_label])
    close = [(m["median_ms"], lab) for lab, m in e2e_measured.items()
             if lab != kept_label and lab in plans and len(plans[lab].partitions) == 1
             and not m.get("capped") and (m["median_ms"] <= k_med * (1 + BAND)
                                          or m["min_ms"] < k_min)]
    return kept_label, (min(close)[1] if close else None)


def pooled(moments: list[dict], kept: str, other: str) -> dict:
    """Geometric means over moments of other/kept by minimum and by median (below 1: `other`
    is faster)."""
    r_min = [m[other]["min_ms"] / m[kept]["min_ms"] for m in moments]
    r_med = [m[other]["median_ms"] / m[kept]["median_ms"] for m in moments]
    g = lambda rs: math.exp(statistics.fmean(math.log(r) for r in rs))  # noqa: E731
    return {"min_ratio": g(r_min), "median_ratio": g(r_med), "moments": len(moments),
            "per_moment_min": [round(r, 4) for r in r_min],
            "per_moment_median": [round(r, 4) for r in r_med]}


def switches(p: dict, margin: float) -> bool:
    """The rival replaces the kept plan: faster by pooled minimum, and by pooled median not
    slower beyond `margin`."""
    return p["min_ratio"] < 1.0 and p["median_ratio"] < 1.0 + margin


def _first_moment(report, kept: SecondLevel, kept_label: str, other: str) -> tuple[str, dict]:
    """The latest earlier measurement of the same two plans, and what it was: the second
    level's, when its one kept change moved the whole model off the rival (MobileNet-v3: the
    check had ONNX Runtime 7% ahead, the second level then OpenVINO ahead by its margin, and
    that later moment is the one to pool with); else the tie-break's (the longer); else the
    end-to-end check's."""
    ref = report.refine or {}
    moves = [t for t in ref.get("trail") or () if t.get("status") == "kept"]
    if kept.label == "refined" and len(moves) == 1 and ref.get("start") == other:
        return "second level", {kept_label: moves[0]["proposal"], other: moves[0]["incumbent"]}
    tb = report.e2e.get("tie_break") or {}
    if kept_label in (tb.get("measured") or {}) and other in tb["measured"]:
        return "tie-break", {k: tb["measured"][k] for k in (kept_label, other)}
    measured = report.e2e["measured"]
    return "end-to-end check", {kept_label: measured[kept_label], other: measured[other]}


def recheck(first: FirstLevel, e2e: EndToEnd, kept: SecondLevel, passes: int, repeats: int,
            margin: float, say) -> SecondLevel:
    """`kept`, or the rival the pooled moments prefer; the record goes to the report's
    `recheck` (explain prints it), the measurement's conditions to phase `recheck`."""
    report = first.report
    if not passes or len(kept.plan.partitions) != 1 or not report.e2e:
        return kept
    measured = report.e2e.get("measured") or {}
    kept_label, other = rival(measured, e2e.plans, kept.plan)
    if other is None:  # `rival` only names plans the check built
        return kept
    source, earlier = _first_moment(report, kept, kept_label, other)
    say(f"rechecking {kept_label} against {other} ({passes} passes, a second moment: the two "
        "libraries' ratio drifts on this machine)")
    lat, first.phases["recheck"] = measure_clean(lambda: measure_artifacts(
        {kept_label: kept.artifact, other: e2e.built[other]}, repeats=repeats, passes=passes,
        min_block_s=1.0, never_cap=(kept_label, other)), say, "recheck")
    now = brief(lat)  # what pooling reads (median, minimum) and the record keeps
    p = pooled([earlier, now], kept_label, other)
    swap = switches(p, margin)
    winner = other if swap else kept_label
    why = (f"{winner} kept on two moments pooled ({source}, then now): {other}/{kept_label} "
           f"{p['min_ratio']:.3f} by minimum, {p['median_ratio']:.3f} by median "
           f"(per moment {p['per_moment_min']} and {p['per_moment_median']})")
    say(why)
    report.recheck = {"kept": winner, "against": other if not swap else kept_label,
                      "switched": swap, "why": why, "first_moment": source, **p,
                      "measured": now}
    if not swap:
        return kept
    report.level = f"recheck ({other})"
    return SecondLevel(other, e2e.plans[other], e2e.built[other])
