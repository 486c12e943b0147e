"""The `collage` strategy: the seven steps of TVM's CollagePartition, on our graph, plus what it lacked.

1. rules per backend (provmap.partition.rules) -> 2. candidates, convex and bounded (provmap.partition.generate)
-> 3. constraints and unsupported ops remove candidates (provmap.partition.constraints) -> pruning
-> 4. prices from a CostEstimator (measured, cached in SQLite: provmap.partition.measure.cost / provmap.partition.measure.cache)
-> 5. shortest path with measured boundary-crossing costs (provmap.partition.search)
-> 6. coalescing of adjacent same-backend partitions -> 7. the plan (compile_model builds it).

Then the end-to-end check Collage lacked: isolated costs do not add up (whole-graph layout and
fusion inside one backend beat the sum of its parts), so the chosen plan, the greedy baseline and
the best single-backend plans are each built and measured end to end, and one is kept by the one
comparison procedure every level uses (partition/decision.py).  The report shows estimated
against measured totals for all of them.

The levels are functions, each with its own result: `first_level` (steps 1-6),
`end_to_end` (the check, partition/end_to_end.py), `second_level` (refine, partition/refine.py, then concurrent
schedules); `collage` chains them, after looking for a plan a search already kept
(partition/plan_cache.py) and, on a busy machine, waiting for quiet before measuring anything
(measure/hygiene.py `quiet_before_search`).  What they record is one `CollageReport`.
"""

from __future__ import annotations

import time

from provmap.provenance.util.errors import ProvmapError
from provmap.runtime_module.backend import Backend
from provmap.runtime_module.graph_view import GraphView
from provmap.runtime_module.plan import order_plan
from provmap.runtime_module.registry import parse_variant

from .collage_report import CollageReport
from .collage_types import (CollageOptions, CollageResult, EndToEnd, FirstLevel,  # noqa: F401
                            SearchSpace, SecondLevel)  # (CollageOptions re-exported)
from .constraints import check, filter_candidates, parse_constraints
from .end_to_end import _uncoalesced, _whole, end_to_end
from .defaults import DEFAULT_SEARCH_BUDGET_S  # noqa: F401  (re-exported: the CLI reads it here)
from .generate import generate
from .measure.boundary import calibrate_boundary, calibrate_switches, crossing_s, switch_s
from .measure.cache import CacheLocked, CostCache, host_fingerprint
from .measure.hygiene import Window, quiet_before_search, search_conditions, store_plan
from .measure.in_context import feed_back
from .measure.measured import MeasuredEstimator
from .measure.tuning import tuning_summary
from .measure.remote import RemotePool
from .plan_cache import plan_cache_keys, reuse_plan  # noqa: F401  (plan_cache_keys re-exported)
from .prune import prune
from .refine import refine, suggestions_from, supported_fn
from .region_alternatives import region_alternatives
from .schedule_search import search_schedules
from .search import coalesce, search
from .variants import default_specs, e2e_variants


def search_space(view: GraphView, backends: dict[str, Backend], opts: CollageOptions,
                 say) -> SearchSpace:
    """Steps 1-3: what each backend supports, the constraints, candidates and pruning; and the
    cost cache (a remote pool's host's, when prices come from servers)."""
    names = list(backends)
    verdicts = {b: be.verdicts(view) for b, be in backends.items()}
    cons = parse_constraints(view, opts.pins, opts.forbids, opts.cuts, names)
    check(cons, verdicts, view)
    raw = generate(view, verdicts, max_depth=opts.max_depth, max_size=opts.max_size,
                   max_exits=opts.max_exits)
    allowed, dropped = filter_candidates(cons, raw, view)
    kept, prune_report = prune(view, allowed)
    say(f"{len(raw)} candidates, {len(allowed)} after constraints, "
        f"{len(kept)} after pruning ({prune_report}); measuring budget "
        + (f"{opts.measure_budget_s:g} s" if opts.measure_budget_s is not None else "none"))
    pool, host = None, None
    if opts.measure_on:
        bases = sorted({parse_variant(n)[0] for n in names} | {"onnxruntime"})
        pool = RemotePool(opts.measure_on, backends=bases)
        host = pool.identity["host"]
        say(f"measuring on {pool.address}: {pool.sessions} server session(s), device {host}")
    try:
        cache = CostCache(opts.cache_path, host=host)
    except CacheLocked as e:  # the search still works, it just cannot share its prices
        say(f"{e}; searching without it (nothing is read from or saved to it this time)")
        cache = CostCache(":memory:", host=host)
    # Constraints name backends; a variant of a pinned or forbidden one is not tried.
    specs = (opts.e2e_variants if opts.e2e_variants is not None
             else default_specs(backends, view))
    variants = (e2e_variants(backends, specs)
                if opts.e2e_check and pool is None and not cons else {})
    # --research (reuse_plan=False) skips the stored plan but still stores what it keeps.
    plan_keys = plan_cache_keys(view, backends, opts) if opts.e2e_check and pool is None else None
    return SearchSpace(
        view, backends, verdicts, cons,
        {"generated": len(raw), "after_constraints": len(allowed), "after_pruning": len(kept),
         "dropped_by_constraints": dropped, "prune": str(prune_report)},
        kept, cache, pool, host, variants,
        {**backends, **{v: be for v, (_o, be) in variants.items()}}, plan_keys)


def _price_and_search(space: SearchSpace, opts: CollageOptions, say):
    """Steps 4-6: price the candidates the search asks for, find the shortest path, coalesce.
    (search result, coalesced plan, boundary calibration, per-region alternatives, estimator
    stats, measuring window)."""
    view, kept = space.view, space.kept
    last = [0.0]

    def tick(done, total, eta):  # at most one progress line a second, and the last one
        now = time.perf_counter()
        if now - last[0] >= 1.0 or done == total:
            last[0] = now
            say(f"measured {done}/{total}, ETA {eta:.0f} s")

    est = MeasuredEstimator(space.backends, space.cache, isolate=opts.isolate, progress=tick,
                            budget_s=opts.measure_budget_s, in_context=opts.in_context,
                            remote=space.pool)
    est.begin(len(kept))
    window = Window()  # measuring conditions (partition/measure/hygiene.py)
    try:
        if est.parallel > 1:
            say(f"measuring {len(kept)} candidates on {est.parallel} servers in parallel")
            est.prefetch(view, kept)
        elif est.tunes:  # see MeasuredEstimator.tunes
            say(f"a backend tunes: tuning the distinct tasks of all {len(kept)} candidates in "
                "one session, then pricing every candidate, so the tuning database covers "
                "every region")
            est.prepare(view, kept, log=say)
            est.prefetch(view, kept)
        calib = calibrate_boundary(space.backends)
        # A change of library inside a plan costs what no candidate measured alone shows
        # (issue 35); measured here, so a remote device's switches are not this host's.
        calib["switches"] = (calibrate_switches(space.backends) if space.pool is None else
                             {"skipped": "candidates measured on a remote device"})
        res = search(view, kept, lambda c: est.estimate(view, c),
                     crossing=lambda nbytes, a, b: crossing_s(calib, nbytes, a, b),
                     switch=lambda a, b: switch_s(calib["switches"], a, b),
                     bounds=opts.search_bounds, say=say)
        plan = coalesce(view, res.plan, cuts=set(space.cons.cuts) if space.cons else frozenset())
        # Counted before region_alternatives, which prices each kept partition on every backend
        # too (cache hits mostly): counted after, it said "priced 888 of 886 candidates".
        st = est.stats()
        explained = region_alternatives(view, plan, res, est, space.verdicts, space.names)
        # The running count stops where the search stopped asking: say what the rest was.  The
        # budget's unpriced ones are among those asked (a line that listed them beside the
        # never-needed ones added up to more than the candidates: issue 36).
        asked = st.get("estimates", 0)
        ctx = st.get("in_context", 0)
        say(f"the search asked for {asked} of {len(kept)} candidates' prices (measured "
            f"{st.get('measured', 0)}, from the cache {st.get('cache_hits', 0)}"
            + (f", timed in context before {ctx}" if ctx else "")
            + f", left unpriced by the measuring budget {st.get('skipped_budget', 0)}); it "
            f"never needed the other {max(len(kept) - asked, 0)}")
        after = est.stats()  # explain's prices of each kept partition on every backend
        more = {k: after.get(k, 0) - st.get(k, 0) for k in ("measured", "cache_hits")}
        if any(more.values()):
            say(f"pricing the kept partitions on every backend for explain: measured "
                f"{more['measured']} more, {more['cache_hits']} more from the cache (the "
                "summary's counts include them)")
        for line in tuning_summary(st.get("tuning")):
            say(line)
    finally:
        est.close()
        window = window.stop()
    return res, plan, calib, explained, est.stats(), window


def first_level(space: SearchSpace, opts: CollageOptions, say, t0: float) -> FirstLevel:
    """The shortest path over measured candidates, coalesced; a cover that cannot run falls
    back to the uncoalesced one, and is said."""
    view = space.view
    res, plan, calib, explained, stats, window = _price_and_search(space, opts, say)
    # Candidates are each convex, but two of them can still feed each other (a -> y, x -> b
    # for P1 = a->b, P2 = x->y).  Such a cover cannot run; say so and fall back.
    cyclic = None
    for attempt in (plan, res.plan):
        try:
            order_plan(view, attempt)
            plan = attempt
            cyclic = None
            break
        except ProvmapError as e:
            cyclic = str(e)
    t_search = time.perf_counter() - t0
    single_est = {b: (e.seconds * 1e3 if e.valid else None) for b, e in _whole(res).items()}
    pool = space.pool
    report = CollageReport(
        backends=space.names, constraints=space.cons.summary() if space.cons else "",
        # which flag put which node where: explain says it instead of guessing (issue 36)
        constraint_flags=[{"node": view.node_ids[key[1]], "kind": key[0], "flag": flag}
                          for key, flag in space.cons.origin.items()] if space.cons else None,
        candidates=space.candidates, estimator=stats, boundary_calibration=calib,
        search=res.record(),  # states, peak RSS, and whether the bound made it a beam
        estimated_ms={"collage": res.estimated_s * 1e3,
                      **{f"single:{b}": v for b, v in single_est.items()}},
        crossing_ms=res.crossing_s * 1e3,
        partitions_before_coalescing=len(res.plan.partitions), partitions=len(plan.partitions),
        search_total_s=round(t_search, 3), measure_budget_s=opts.measure_budget_s,
        explain=explained,
        # where the prices come from (remote: with the sessions lost during the search)
        measured_on=(pool.describe() if pool is not None else
                     {"where": "local", "device": {"host": host_fingerprint()}}))
    plan.info["estimated_ms"] = res.estimated_s * 1e3
    phases = {"candidates": window}
    report.conditions = search_conditions(phases, report.estimator)  # again after e2e
    report.search_plan_cyclic = cyclic
    return FirstLevel(plan, res, cyclic, single_est, report, phases)


def _checks_end_to_end(space: SearchSpace, first: FirstLevel, opts: CollageOptions,
                       say) -> bool:
    """Whether the end-to-end check runs: asked for, and plans run where prices came from.
    Without it a cyclic cover is an error (no fallback to measure)."""
    cyclic = first.cyclic
    if cyclic and not opts.e2e_check:
        raise ProvmapError(f"collage: the cheapest cover is cyclic ({cyclic}); rerun with "
                           "the end-to-end check to fall back to greedy/single plans")
    if space.pool is not None and opts.e2e_check:
        # The end-to-end check, the second level and the in-context feedback run plans in this
        # process: on this host, not on the device the prices came from.
        first.report.e2e_skipped = (
            f"candidates were measured on {space.pool.address}; the end-to-end check and the "
            "second level run plans in this process, so they were skipped (the DP's plan is "
            "kept)")
        say(first.report.e2e_skipped)
        if cyclic:
            raise ProvmapError(f"collage: the cheapest cover is cyclic ({cyclic}), and with "
                               "remote measurement there is no end-to-end fallback")
        return False
    return opts.e2e_check


def second_level(space: SearchSpace, first: FirstLevel, e2e: EndToEnd, opts: CollageOptions,
                 say) -> SecondLevel:
    """End-to-end measured changes to the kept plan (partition/refine.py), within the budget."""
    kept = SecondLevel(e2e.winner, e2e.plan, e2e.artifact)
    if opts.refine_budget_s is not None and opts.refine_budget_s <= 0:
        return kept
    say("second level, up to " + ("no limit" if opts.refine_budget_s is None else
                                  f"{opts.refine_budget_s:.0f} s")
        + f" of end-to-end measured changes to {e2e.winner}")
    # A variant supports what its searched backend supports.
    vverdicts = {**space.verdicts, **{v: space.verdicts[o]
                                      for v, (o, _be) in space.variants.items()}}
    ref = refine(space.view, e2e.plan, e2e.artifact, e2e.winner, space.every,
                 supported_fn(space.view, vverdicts, space.cons),
                 dp_plan=None if first.cyclic else first.plan, cuts=space.cuts,
                 budget_s=opts.refine_budget_s, rule=opts.rule, blobs=e2e.blobs,
                 wait_s=opts.quiet_wait_s, accept_contended=opts.accept_contended,
                 progress=say, suggestions=suggestions_from(first.dp.estimates),
                 accuracy=e2e.accuracy)
    first.phases["refine"] = ref.conditions
    n_kept = sum(1 for t in ref.trail if t.get("status") == "kept")
    first.report.refine = {"start": e2e.winner, "budget_s": opts.refine_budget_s,
                           "seconds": round(ref.seconds, 1), "stopped": ref.stopped,
                           "proposals": len(ref.trail), "kept": n_kept, "trail": ref.trail}
    tried = sum(1 for t in ref.trail if "seconds" in t)  # the rest: not begun (budget)
    say(f"second level: {len(ref.trail)} proposal(s), {tried} measured, {n_kept} kept "
        f"in {ref.seconds:.0f} s ({ref.stopped})")
    if n_kept:
        kept = SecondLevel("refined", ref.plan, ref.artifact)
        first.report.level = "second"
    return kept


def _concurrent_schedules(kept: SecondLevel, report: CollageReport, opts: CollageOptions,
                          progress) -> object:
    """The kept artifact under the fastest measured schedule (schedule_search), recorded with
    the plan so a reused plan runs under it too."""
    if not opts.schedules or (opts.refine_budget_s is not None and opts.refine_budget_s <= 0):
        return kept.artifact
    scratch: dict = {}
    art = search_schedules(kept.artifact, kept.label, scratch, opts.rule, progress=progress,
                           wait_s=opts.quiet_wait_s, accept_contended=opts.accept_contended)
    report.schedule_search = scratch["schedule_search"]
    kept.plan.info["schedule"] = art.manifest.get("schedule")  # kept with the plan
    return art


def _say(cb, msg):
    if cb is not None:
        cb(msg)


def collage(view: GraphView, backends: dict[str, Backend], opts: CollageOptions | None = None,
            progress=None) -> CollageResult:
    """Search the cheapest plan, check it end to end, refine it, and return the fastest
    measured plan with what was recorded (compile_model builds and saves the artifact)."""
    opts = opts or CollageOptions()
    say = lambda m: _say(progress, f"collage: {m}")  # noqa: E731
    t0 = time.perf_counter()
    space = search_space(view, backends, opts, say)
    try:
        return _search(view, backends, space, opts, say, progress, t0)
    finally:  # closed, so SQLite moves its WAL into the file: a copy of the .sqlite alone had
        space.cache.close()  # no tables after a compile (the eleventh afternoon)


def _search(view, backends, space, opts, say, progress, t0) -> CollageResult:
    if space.plan_keys is not None and opts.reuse_plan:
        reused = reuse_plan(view, space.cache, space.plan_keys, say)
        if reused is not None:
            return CollageResult(reused[0], reused[1], backends=space.every)
    before = quiet_before_search(opts.quiet_wait_s, opts.accept_contended, say)
    first = first_level(space, opts, say, t0)
    if before is not None:
        first.phases["before"] = before
    if not _checks_end_to_end(space, first, opts, say):
        return CollageResult(first.plan, first.report, fallback=_uncoalesced(first))
    e2e = end_to_end(space, first, opts, say)
    kept = second_level(space, first, e2e, opts, say)
    report = first.report
    art = _concurrent_schedules(kept, report, opts, progress)
    if opts.in_context:
        try:
            report.in_context = feed_back(art, space.cache, space.every,
                                          f"{view.imported.label}: {kept.label}")
        except Exception as e:  # a measurement that fails must not lose the built plan
            report.in_context_error = f"{type(e).__name__}: {e}"
    strategy = "collage" if kept.label == "collage" else f"collage->{kept.label}"
    report.conditions = search_conditions(first.phases, report.estimator)
    if space.plan_keys is not None:
        stored = report.to_json()
        store_plan(space.cache, space.plan_keys, view, kept.plan, strategy, stored, say)
        report.note(stored)
    return CollageResult(kept.plan, report, art, space.every, strategy)
