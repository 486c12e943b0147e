"""A decision taken under contention, with no quiet end-to-end price to check it against, is
taken again once the machine is quiet: the search waits for quiet (bounded) and repeats its
end-to-end check (issue 35).

Why: without a quiet measurement the fallback's rule (fallback.py) can only guess, and on the
models users run the libraries' defaults are too close for a guess.  Beside a one-core hog
(2026-11-28, MobileNet-v3, f32, ms min/median): ONNX Runtime's default 2.04/6.19 and
OpenVINO's 4.01/25.98, quiet 1.81/1.92 and 1.73/1.85; one thread each, the fallback's evidence,
3.16/3.38 and 3.40/7.85 (OpenVINO pins its threads from core 0, where the hog sits).  Nothing
measured beside that load ranks two defaults 4-7% apart, and the rule kept ONNX Runtime's,
+7.4% by minimum once quiet.  A neighbour's job usually ends; a search that waits a minute or
two for it and then measures again decides on the numbers the artifact will meet.

The repeat is the end-to-end check's own rule (e2e_rule.py) on the alternatives it built (and
the kept plan, when the second level changed it): one interleaved run, `pick_fastest`, and a
longer run of the near ties (`break_tie`).  Any of those windows contended, or no quiet within the wait: nothing
is decided here, and the fallback's rule keeps what it keeps, saying how long it waited.
"""

from __future__ import annotations

import time

from .collage_types import CollageOptions, EndToEnd, SecondLevel
from .measure.contention import Window, wait_for_quiet
from .e2e_rule import decide, tie_run
from .measure.interleave import brief, measure_artifacts

#: The line that starts the wait (bench's hog that "ends" stops on it: a neighbour whose job
#: finishes while the search waits).
WAITING = "waiting for quiet before keeping a plan decided under contention"


def _measure(arts: dict, phases: dict, key: str, **kw):
    w = Window()
    lat = measure_artifacts(arts, never_cap=tuple(arts), **kw)
    cond = w.stop()
    phases[key] = cond.to_dict()
    return lat, cond


def measure_again(e2e: EndToEnd, kept: SecondLevel, opts: CollageOptions, phases: dict,
                  say) -> dict | None:
    """None when not waited for (`quiet_wait_s` 0); else the record: `waited_s`, `quiet`
    (whether the repeat ran and stayed quiet), and when it did the `winner`, `why` and what
    was `measured` (and `tie_break`'s longer run, when there was one).  Each window's
    conditions go to `phases` (quiet_wait, quiet_again, quiet_tie_break)."""
    if not opts.quiet_wait_s:
        return None
    arts = dict(e2e.built)
    arts.setdefault(kept.label, kept.artifact)
    say(f"{WAITING}: up to {opts.quiet_wait_s:.0f} s, then the end-to-end check's "
        f"{len(arts)} plans are measured again")
    t0 = time.monotonic()
    probe = wait_for_quiet(opts.quiet_wait_s, probe_s=1.0)
    rec = {"waited_s": round(time.monotonic() - t0, 1), "quiet": False}
    if probe.contended:
        phases["quiet_wait"] = probe.to_dict()
        say(f"still contended after {rec['waited_s']:.0f} s ({'; '.join(probe.reasons)})")
        return rec
    parts = {k: len(a.manifest["partitions"]) for k, a in arts.items()}
    lat, cond = _measure(arts, phases, "quiet_again", repeats=opts.e2e_repeats,
                         min_block_s=0.5)
    if cond.contended:
        say(f"contended again while measuring ({'; '.join(cond.reasons)})")
        return rec
    def tied_again(labels):
        again, cond = _measure({k: arts[k] for k in labels}, phases, "quiet_tie_break",
                               **tie_run(opts))
        if cond.contended:
            say(f"contended again while breaking a tie ({'; '.join(cond.reasons)})")
            return None
        return again

    d = decide(lat, parts, opts, tied_again)  # the check's own rule (e2e_rule.py)
    if d is None:
        return rec
    if d.tied:
        rec["tie_break"] = brief(d.tie_run)
    return {**rec, "quiet": True, "winner": d.winner, "why": d.why, "measured": brief(lat)}
