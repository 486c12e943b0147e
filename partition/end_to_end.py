"""The end-to-end check: the search's plan built and measured whole beside the plans a user
could have had instead (greedy, each library alone, their variants), kept by the one
comparison procedure (decision.py).

Why whole plans: isolated prices do not add up (a partition boundary's copies, two libraries'
thread pools on two cores), and a library alone is the user's own baseline, which the search
must beat measured, not estimated.  A mixed plan must also be no further from the reference than
the libraries it mixes (measure/plan_accuracy.py); a kept plan that fails to build falls back to
its measured candidates (`build_or_candidates`).
"""

from __future__ import annotations

from provmap.provenance.util.errors import ProvmapError
from provmap.runtime_module.artifact_build import build_artifact
from provmap.runtime_module.plan import Plan, PartitionSpec, order_plan

from .collage_types import CollageOptions, EndToEnd, FirstLevel, SearchSpace
from .decision import decide_artifacts
from .measure.accuracy import is_accuracy_refusal
from .measure.plan_accuracy import PlanAccuracy
from .strategies import greedy as greedy_plan


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
    judge = _refuse_further_mixes(space, built, report, say)
    d = decide_artifacts(built, say, rule=opts.rule, wait_s=opts.quiet_wait_s,
                         accept_contended=opts.accept_contended, what="end-to-end check")
    phases["e2e"] = d.conditions()
    winner, why = d.kept, d.why
    parts = {k: len(a.manifest["partitions"]) for k, a in built.items()}
    measured = {k: {**v, "partitions": parts[k]} for k, v in d.measured.items()}
    report.e2e = {"measured": measured, "winner": winner, "why": why,
                  "decision": {k: v for k, v in d.to_dict().items() if k != "measured"}}
    chosen_plan = order_plan(space.view, alternatives[winner])
    refused = (report.e2e_accuracy or {}).get("refused") or {}
    if "collage" in refused:
        report.e2e["note"] = (f"{winner} kept: the searched plan was refused for accuracy "
                              f"({refused['collage']})")
    elif winner != "collage":
        report.e2e["note"] = (f"{winner} kept over the searched plan by the end-to-end "
                              "measurement (isolated costs do not add up)")
    report.level = "first" if winner == "collage" else f"end-to-end check ({winner})"
    return EndToEnd(winner, chosen_plan, built[winner], blobs, built,
                    {k: order_plan(space.view, alternatives[k]) for k in built}, judge)


def _refuse_further_mixes(space: SearchSpace, built: dict, report, say):
    """Drop from `built` each mixed plan further from the reference than the libraries it mixes
    are alone (measure/plan_accuracy.py); a library alone is never dropped.  The distances are
    recorded whenever two plans are measured: explain says how far each is from the reference.
    Returns the judge, for the second level's proposals (None: no reference)."""
    if len(built) < 2:
        return None
    try:
        judge = PlanAccuracy(built, space.view.model)
    except Exception as e:  # noqa: BLE001 - no reference, no verdict: the plans stay measured
        report.e2e_accuracy = {"skipped": f"{type(e).__name__}: {e}"[:500]}
        return None
    refused = judge.refusals(built)
    report.e2e_accuracy = judge.to_json(refused)
    for label, why in refused.items():
        say(f"{label} refused for the end-to-end check: {why}")
        del built[label]
    return judge
