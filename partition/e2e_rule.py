"""The end-to-end check's rule, one function for both places that decide on it: the check
itself (collage.end_to_end) and its quiet repeat after a contended decision (quiet_again.py).

Why one function: the repeat must decide exactly as the check would have on a quiet machine --
the fastest by the check's margin, and a near tie between equally simple plans measured again,
longer, before one is kept.  Written out twice, the two copies could drift (a margin changed in
one, the longer run's length in the other), and the repeat would then overrule the check by a
different rule rather than on quieter numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .collage_types import CollageOptions
from .measure.interleave import break_tie, near_ties, pick_fastest


@dataclass
class Decided:
    winner: str
    why: str
    tied: list = field(default_factory=list)  # the near ties measured again (empty: none)
    first_pick: str | None = None             # the first run's pick, when a tie was broken
    tie_run: dict | None = None               # the longer run's measurements


def tie_run(opts: CollageOptions) -> dict:
    """measure_artifacts' arguments for the longer run of near ties: twice the repeats, in
    `e2e_tie_passes` interleaved passes, blocks of at least a second."""
    return {"repeats": 2 * opts.e2e_repeats, "passes": opts.e2e_tie_passes, "min_block_s": 1.0}


def decide(lat: dict, parts: dict, opts: CollageOptions, measure_tied,
           on_tie=None) -> Decided | None:
    """The pick on one interleaved run `lat` (label -> measurement) of plans with `parts`
    partitions each.  Near ties are measured again by `measure_tied(labels)` (with `tie_run`'s
    arguments), which returns that run or None to give up (a contended window): then None.
    `on_tie(winner, why, tied)` is told before the longer run starts."""
    winner, why = pick_fastest(lat, parts, margin=opts.e2e_margin)
    tied = (near_ties(lat, parts, winner, margin=opts.e2e_tie_margin)
            if opts.e2e_tie_passes else [])
    if not tied:
        return Decided(winner, why)
    if on_tie is not None:
        on_tie(winner, why, tied)
    again = measure_tied([winner, *tied])
    if again is None:
        return None
    best, best_why = break_tie(again, margin=opts.e2e_tie_margin)
    return Decided(best, best_why, tied, winner, again)
