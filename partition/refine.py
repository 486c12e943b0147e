"""Collage's second level: change the plan where isolated prices cannot judge, and keep a change
only when the whole plan, measured end to end, is faster.

Why.  The first level adds up prices measured on isolated candidates.  Those do not add up:
weights and activations are warm in cache in isolation, thread pools hand over between
libraries, layouts are reordered at boundaries.  On Inception v1 a mixed plan estimated 13%
faster than OpenVINO alone measured 27% slower.  The Collage paper found the same and added a
second level driven by end-to-end measurements on top of the DP; so does this module.

How.  Start from the fastest plan the end-to-end check measured (the incumbent) and propose
local changes to it:

* move   - one partition to another backend that supports all of its nodes (then adjacent
           partitions on one backend are coalesced, so a move can also merge);
* merge  - two neighbouring partitions onto one backend (either one's);
* grow / shrink - one boundary op node moves from a partition to its neighbour;
* carve  - a region the first level priced cheaper on another backend than on the one the
           incumbent gives it, moved onto that backend (largest isolated saving first among
           carves of one size), and, when the incumbent has one partition, each partition of
           the first level's plan (the DP's suggestion, tried alone); what remains of the
           partition it leaves is split into what runs before it and what depends on it.

Each proposal that is valid (every node supported, the constraints respected, no cycle between
partitions) is built (partition builds are cached across proposals) and measured against the
incumbent by the one comparison procedure (partition/decision.py): paired passes until one of the
two is ahead with confidence, a proposal with more partitions kept only when faster by the
rule's minimum gain, an undecided pair keeping the simpler plan.  After an
accepted change the proposals are generated again from the new incumbent.  The loop stops when
no proposal wins or the time budget is spent.  Every proposal, built or not, and its
measurement is recorded in the trail, which the manifest keeps and `explain` shows.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from provmap.provenance.util.errors import ProvmapError
from provmap.runtime_module.artifact_build import build_artifact
from provmap.runtime_module.graph_view import GraphView
from provmap.runtime_module.plan import PartitionSpec, Plan, order_plan

from .candidate import Candidate
from .decision import decide_artifacts
from .measure.contention import combine
from .measure.evidence import RULE, Rule
from .search import coalesce


@dataclass
class Proposal:
    kind: str        # move | merge | grow | shrink | carve
    what: str        # one line for the trail: which partition, which nodes, which backend
    plan: Plan


def _span(view: GraphView, ops) -> str:
    """"N op(s) from <first> to <last>": two regions starting at one node (Inception's carves
    of one branch at several depths) read apart in the trail."""
    ops = sorted(ops)
    if len(ops) == 1:
        return f"1 op {view.describe(ops[0])}"
    return f"{len(ops)} op(s) from {view.describe(ops[0])} to {view.describe(ops[-1])}"


def _describe_part(view: GraphView, p: PartitionSpec) -> str:
    return f"{p.backend} [{_span(view, p.ops)}]"


def _neighbours(view: GraphView, plan: Plan) -> set[tuple[int, int]]:
    """Pairs (a, b) of partition positions where a tensor of a is read by b."""
    owner = {i: k for k, p in enumerate(plan.partitions) for i in p.ops}
    out = set()
    for i in view.op_nodes:
        for j in view.op_successors(i):
            if owner.get(i) is not None and owner.get(j) is not None and owner[i] != owner[j]:
                out.add((owner[i], owner[j]))
    return out


def _carve(view: GraphView, part: PartitionSpec, region: frozenset,
           backend: str) -> list[PartitionSpec]:
    """`part` with `region` moved to `backend`: the rest splits into what runs before the
    region and what depends on it, since one partition on both sides would feed itself."""
    below, todo = set(), list(region)
    while todo:
        for j in view.op_successors(todo.pop()):
            if j not in below:
                below.add(j)
                todo.append(j)
    rest = set(part.ops) - region
    after = sorted(rest & below)
    before = sorted(rest - below)
    out = [PartitionSpec(part.backend, before, why=part.why)] if before else []
    out.append(PartitionSpec(backend, sorted(region), why="refine: carved"))
    if after:
        out.append(PartitionSpec(part.backend, after, why=part.why))
    return out


def _with(plan: Plan, label: str, parts: list[PartitionSpec]) -> Plan:
    return Plan(label, [PartitionSpec(p.backend, sorted(p.ops), why=p.why) for p in parts if p.ops])


def propose(view: GraphView, plan: Plan, backends: list[str], supported, dp_plan: Plan | None = None,
            cuts: frozenset = frozenset(), suggestions: list | None = None,
            max_carves: int = 8) -> list[Proposal]:
    """Every local change to `plan` (see the module doc), cheapest-looking first: changes that
    remove a boundary (moves that merge, merges) before those that only shift one.

    `supported(backend, ops)` says whether a backend may run a set of op nodes (support
    verdicts and the user's constraints).  `suggestions` are regions the first level priced
    cheaper on another backend than on the one the incumbent gives them
    (`suggestions_from`): each becomes a carve, largest saving first among carves of one size."""
    parts = plan.partitions
    current = plan.signature()
    out: list[Proposal] = []
    seen = set()

    def add(kind, what, new_parts):
        new_parts = [p for p in new_parts if p.ops]
        for p in new_parts:
            if not supported(p.backend, frozenset(p.ops)):
                return
        cand = coalesce(view, _with(plan, "refine", new_parts), cuts=cuts)
        sig = cand.signature()
        if sig in seen or sig == current:
            return
        try:
            order_plan(view, Plan("refine", [PartitionSpec(p.backend, list(p.ops))
                                             for p in cand.partitions]))
        except ProvmapError:
            return  # the change makes two partitions feed each other
        seen.add(sig)
        for q in cand.partitions:
            if (q.backend, frozenset(q.ops)) not in current:
                q.why = f"second level ({kind}, measured end to end): {what}"
        out.append(Proposal(kind, what, cand))

    copy = lambda: [PartitionSpec(p.backend, list(p.ops), why=p.why) for p in parts]  # noqa: E731
    nb = _neighbours(view, plan)
    # merges: both neighbours onto one of their backends
    for a, b in sorted(nb):
        if parts[a].backend == parts[b].backend:
            continue
        for target in (parts[a].backend, parts[b].backend):
            new = copy()
            new[a].backend = target
            new[b].backend = target
            new[a].ops = sorted(set(new[a].ops) | set(new[b].ops))
            new[b].ops = []
            add("merge", f"merge {_describe_part(view, parts[a])} and "
                         f"{_describe_part(view, parts[b])} on {target}", new)
    # moves: one partition to another backend
    for k, p in enumerate(parts):
        for b in backends:
            if b == p.backend:
                continue
            new = copy()
            new[k].backend = b
            add("move", f"move {_describe_part(view, p)} to {b}", new)
    # carve: the first level's partitions, one at a time, out of a single-partition incumbent
    if dp_plan is not None and len(parts) == 1:
        whole = parts[0]
        for q in dp_plan.partitions:
            if q.backend == whole.backend:
                continue
            add("carve", f"carve {_describe_part(view, q)} out of {whole.backend} (the first "
                         "level's partition)",
                _carve(view, PartitionSpec(whole.backend, list(whole.ops), why=whole.why),
                       frozenset(q.ops), q.backend))
    # carve: regions the isolated prices say are cheaper elsewhere, out of their partition
    carves = 0
    for sg in suggestions or ():
        if carves >= max_carves:
            break
        region = frozenset(sg["ops"])
        k = next((k for k, p in enumerate(parts) if region <= set(p.ops)), None)
        if k is None or parts[k].backend != sg["vs"] or region == set(parts[k].ops):
            continue
        new = copy()
        new[k:k + 1] = _carve(view, new[k], region, sg["backend"])
        before = len(out)
        add("carve", f"carve {_span(view, region)} out of "
                     f"{parts[k].backend} onto {sg['backend']} (first level: "
                     f"{sg['saving_ms']:.3f} ms cheaper there in isolation)", new)
        carves += len(out) > before
    # grow / shrink: one boundary node to the neighbour that reads it or that it reads
    owner = {i: k for k, p in enumerate(parts) for i in p.ops}
    preds: dict[int, set[int]] = {i: set() for i in view.op_nodes}
    for j in view.op_nodes:
        for i in view.op_successors(j):
            preds.setdefault(i, set()).add(j)
    for i in view.op_nodes:
        k = owner[i]
        if len(parts[k].ops) < 2:
            continue  # moving the last node is a move of the partition
        others = {owner[j] for j in view.op_successors(i)} | {owner[j] for j in preds[i]}
        for m in sorted(others - {k}):
            if parts[m].backend == parts[k].backend:
                continue
            new = copy()
            new[k].ops = [x for x in new[k].ops if x != i]
            new[m].ops = sorted(set(new[m].ops) | {i})
            add("grow", f"move {view.describe(i)} from {parts[k].backend} to "
                        f"{_describe_part(view, parts[m])}", new)
    # by kind, then fewer partitions first; the sort is stable, so carves of one size stay in
    # the order of their isolated saving
    order = {"merge": 0, "move": 1, "carve": 2, "grow": 3}
    out.sort(key=lambda pr: (order[pr.kind], len(pr.plan.partitions)))
    return out


def suggestions_from(estimates: dict) -> list[dict]:
    """Regions the first level priced on two backends, with the saving of the cheaper one:
    [{"ops", "backend" (cheaper), "vs" (dearer), "saving_ms"}], largest saving first."""
    by_region: dict = {}
    for c, e in estimates.items():
        if e.valid and len(c.ops) > 0:
            by_region.setdefault(frozenset(c.ops), {})[c.backend] = e.seconds
    out = []
    for ops, prices in by_region.items():
        for b, pb in prices.items():
            for a, pa in prices.items():
                if a != b and pb < pa:
                    out.append({"ops": sorted(ops), "backend": b, "vs": a,
                                "saving_ms": (pa - pb) * 1e3})
    out.sort(key=lambda x: -x["saving_ms"])
    return out


@dataclass
class RefineResult:
    plan: Plan
    artifact: object
    label: str
    trail: list
    seconds: float
    stopped: str
    conditions: dict | None = None  # the decisions' measuring conditions (hygiene's phase)


def refine(view: GraphView, plan: Plan, artifact, label: str, backends: dict, supported,
           dp_plan: Plan | None = None, cuts: frozenset = frozenset(),
           budget_s: float | None = 60.0, rule: Rule = RULE, wait_s: float = 120.0,
           accept_contended: bool = False, blobs: dict | None = None, progress=None,
           suggestions: list | None = None, accuracy=None) -> RefineResult:
    """Improve `plan` (already built as `artifact`) by end-to-end measured local changes.

    Returns the kept plan, its artifact, and the trail: one entry per proposal considered, with
    what it changed, the measured medians and minimums of incumbent and proposal, and whether
    it was kept and why.  Each proposal is decided against the incumbent by the one
    comparison procedure (partition/decision.py); `accuracy` (measure/plan_accuracy.py) refuses
    a winning mix further from the reference than its libraries alone, as the end-to-end check
    does."""
    say = progress or (lambda msg: None)
    t0 = time.monotonic()
    blobs = {} if blobs is None else blobs
    trail: list[dict] = []
    inc_plan, inc_art, inc_label = plan, artifact, label
    tried: set = set()
    took: list[float] = []  # each measured proposal's build and decision (s)
    stopped = "no proposal won"
    conds: list = []
    while True:
        proposals = [p for p in propose(view, inc_plan, list(backends), supported, dp_plan, cuts,
                                        suggestions)
                     if p.plan.signature() not in tried]
        if not proposals:
            break
        accepted = False
        for n, pr in enumerate(proposals):
            left = None if budget_s is None else budget_s - (time.monotonic() - t0)
            # a proposal is not begun that would, as the ones before it took, end past the
            # budget: its build cannot be cut short (ResNet-50 QDQ's third move began at about
            # 100 s and its build and first round ended at 150 s of 120)
            typical = statistics.median(took) if took else 0.0
            if left is not None and (left <= 0 or typical > left):
                stopped = (f"budget of {budget_s:.0f} s spent" if left <= 0 else
                           f"budget of {budget_s:.0f} s: {left:.0f} s left, a proposal took "
                           f"{typical:.0f} s")
                trail.extend({"kind": rest.kind, "change": rest.what,
                              "status": "not tried (budget)"} for rest in proposals[n:])
                return RefineResult(inc_plan, inc_art, inc_label, trail,
                                    time.monotonic() - t0, stopped, _conditions(conds))
            tried.add(pr.plan.signature())
            begun = time.monotonic()
            entry = {"kind": pr.kind, "change": pr.what,
                     "partitions": len(pr.plan.partitions)}
            say(f"refine: trying {pr.what}")
            try:
                art = build_artifact(view, pr.plan, backends, blobs=blobs)
            except ProvmapError as e:
                entry.update(status="build failed", reason=str(e))
                trail.append(entry)
                continue
            d = decide_artifacts({"incumbent": inc_art, "proposal": art}, rule=rule,
                                 wait_s=wait_s, accept_contended=accept_contended,
                                 what="second level", until=None if budget_s is None else
                                 t0 + budget_s)
            ok, why = d.kept == "proposal", d.why
            # judged only once it won: most proposals lose on time, and this runs the plan
            refused = ok and accuracy is not None and accuracy.refusal(art)
            if refused:
                ok, why = False, f"faster, but refused for accuracy: {refused}"
            conds.append(d.conditions())
            took.append(time.monotonic() - begun)
            entry.update(seconds=round(took[-1], 1), waited_s=round(d.waited_s, 1),
                         incumbent=d.measured.get("incumbent"),
                         proposal=d.measured.get("proposal"),
                         versus=d.versus, passes=d.passes,
                         status="kept" if ok else "refused for accuracy" if refused
                         else "rejected", reason=why)
            trail.append(entry)
            say(f"refine: {entry['status']}: {why}")
            if ok:
                inc_plan = order_plan(view, pr.plan)
                inc_art, inc_label = art, "refined"
                accepted = True
                break
        if not accepted:
            break
    if stopped == "no proposal won" and any(t.get("status") == "kept" for t in trail):
        stopped = "no further proposal won"
    return RefineResult(inc_plan, inc_art, inc_label, trail, time.monotonic() - t0, stopped,
                        _conditions(conds))


def _conditions(conds: list) -> dict:
    """The second level's phase record: contended when any decision counted a loaded round."""
    rec = combine({str(i): c for i, c in enumerate(conds)})
    return {"contended": rec["contended"], "reasons": [rec["reason"]] if rec["reason"] else [],
            "decisions": len(conds),
            "waited_s": round(sum(c.get("waited_s", 0.0) for c in conds), 1)}


def supported_fn(view: GraphView, verdicts: dict, constraints=None):
    """`supported(backend, ops)` for `propose`: every node supported by the backend's verdicts
    and the candidate allowed by the user's constraints."""
    from .constraints import allows

    def supported(backend: str, ops: frozenset) -> bool:
        v = verdicts.get(backend, {})
        if not all(v.get(i) is not None and v[i].ok for i in ops):
            return False
        if constraints:
            ok, _ = allows(constraints, Candidate(backend, ops, "refine"), view)
            return ok
        return True

    return supported
