"""Measuring hygiene for Collage: what a search does when the machine is busy while it measures.

The detector is `provmap.partition.measure.contention`; this module decides what the search does
with its verdicts (issue 28):

* a candidate price measured under contention is measured once more at once and the faster of
  the two kept (contention only inflates a time); one still contended is priced for this run
  but not written to the persistent cost cache, so a later search on a quiet machine measures
  it again (`quarantine`).  Once `RETRY_GIVE_UP` second measurements in a row all stayed
  contended, the contention is persistent and a second measurement only doubles the search:
  later contended prices are quarantined without one (`retry_helps`);
* a busy machine is found before the search measures anything (`quiet_before_search`), and a
  decision's round measured under contention is measured again after a wait for quiet
  (partition/decision.py);
* the search records the conditions of each phase in its report (`report["conditions"]`), and
  a kept plan decided under contention is not stored in the plan cache (`store_plan`), with
  one line saying why; a stored plan whose recorded conditions were contended is not reused
  (`reuse_refusal`): the next compile searches again.
"""

from __future__ import annotations

from provmap.partition.measure.contention import (Busy, RecentWindow, Window, acting, combine,
                                               wait_for_quiet)

#: Re-measured prices that all stayed contended before re-measuring stops (persistent load).
RETRY_GIVE_UP = 5


def measure_candidate(measure, local: bool = True, retry: bool = True):
    """`measure()` -> (result dict, cacheable), judged by a window.  Returns (result, cacheable,
    contended, retried): a valid price measured under contention is measured again (if
    `retry`) and the faster kept; `contended` says whether the kept one still was."""
    if not local or not acting():  # remote servers: this host's load says nothing of theirs
        res, ok = measure()
        return res, ok, False, False
    w = RecentWindow()  # a measurement of a few ms is judged with the time before it
    res, ok = measure()
    if res.get("seconds") is None or not w.stop().contended:
        return res, ok, False, False
    if not retry:
        return res, ok, True, False
    w = RecentWindow()
    again, ok2 = measure()
    contended = w.stop().contended
    if again.get("seconds") is not None and again["seconds"] < res["seconds"]:
        return again, ok2, contended, True
    return res, ok, contended, True


def retry_helps(remeasured: int, still_contended: int) -> bool:
    """Whether re-measuring a contended price is still worth it (see the module doc)."""
    return remeasured < RETRY_GIVE_UP or still_contended < remeasured


#: The line that starts the wait for quiet before a search (bench's hog that "ends" stops on it:
#: a neighbour whose job finishes while the search waits).
WAITING = "for quiet before measuring anything"


def quiet_before_search(wait_s: float, accept: bool, say):
    """Contention as one policy, decided before anything is measured: a one-second probe; on a
    busy machine one line at once, then a wait for quiet of at most `wait_s`; still busy, the
    search ends there with one line (`Busy`), or, when the caller accepts it, measures beside
    the load and says what that means.  Returns the probe's Conditions (None: not acting).

    Why up front: a load through the whole search made every price and every decision the
    load's (beside a one-core hog the libraries rank as their threads survive it, not as they
    run on a quiet machine: MobileNet-v3's kept plan was +7% by minimum once quiet), and a
    search that found that out at its end had spent six minutes to write nothing
    (`compile bundled:squeezenet`, 366 s then exit 2, issue 53)."""
    if not acting():
        return None
    probe = wait_for_quiet(0.0, probe_s=1.0)
    if not probe.contended:
        return probe
    say(f"the machine is busy ({'; '.join(probe.reasons)}): waiting up to {wait_s:.0f} s "
        f"{WAITING}")
    probe = wait_for_quiet(wait_s, probe_s=1.0) if wait_s > 0 else probe
    if not probe.contended:
        say("quiet now: searching")
        return probe
    if accept:
        say(f"still busy ({'; '.join(probe.reasons)}); measuring beside the load as asked "
            "(--accept-contended): the prices and the kept plan are what this load makes of "
            "the libraries, the record says so, and the plan is not stored for reuse")
        return probe
    raise Busy(f"no artifact written: the machine stayed busy for {wait_s:.0f} s before the "
               f"search ({'; '.join(probe.reasons)}); beside a load the libraries rank as the "
               "load lets them, not as they run on a quiet machine. Run it again on a quiet "
               "machine, wait longer (--quiet-wait SECONDS), or measure beside the load with "
               "--accept-contended")


#: Phases that decide which plan is kept: each measures the kept plan against the best single
#: backend (and its variants) end to end, after the candidate prices did their part; and the
#: probe before the search, whose last window is contended only when the search was accepted
#: beside a load (every price and decision after it is then the load's).
DECISIVE = ("before", "e2e", "refine")


def search_conditions(phases: dict, estimator_stats: dict | None = None) -> dict:
    """The search's record: each phase's conditions, and the candidate prices that stayed
    contended after their re-measurement.

    Contended candidate prices (or a contended candidates phase) make the decision contended
    only when no end-to-end phase judged the plan: a clean end-to-end check measured the kept
    plan against every single backend itself, so a skewed price could at worst have hidden a
    better mixed plan, not kept a slower one.  On a quiet 2-core host the full bench still saw
    1-6 of ~1,000 prices contended per model (a daemon's blip, provmap's own main process
    preparing the next candidate), and refusing the plan cache for that re-searched every
    compile for nothing."""
    rec = combine(phases)
    st = estimator_stats or {}
    n = st.get("contended_prices") or 0
    decisive = {k: rec["phases"][k] for k in DECISIVE if k in rec["phases"]}
    if decisive:
        bad = {k: v for k, v in decisive.items() if v.get("contended")}
        rec["contended"] = bool(bad)
        rec["reason"] = "; ".join(f"{k}: {', '.join(v['reasons'])}" for k, v in bad.items())
        early = [k for k, v in rec["phases"].items() if k not in DECISIVE and v.get("contended")]
        if n or early:
            rec["not_decisive"] = "; ".join(x for x in (
                f"{', '.join(early)} contended" if early else "",
                f"candidates: {n} price(s) contended after a second measurement" if n else "")
                if x) + " (the end-to-end check decided)"
    elif n:
        rec["contended"] = True
        rec["reason"] = "; ".join(x for x in (rec["reason"], f"candidates: {n} price(s) "
                                              "contended after a second measurement") if x)
    rec["remeasured_prices"] = st.get("remeasured", 0)
    rec["policy"] = "act" if acting() else "ignore (PROVMAP_CONTENTION)"
    return rec


def plan_json(view, plan, strategy: str) -> dict:
    return {"strategy": strategy, "schedule": plan.info.get("schedule"),
            "partitions": [{"backend": p.backend, "ops": [view.node_ids[i] for i in p.ops],
                            "why": p.why} for p in plan.partitions]}


def store_plan(cache, keys, view, plan, strategy: str, report: dict, say) -> None:
    """Store the kept plan unless it was decided under contention (then say why, once)."""
    cond = report.get("conditions") or {}
    if cond.get("contended") and acting():
        report["plan_cache_refused"] = (f"decided under contention ({cond['reason']}); the "
                                        "next compile searches again")
        say(f"not storing the kept plan in the plan cache: {report['plan_cache_refused']}")
        return
    try:
        cache.put_plan(*keys, plan_json(view, plan, strategy), report)
    except Exception as e:  # a cache that cannot store must not lose the built plan
        report["plan_cache_error"] = f"{type(e).__name__}: {e}"


def reuse_refusal(report: dict) -> str | None:
    """Why a stored plan must not be reused: its search recorded contention (a file written by
    another provmap, or by hand).  Plans stored before conditions were recorded are reused."""
    cond = report.get("conditions") or {}
    if cond.get("contended") and acting():
        return f"it was decided under contention ({cond.get('reason') or 'recorded'})"
    return None
