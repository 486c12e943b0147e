"""The `collage` strategy: the seven steps of TVM's CollagePartition, on our graph, plus what it lacked.

1. rules per backend (provmap.partition.rules) -> 2. candidates, convex and bounded (provmap.partition.generate)
-> 3. constraints and unsupported ops remove candidates (provmap.partition.constraints) -> pruning
-> 4. prices from a CostEstimator (measured, cached in SQLite: provmap.partition.measure.cost / provmap.partition.measure.cache)
-> 5. shortest path with measured boundary-crossing costs (provmap.partition.search)
-> 6. coalescing of adjacent same-backend partitions -> 7. the plan, built into an artifact.

Then the end-to-end check Collage lacked: isolated costs do not add up (whole-graph layout and
fusion inside one backend beat the sum of its parts), so the chosen plan, the greedy baseline and
the best single-backend plans are each built and measured end to end, and the fastest is kept.
The report shows estimated against measured totals for all of them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from provmap.provenance.util.errors import ProvmapError
from provmap.runtime_module.artifact import build_artifact
from provmap.runtime_module.backend import Backend
from provmap.partition.measure.interleave import (break_tie, measure_artifacts, near_ties,
                                                pick_fastest, why_tied)
from provmap.runtime_module.plan import Plan, PartitionSpec, order_plan
from provmap.runtime_module.graph_view import GraphView

from .defaults import DEFAULT_SEARCH_BUDGET_S  # defined where the CLI's help reads it
from .measure.hygiene import Window, measure_clean, reuse_refusal, search_conditions, store_plan
from .region_alternatives import region_alternatives
from .schedule_search import search_schedules
from .search import coalesce, search
from .strategies import greedy as greedy_plan
from .measure.measured import tuning_summary
from .variants import e2e_variants
from provmap.runtime_module.subgraph import Subgraph


@dataclass
class CollageOptions:
    max_depth: int = 4
    max_size: int = 12
    max_exits: int = 4
    pins: list = field(default_factory=list)
    forbids: list = field(default_factory=list)
    cuts: list = field(default_factory=list)
    cache_path: str | None = None   # None: $PROVMAP_CACHE or ~/.cache/provmap/costs.sqlite
    e2e_check: bool = True
    e2e_repeats: int = 10
    e2e_single_factor: float = 3.0  # measure single plans estimated within this factor of best
    e2e_margin: float = 0.03        # a plan with more partitions must win by this, every pass
    e2e_tie_margin: float = 0.03    # equally simple plans this close are measured again, longer
    e2e_tie_passes: int = 4         # ...in this many interleaved passes (0: no tie-break)
    # Options tried as whole-partition variants of each searched backend, in the end-to-end
    # check (single plans) and the second level (moves), not priced by the first level; see
    # e2e_variants.  (): none.
    e2e_variants: tuple = ("threads=1",)
    isolate: bool = True
    measure_budget_s: float | None = DEFAULT_SEARCH_BUDGET_S  # MeasuredEstimator.budget_s
    refine_budget_s: float | None = 60.0  # second level (partition/refine.py); 0: off, None: no
    #                                       limit (it stops when it runs out of proposals)
    refine_margin: float = 0.02     # a refinement must win by this, in every pass and by min
    schedules: bool = True          # second level: measure concurrent schedules (schedule_search)
    in_context: bool = True         # feed partition times inside the kept plan back to the cache
    measure_on: str | None = None   # "tracker:HOST:PORT/KEY": price candidates on those servers
    reuse_plan: bool = True         # a kept plan stored in the cost cache for this model and
                                    # these settings is reused (see plan_cache_keys)


@dataclass
class CollageResult:
    plan: Plan
    artifact: object | None         # the chosen plan, already built (when the e2e check ran)
    report: dict
    backends: dict | None = None    # every backend the plan may name (variants included)


def _say(cb, msg):
    if cb is not None:
        cb(msg)


def collage(view: GraphView, backends: dict[str, Backend], opts: CollageOptions | None = None,
            progress=None) -> CollageResult:
    """Search the cheapest plan, check it end to end, and return the fastest measured plan."""
    from .measure.cache import CacheLocked, CostCache
    from .generate import generate
    from .prune import prune
    from .constraints import check, filter_candidates, parse_constraints
    from .measure.measured import MeasuredEstimator
    from .measure.boundary import calibrate_boundary, crossing_s

    opts = opts or CollageOptions()
    t0 = time.perf_counter()
    names = list(backends)
    verdicts = {b: be.verdicts(view) for b, be in backends.items()}
    cons = parse_constraints(view, opts.pins, opts.forbids, opts.cuts, names)
    check(cons, verdicts, view)

    raw = generate(view, verdicts, max_depth=opts.max_depth, max_size=opts.max_size,
                   max_exits=opts.max_exits)
    allowed, dropped = filter_candidates(cons, raw, view)
    kept, prune_report = prune(view, allowed)
    _say(progress, f"collage: {len(raw)} candidates, {len(allowed)} after constraints, "
                   f"{len(kept)} after pruning ({prune_report}); measuring budget "
                   + (f"{opts.measure_budget_s:g} s" if opts.measure_budget_s is not None
                      else "none"))

    from .measure.cache import host_fingerprint

    pool, host = None, None
    if opts.measure_on:
        from provmap.runtime_module.registry import parse_variant

        from .measure.remote import RemotePool

        bases = sorted({parse_variant(n)[0] for n in names} | {"onnxruntime"})
        pool = RemotePool(opts.measure_on, backends=bases)
        host = pool.identity["host"]
        _say(progress, f"collage: measuring on {pool.address}: {pool.sessions} server "
                       f"session(s), device {host}")
    try:
        cache = CostCache(opts.cache_path, host=host)
    except CacheLocked as e:  # the search still works, it just cannot share its prices
        _say(progress, f"collage: {e}; searching without it (nothing is read from or saved to "
                       "it this time)")
        cache = CostCache(":memory:", host=host)
    # Constraints name backends; a variant of a pinned or forbidden one is not tried.
    variants = (e2e_variants(backends, opts.e2e_variants)
                if opts.e2e_check and pool is None and not cons else {})
    every = {**backends, **{v: be for v, (_o, be) in variants.items()}}
    # --research (reuse_plan=False) skips the stored plan but still stores what it keeps.
    plan_keys = plan_cache_keys(view, backends, opts) if opts.e2e_check and pool is None else None
    if plan_keys is not None and opts.reuse_plan:
        reused = _reuse_plan(view, cache, plan_keys, progress)
        if reused is not None:
            cache.close()
            reused.backends = every
            return reused
    last = [0.0]

    def tick(done, total, eta):  # at most one progress line a second, and the last one
        now = time.perf_counter()
        if now - last[0] >= 1.0 or done == total:
            last[0] = now
            _say(progress, f"collage: measured {done}/{total}, ETA {eta:.0f} s")

    est = MeasuredEstimator(backends, cache, isolate=opts.isolate, progress=tick,
                            budget_s=opts.measure_budget_s, in_context=opts.in_context,
                            remote=pool)
    est.begin(len(kept))
    phases = {"candidates": Window()}  # measuring conditions (partition/measure/hygiene.py)
    try:
        if est.parallel > 1:
            _say(progress, f"collage: measuring {len(kept)} candidates on {est.parallel} "
                           "servers in parallel")
            est.prefetch(view, kept)
        elif est.tunes:  # see MeasuredEstimator.tunes
            _say(progress, f"collage: a backend tunes: tuning the distinct tasks of all "
                           f"{len(kept)} candidates in one session, then pricing every "
                           "candidate, so the tuning database covers every region")
            est.prepare(view, kept, log=lambda m: _say(progress, f"collage: {m}"))
            est.prefetch(view, kept)
        calib = calibrate_boundary(backends)
        res = search(view, kept, lambda c: est.estimate(view, c),
                     crossing=lambda nbytes, a, b: crossing_s(calib, nbytes, a, b))
        plan = coalesce(view, res.plan, cuts=set(cons.cuts) if cons else frozenset())
        # Counted before _explain, which prices each kept partition on every backend too
        # (cache hits mostly): counted after, it said "priced 888 of 886 candidates".
        st = est.stats()
        explained = region_alternatives(view, plan, res, est, verdicts, names)
        # The running count stops where the search stopped asking: say what the rest was.
        asked = st.get("estimates", 0)
        _say(progress, f"collage: priced {asked} of {len(kept)} candidates (measured "
                       f"{st.get('measured', 0)}, from the cache {st.get('cache_hits', 0)}, "
                       f"left unpriced by the measuring budget {st.get('skipped_budget', 0)}, "
                       f"never needed by the search {max(len(kept) - asked, 0)})")
        for line in tuning_summary(st.get("tuning")):
            _say(progress, f"collage: {line}")
    finally:
        est.close()
        phases["candidates"] = phases["candidates"].stop()
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
    # The whole-model candidates cover node 0, so the search priced every one of them.
    whole = {c.backend: e for c, e in res.estimates.items()
             if c.rule and "whole-model" in c.rule.split("+")}
    single_est = {b: (e.seconds * 1e3 if e.valid else None) for b, e in whole.items()}
    report = {
        "backends": names,
        "constraints": cons.summary() if cons else "",
        "candidates": {"generated": len(raw), "after_constraints": len(allowed),
                       "after_pruning": len(kept), "dropped_by_constraints": dropped,
                       "prune": str(prune_report)},
        "estimator": est.stats(),
        "boundary_calibration": calib,
        "search": {"states_expanded": res.states_expanded, "priced": res.priced,
                   "invalid": res.invalid, "seconds": round(res.seconds, 3)},
        "estimated_ms": {"collage": res.estimated_s * 1e3,
                         **{f"single:{b}": v for b, v in single_est.items()}},
        "crossing_ms": res.crossing_s * 1e3,
        "partitions_before_coalescing": len(res.plan.partitions),
        "partitions": len(plan.partitions),
        "search_total_s": round(t_search, 3),
        "measure_budget_s": opts.measure_budget_s,
        "explain": explained,
        # where the prices come from (remote: with the sessions lost during the search)
        "measured_on": (pool.describe() if pool is not None else
                        {"where": "local", "device": {"host": host_fingerprint()}}),
    }
    plan.info["estimated_ms"] = res.estimated_s * 1e3
    report["conditions"] = search_conditions(phases, report["estimator"])  # again after e2e
    if cyclic:
        report["search_plan_cyclic"] = cyclic
        if not opts.e2e_check:
            raise ProvmapError(f"collage: the cheapest cover is cyclic ({cyclic}); rerun with "
                               "the end-to-end check to fall back to greedy/single plans")
    if pool is not None and opts.e2e_check:
        # The end-to-end check, the second level and the in-context feedback run plans in this
        # process: on this host, not on the device the prices came from.
        report["e2e_skipped"] = (f"candidates were measured on {pool.address}; the end-to-end "
                                 "check and the second level run plans in this process, so "
                                 "they were skipped (the DP's plan is kept)")
        _say(progress, f"collage: {report['e2e_skipped']}")
        if cyclic:
            raise ProvmapError(f"collage: the cheapest cover is cyclic ({cyclic}), and with "
                               "remote measurement there is no end-to-end fallback")
        opts = CollageOptions(**{**vars(opts), "e2e_check": False})
    if not opts.e2e_check:
        plan.info["collage"] = report
        return CollageResult(plan, None, report)

    # End-to-end check: the search's plan against greedy and the promising single plans.
    alternatives: dict[str, Plan] = {"collage": plan}
    if not cons:
        valid = {b: v for b, v in single_est.items() if v is not None}
        # Greedy's priority order: fastest whole-model backend first (measured, not assumed).
        prio = sorted(names, key=lambda b: (valid.get(b) is None, valid.get(b) or 0.0))
        try:
            alternatives[f"greedy:{','.join(prio)}"] = greedy_plan(view, [backends[b] for b in prio])
        except ProvmapError:
            pass
        if valid:
            best = min(valid.values())
            for b, v in sorted(valid.items(), key=lambda kv: kv[1]):
                if v <= best * opts.e2e_single_factor:
                    alternatives[f"single:{b}"] = Plan(f"single:{b}", [PartitionSpec(b, list(view.op_nodes), why=f"single:{b} (end-to-end check)")])
        for v, (origin, _be) in variants.items():
            if f"single:{origin}" in alternatives:
                alternatives[f"single:{v}"] = Plan(f"single:{v}", [PartitionSpec(
                    v, list(view.op_nodes), why=f"single:{v} (end-to-end check: a variant of "
                                                f"{origin}, see partition/variants.py)")])
        report["e2e_variants"] = sorted(variants)
    if cyclic:
        del alternatives["collage"]
        if not alternatives:
            raise ProvmapError(f"collage: the cheapest cover is cyclic ({cyclic}) and no "
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
        first = kept_by_sig.setdefault(sig[label], label)
        if first != label:
            same[label] = first
    alternatives = {k: alternatives[k] for k in order if k not in same}
    report["e2e_same_as_collage"] = sorted(k for k, v in same.items() if v == "collage")
    report["e2e_same"] = same
    built = {}
    blobs: dict = {}  # partitions built once, shared with the second level
    for label, p in alternatives.items():
        _say(progress, f"collage: building {label} for the end-to-end check")
        try:
            built[label] = build_artifact(view, p, every, blobs=blobs)
        except ProvmapError as e:
            report.setdefault("e2e_failed", {})[label] = str(e)
    if "collage" not in built:
        raise ProvmapError(f"collage: the chosen plan failed to build: {report['e2e_failed']['collage']}")
    say = lambda m: _say(progress, f"collage: {m}")  # noqa: E731
    lat, phases["e2e"] = measure_clean(lambda: measure_artifacts(
        built, repeats=opts.e2e_repeats, min_block_s=0.5, never_cap=("collage",),
        progress=say), say)
    parts = {k: len(a.manifest["partitions"]) for k, a in built.items()}
    winner, why = pick_fastest(lat, parts, margin=opts.e2e_margin)
    measured = {k: {**v.summary(), "partitions": parts[k]} for k, v in lat.items()}
    report["e2e"] = {"measured": measured, "winner": winner, "why": why,
                     "repeats": opts.e2e_repeats, "margin": opts.e2e_margin}
    tied = near_ties(lat, parts, winner, margin=opts.e2e_tie_margin) if opts.e2e_tie_passes else []
    if tied:
        # A 1-2% gap between equally simple plans is often reversed by the next measurement:
        # measure just those again, longer, before one is kept (see near_ties).
        first = winner
        _say(progress, f"collage: {winner} picked ({why}), but one measurement cannot tell "
                       f"it from " + "; ".join(why_tied(lat, winner, k, opts.e2e_tie_margin)
                                                   for k in tied)
                       + ": measuring them again to break the tie")
        again, phases["tie_break"] = measure_clean(lambda: measure_artifacts(
            {k: built[k] for k in [winner, *tied]}, repeats=2 * opts.e2e_repeats,
            passes=opts.e2e_tie_passes, min_block_s=1.0, never_cap=tuple([winner, *tied])),
            say, "tie-break")
        winner, why = break_tie(again)
        report["e2e"]["tie_break"] = {
            "first_pick": first, "tied": tied, "winner": winner, "why": why,
            "passes": opts.e2e_tie_passes, "margin": opts.e2e_tie_margin,
            "measured": {k: v.summary() for k, v in again.items()}}
        report["e2e"].update(winner=winner, why=why)
    chosen_plan = order_plan(view, alternatives[winner])
    if winner != "collage":
        report["e2e"]["note"] = (f"{winner} measured faster end to end than the searched plan "
                                 "(isolated costs do not add up); it is kept")
    art = built[winner]
    report["level"] = "first" if winner == "collage" else f"end-to-end check ({winner})"
    if opts.refine_budget_s is None or opts.refine_budget_s > 0:
        from .refine import refine, suggestions_from, supported_fn

        _say(progress, "collage: second level, up to "
                       + ("no limit" if opts.refine_budget_s is None else
                          f"{opts.refine_budget_s:.0f} s") + " of "
                       f"end-to-end measured changes to {winner}")

        # A variant supports what its searched backend supports.
        vverdicts = {**verdicts, **{v: verdicts[o] for v, (o, _be) in variants.items()}}
        win = Window()
        ref = refine(view, chosen_plan, art, winner, every,
                     supported_fn(view, vverdicts, cons), dp_plan=None if cyclic else plan,
                     cuts=frozenset(cons.cuts) if cons else frozenset(),
                     budget_s=opts.refine_budget_s, margin=opts.refine_margin, blobs=blobs,
                     progress=lambda m: _say(progress, f"collage: {m}"),
                     suggestions=suggestions_from(res.estimates))
        phases["refine"] = win.stop()
        kept = sum(1 for t in ref.trail if t.get("status") == "kept")
        report["refine"] = {"start": winner, "budget_s": opts.refine_budget_s,
                            "seconds": round(ref.seconds, 1), "stopped": ref.stopped,
                            "proposals": len(ref.trail), "kept": kept, "trail": ref.trail}
        if kept:
            chosen_plan, art = ref.plan, ref.artifact
            report["level"] = "second"
            winner = "refined"
        _say(progress, f"collage: second level: {len(ref.trail)} proposal(s), {kept} kept "
                       f"({ref.stopped}, {ref.seconds:.0f} s)")
    if opts.schedules and (opts.refine_budget_s is None or opts.refine_budget_s > 0):  # concurrent
        art = search_schedules(art, winner, report, opts.refine_margin, progress=progress)
        chosen_plan.info["schedule"] = art.manifest.get("schedule")  # kept with the plan
    if opts.in_context:
        from .measure.in_context import feed_back

        try:
            report["in_context"] = feed_back(art, cache, every,
                                             f"{view.imported.label}: {winner}")
        except Exception as e:  # a measurement that fails must not lose the built plan
            report["in_context_error"] = f"{type(e).__name__}: {e}"
    info = dict(art.manifest.get("plan_info") or {})
    info["collage"] = report
    art.manifest["plan_info"] = info
    art.manifest["strategy"] = "collage" if winner == "collage" else f"collage->{winner}"
    chosen_plan.info["collage"] = report
    report["conditions"] = search_conditions(phases, report["estimator"])
    if plan_keys is not None:
        store_plan(cache, plan_keys, view, chosen_plan, art.manifest["strategy"], report, say)
    return CollageResult(chosen_plan, art, report, every)


def plan_cache_keys(view: GraphView, backends: dict[str, Backend],
                    opts: CollageOptions) -> tuple[str, str]:
    """(model, search) under which the kept plan is stored: the model's structure (not its
    weights: prices do not depend on them), and everything that changes what a search keeps --
    each backend's identity (library version, priced options), the candidate limits, the
    constraints and the end-to-end and second-level settings.  The host is the cache's own."""
    import hashlib
    import json

    from .measure.cache import backend_identity

    model = Subgraph(view, view.op_nodes).key
    settings = {"backends": {n: list(backend_identity(b)) for n, b in backends.items()},
                **{k: getattr(opts, k) for k in (
                    "max_depth", "max_size", "max_exits", "pins", "forbids", "cuts",
                    "e2e_repeats", "e2e_single_factor", "e2e_margin", "e2e_tie_margin",
                    "e2e_tie_passes", "e2e_variants", "measure_budget_s",
                    "refine_budget_s", "refine_margin", "in_context", "schedules")}}
    search = hashlib.blake2b(json.dumps(settings, sort_keys=True, default=str).encode(),
                             digest_size=16).hexdigest()
    return model, search


def _reuse_plan(view: GraphView, cache, keys, progress) -> CollageResult | None:
    """The stored kept plan for `keys`, as a plan to build, or None (none stored, or it no
    longer fits this view)."""
    hit = cache.get_plan(*keys)
    if hit is None:
        return None
    stored, report, created = hit
    if (why := reuse_refusal(report)) is not None:
        _say(progress, f"collage: not reusing the plan cached for this model: {why}; searching")
        return None
    index = {nid: i for i, nid in enumerate(view.node_ids)}
    try:
        parts = [PartitionSpec(p["backend"], [index[n] for n in p["ops"]], why=p.get("why", ""))
                 for p in stored["partitions"]]
        plan = order_plan(view, Plan(stored["strategy"], parts))
    except (KeyError, ProvmapError):
        return None
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(created))
    report = dict(report)
    report["plan_cache"] = {"reused": True, "stored": when,
                            "note": "the kept plan of an earlier search with the same model "
                                    "structure, backends and options on this host; nothing was "
                                    "measured (--research searches again)"}
    _say(progress, f"collage: reusing the plan kept by the search of {when} ({stored['strategy']},"
                   f" {len(parts)} partition(s)) from the cost cache; --research searches again")
    plan.info.update(collage=report, schedule=stored.get("schedule"))
    return CollageResult(plan, None, report)
