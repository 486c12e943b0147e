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
`end_to_end` (the check), `second_level` (refine, partition/refine.py, then concurrent
schedules); `collage` chains them, after looking for a plan a search already kept
(partition/plan_cache.py) and, on a busy machine, waiting for quiet before measuring anything
(measure/hygiene.py `quiet_before_search`).  What they record is one `CollageReport`.
"""

from __future__ import annotations

import time

from provmap.provenance.util.errors import ProvmapError
from provmap.runtime_module.artifact_build import build_artifact
from provmap.runtime_module.backend import Backend
from provmap.runtime_module.graph_view import GraphView
from provmap.runtime_module.plan import Plan, PartitionSpec, order_plan
from provmap.runtime_module.registry import parse_variant

from .collage_report import CollageReport
from .collage_types import (CollageOptions, CollageResult, EndToEnd, FirstLevel,  # noqa: F401
                            SearchSpace, SecondLevel)  # (CollageOptions re-exported)
from .constraints import check, filter_candidates, parse_constraints
from .decision import decide_artifacts
from .defaults import DEFAULT_SEARCH_BUDGET_S  # noqa: F401  (re-exported: the CLI reads it here)
from .generate import generate
from .measure.accuracy import is_accuracy_refusal
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
from .strategies import greedy as greedy_plan
from .variants import e2e_variants


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
    variants = (e2e_variants(backends, opts.e2e_variants)
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


def _uncoalesced(first: FirstLevel):
    """The shortest path's own plan, each partition a candidate built and measured, when it
    differs from the coalesced one; else None."""
    plan = first.dp.plan
    return plan if plan.signature() != first.plan.signature() else None


def build_or_candidates(build, plan: Plan, fallback: Plan | None, say):
    """(artifact, the plan built, why the kept one failed or None): `plan`, else the plan of
    its measured candidates.  Coalescing joins neighbouring candidates on one library into a
    partition nobody built, and a library can fail to compile it (OpenVINO 2026.4 on one of
    ViT-B/16 QDQ's: its AddTransformation); each candidate of `fallback` was built and
    measured.  Without a fallback the error is the caller's."""
    try:
        return build(plan), plan, None
    except ProvmapError as e:
        if fallback is None:
            raise
        say(f"the kept plan failed to build ({e}); building the plan of its measured "
            "candidates instead")
        return build(fallback), fallback, str(e)


def _whole(res) -> dict:
    """backend -> the Estimate of its whole-model candidate (they cover node 0, so the search
    priced every one of them)."""
    return {c.backend: e for c, e in res.estimates.items()
            if c.rule and "whole-model" in c.rule.split("+")}


def _alternatives(space: SearchSpace, first: FirstLevel, opts: CollageOptions) -> dict:
    """The plans measured against the search's: greedy, the promising single plans and their
    variants (none under constraints), each under its label; distinct plans only."""
    view, names, report = space.view, space.names, first.report
    alternatives: dict[str, Plan] = {"collage": first.plan}
    if not space.cons:
        valid = {b: v for b, v in first.single_est.items() if v is not None}
        # Greedy's priority order: fastest whole-model backend first (measured, not assumed).
        prio = sorted(names, key=lambda b: (valid.get(b) is None, valid.get(b) or 0.0))
        try:
            alternatives[f"greedy:{','.join(prio)}"] = greedy_plan(
                view, [space.backends[b] for b in prio])
        except ProvmapError:
            pass
        if valid:
            best = min(valid.values())
            for b, v in sorted(valid.items(), key=lambda kv: kv[1]):
                if v <= best * opts.e2e_single_factor:
                    alternatives[f"single:{b}"] = Plan(f"single:{b}", [PartitionSpec(
                        b, list(view.op_nodes), why=f"single:{b} (end-to-end check)")])
        # A library alone is the user's own baseline, however far its output is from the
        # reference's: on a deep int8 graph one step of rounding per layer compounds (ViT-B/16
        # QDQ: OpenVINO 7 steps from ONNX Runtime at the output, both 0.40 from the float
        # model; a detector 86), and leaving it out kept mixed plans 35-64% slower and no
        # closer.  So a whole model refused only for accuracy is measured too (a crash or
        # build failure stays out: it would run in this process).
        for b, e in sorted(_whole(first.dp).items()):
            if not e.valid and is_accuracy_refusal(e.reason) \
                    and f"single:{b}" not in alternatives:
                alternatives[f"single:{b}"] = Plan(f"single:{b}", [PartitionSpec(
                    b, list(view.op_nodes), why=f"single:{b} (end-to-end check: the library "
                    f"alone, its whole-model price refused: {e.reason})")])
        for v, (origin, _be) in space.variants.items():
            if f"single:{origin}" in alternatives:
                alternatives[f"single:{v}"] = Plan(f"single:{v}", [PartitionSpec(
                    v, list(view.op_nodes), why=f"single:{v} (end-to-end check: a variant of "
                                                f"{origin}, see partition/variants.py)")])
        report.e2e_variants = sorted(space.variants)
    if first.cyclic:
        del alternatives["collage"]
        if not alternatives:
            raise ProvmapError(f"collage: the cheapest cover is cyclic ({first.cyclic}) and no "
                               "fallback plan is allowed by the constraints")
        alternatives = {"collage": next(iter(alternatives.values())), **alternatives}
    # Identical plans are built and measured once: collage choosing the whole model on one
    # backend, or greedy giving everything to its first backend (= that single plan).  The
    # first label wins, in the order collage, single:, greedy:, so the kept plan is named by
    # what it is.
    sig = {label: p.signature() for label, p in alternatives.items()}
    order = sorted(alternatives, key=lambda k: (k != "collage", not k.startswith("single:")))
    kept_by_sig: dict = {}
    same: dict[str, str] = {}
    for label in order:
        first_label = kept_by_sig.setdefault(sig[label], label)
        if first_label != label:
            same[label] = first_label
    report.e2e_same_as_collage = sorted(k for k, v in same.items() if v == "collage")
    report.e2e_same = same
    return {k: alternatives[k] for k in order if k not in same}


def end_to_end(space: SearchSpace, first: FirstLevel, opts: CollageOptions, say) -> EndToEnd:
    """Build the search's plan and its alternatives, measure them whole, and keep one by the
    one comparison procedure (partition/decision.py)."""
    report, phases = first.report, first.phases
    alternatives = _alternatives(space, first, opts)
    built = {}
    blobs: dict = {}  # partitions built once, shared with the second level

    def build(plan):
        return build_artifact(space.view, plan, space.every, blobs=blobs)

    for label, p in alternatives.items():
        say(f"building {label} for the end-to-end check")
        try:
            if label != "collage":
                built[label] = build(p)
                continue
            fallback = None if first.cyclic else _uncoalesced(first)
            built[label], alternatives[label], failed = build_or_candidates(build, p, fallback,
                                                                            say)
            if failed:
                report.e2e_failed = {**(report.e2e_failed or {}), "collage (coalesced)": failed}
        except ProvmapError as e:
            report.e2e_failed = {**(report.e2e_failed or {}), label: str(e)}
    if "collage" not in built:
        raise ProvmapError(f"collage: the chosen plan failed to build: {report.e2e_failed['collage']}")
    d = decide_artifacts(built, say, rule=opts.rule, wait_s=opts.quiet_wait_s,
                         accept_contended=opts.accept_contended, what="end-to-end check")
    phases["e2e"] = d.conditions()
    winner, why = d.kept, d.why
    parts = {k: len(a.manifest["partitions"]) for k, a in built.items()}
    measured = {k: {**v, "partitions": parts[k]} for k, v in d.measured.items()}
    report.e2e = {"measured": measured, "winner": winner, "why": why,
                  "decision": {k: v for k, v in d.to_dict().items() if k != "measured"}}
    chosen_plan = order_plan(space.view, alternatives[winner])
    if winner != "collage":
        report.e2e["note"] = (f"{winner} kept over the searched plan by the end-to-end "
                              "measurement (isolated costs do not add up)")
    report.level = "first" if winner == "collage" else f"end-to-end check ({winner})"
    return EndToEnd(winner, chosen_plan, built[winner], blobs, built,
                    {k: order_plan(space.view, alternatives[k]) for k in built})


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
                 progress=say, suggestions=suggestions_from(first.dp.estimates))
    first.phases["refine"] = ref.conditions
    n_kept = sum(1 for t in ref.trail if t.get("status") == "kept")
    first.report.refine = {"start": e2e.winner, "budget_s": opts.refine_budget_s,
                           "seconds": round(ref.seconds, 1), "stopped": ref.stopped,
                           "proposals": len(ref.trail), "kept": n_kept, "trail": ref.trail}
    say(f"second level: {len(ref.trail)} proposal(s), {n_kept} kept "
        f"({ref.stopped}, {ref.seconds:.0f} s)")
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
