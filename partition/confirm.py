"""The second level's kept plan, measured once more against where it started before it is kept.

Why: the second level tries many proposals (21 on GPT-2 small) and keeps each that beats the
incumbent by the margin in one measurement, so a kept change is the luckiest of many noisy
draws: the winner's curse.  GPT-2 small's 2-partition plan (2026-11-27) won 2.2% by median and
2.1% by minimum there; the bench measured it 1.2% slower by minimum twenty minutes later, then
1.5% faster.  A fresh, longer measurement of the refined plan against the plan the second level
started from was not selected on its own noise: the changes stay only if they win that one too,
by the second level's own rule (median and minimum beyond the margin, every pass).  Only a
refined plan with more partitions than the start is confirmed: between equally simple plans
(the whole model moved to another library) the first win stands, as the end-to-end check
lets the lower median stand between them; MobileNet-v3's whole-model move to OpenVINO was
undone by a confirmation in the search process, and the bench measured OpenVINO 14-20% faster
than the plan kept instead (2026-11-27).  It runs
after the second level's budget, like the end-to-end check: a budget bounds the proposals
tried, not the check of what they found.
"""

from __future__ import annotations

from provmap.partition.measure.interleave import brief, measure_artifacts

from .measure.hygiene import measure_clean
from .refine import _wins


def confirm_refinement(start_label: str, start_art, refined_art, margin: float, repeats: int,
                       passes: int, say) -> tuple[bool, dict, dict]:
    """(keep the refined plan?, the record for `plan_info.collage.refine.confirm`, the
    measurement's conditions for the search's record)."""
    say(f"second level: confirming the refined plan against {start_label} (a fresh measurement, "
        f"{passes} passes)")
    lat, cond = measure_clean(lambda: measure_artifacts(
        {start_label: start_art, "refined": refined_art}, repeats=repeats, passes=passes,
        min_block_s=1.0, never_cap=(start_label, "refined")), say, "second level's confirmation")
    ok, why = _wins(lat["refined"], lat[start_label], margin)
    why = ("confirmed: " + why) if ok else why.replace(
        "kept the incumbent", f"not confirmed, {start_label} kept")
    say(f"second level: {why}")
    record = {"against": start_label, "kept": ok, "why": why, "measured": brief(lat)}
    return ok, record, cond
