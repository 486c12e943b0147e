"""Shortest-path search for the cheapest cover of the op nodes by candidates (Collage step 5).

As in TVM's Collage, a search state is the set of op nodes covered so far, and every edge out of
a state covers the *first uncovered node in topological order* with one candidate containing it
(and disjoint from what is covered).  Fixing the node to cover next keeps the state space small
(most states are a topological prefix plus a few nodes) without losing any cover.  Dijkstra over
these states finds the cheapest complete cover.

What Collage left as a TODO is here: crossing a boundary between two backends has a measured
cost.  Edge weights are therefore path-dependent (the backend that produced a candidate's inputs
is only known on a path).  An edge adds `crossing(nbytes, from_backend, to_backend)` for each
tensor that enters or leaves the candidate across backends, and the state is the covered set
*plus the backends of its frontier* (covered nodes that still touch uncovered ones), which is
exactly what future crossing costs depend on, so Dijkstra stays exact.

A change of backend also costs something no candidate measured alone shows: the neighbour's
threads still spinning, our own waking up (partition/measure/boundary.py, `calibrate_switches`).
`switch(from_backend, to_backend)` is added once per distinct pair of backends a candidate
meets across its boundary, on top of the per-tensor crossings; it depends on the same frontier
backends, so the state stays what it is and Dijkstra stays exact.

Exact is not bounded: a wide frontier (attention's branches, quantize/dequantize side chains)
has a number of backend signatures exponential in its width, and a BERT-base's search grew to
the OOM killer (issue 51).  So the shortest path keeps at most `signatures_per_cover` of them
per covered set (the cheapest reached; 1 would be Collage's own state, with crossings charged
on the path), states point at their parent instead of copying an assignment
(partition/cover_states.py), and past `max_states` stored or `max_growth_bytes` of memory the
search starts again as a beam over the first uncovered node, bounded by construction
(partition/cover_beam.py), and says so.  The bounds are in partition/search_bounds.py.
"""

from __future__ import annotations

import heapq
import itertools
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

from provmap.provenance.util.errors import ProvmapError
from provmap.runtime_module.plan import PartitionSpec, Plan
from provmap.runtime_module.graph_view import GraphView

from .candidate import Candidate, Estimate
from .cover_beam import beam
from .cover_states import CoverStates, Label, path_of
from .opgraph import facts, mask_of
from .search_bounds import (DEFAULT_BOUNDS, MemoryWatch, SearchBounds, peak_rss_bytes,
                            reset_peak_rss)

Crossing = Callable[[int, str, str], float]


def no_crossing(nbytes: int, src: str, dst: str) -> float:
    return 0.0


@dataclass
class SearchResult:
    plan: Plan
    chosen: list[tuple[Candidate, Estimate]]
    estimated_s: float           # sum of chosen candidates' estimates + crossings
    crossing_s: float            # the crossing part of it (switches included)
    states_expanded: int
    priced: int                  # candidates priced (estimated or measured) by the search
    invalid: dict = field(default_factory=dict)  # reason -> count
    seconds: float = 0.0
    estimates: dict = field(default_factory=dict)  # every candidate the search priced
    switch_s: float = 0.0        # the part of crossing_s paid for changes of backend
    states_stored: int = 0       # states the search held (its memory), both searches together
    signatures_dropped: int = 0  # frontier signatures past signatures_per_cover, not expanded
    degraded: str | None = None  # why the shortest path gave way to the beam (None: it did not)
    peak_rss_mb: float | None = None  # peak resident memory from the search's start to its end

    def record(self) -> dict:
        """The search's part of the first level's report (`search` in plan_info["collage"])."""
        return {"states_expanded": self.states_expanded, "states_stored": self.states_stored,
                "signatures_dropped": self.signatures_dropped,
                "method": "beam" if self.degraded else "shortest path",
                "degraded": self.degraded, "peak_rss_mb": self.peak_rss_mb,
                "priced": self.priced, "invalid": self.invalid,
                "seconds": round(self.seconds, 3), "switch_ms": self.switch_s * 1e3}


class _OverBudget(Exception):
    pass


def search(view: GraphView, candidates: Iterable[Candidate],
           price: Callable[[Candidate], Estimate], crossing: Crossing = no_crossing,
           strategy: str = "collage",
           switch: Callable[[str, str], float] | None = None,
           bounds: SearchBounds = DEFAULT_BOUNDS,
           say: Callable[[str], None] | None = None) -> SearchResult:
    """Cheapest cover of `view.op_nodes` by `candidates`; raises ProvmapError if none exists.
    Within `bounds` it is the shortest path (exact unless frontier signatures were dropped);
    past them a beam, with a line to `say` and the reason in the result."""
    t0 = time.perf_counter()
    reset_peak_rss()  # this search's peak, not the process's (a bench runs many in one)
    order = list(view.op_nodes)
    pos = {n: k for k, n in enumerate(order)}
    by_first, nonconvex = _by_first_node(view, candidates, order, pos, strategy)

    estimates: dict[Candidate, Estimate] = {}
    invalid: dict[str, int] = {}
    if nonconvex:
        invalid["not convex"] = nonconvex

    def cost_of(c: Candidate) -> Estimate:
        e = estimates.get(c)
        if e is None:
            e = price(c)
            estimates[c] = e
            if not e.valid:
                key = e.reason.split(":")[0] if e.reason else "invalid"
                invalid[key] = invalid.get(key, 0) + 1
        return e

    # With crossing costs the future cost of a state depends on which backend computed the
    # covered nodes that still touch uncovered ones (the frontier), so the frontier's backends
    # are part of the state; without crossing costs the covered set alone is the state.
    use_crossing = crossing is not no_crossing or switch is not None
    states = CoverStates(view, order, pos, by_first, cost_of, crossing, switch, use_crossing)
    walk = _ShortestPath(states, bounds)
    degraded = None
    try:
        final = walk.run()
    except _OverBudget as e:
        degraded = str(e)
        walk.release()
        width = _beam_width(bounds, states.n)
        if say is not None:
            say(f"{strategy}: the shortest path stopped at its bound ({degraded}); finishing "
                f"with a beam of {width} states per node (bounded, not exact)")
        final, b_expanded, b_stored = beam(states, width)
        walk.expanded += b_expanded
        walk.stored += b_stored
    if final is None:
        raise ProvmapError(f"{strategy}: no valid cover of the model by the candidates "
                           f"(invalid candidates: {invalid or 'none'})"
                           + (f"; the beam search after {degraded} found none either"
                              if degraded else ""))
    chosen, crossing_total, switch_total = path_of(final, estimates)
    parts = [PartitionSpec(c.backend, sorted(c.ops), why=f"{strategy}: {c.rule}, "
                           f"est {e.seconds * 1e3:.3f} ms") for c, e in chosen]
    info = {"estimated_ms": final.cost * 1e3, "crossing_ms": crossing_total * 1e3,
            "switch_ms": switch_total * 1e3}
    if degraded:
        info["search_degraded"] = degraded
    plan = Plan(strategy=strategy, partitions=parts, info=info)
    peak = peak_rss_bytes()
    return SearchResult(plan=plan, chosen=chosen, estimated_s=final.cost,
                        crossing_s=crossing_total, states_expanded=walk.expanded,
                        priced=len(estimates), invalid=invalid,
                        seconds=time.perf_counter() - t0, estimates=estimates,
                        switch_s=switch_total, states_stored=walk.stored,
                        signatures_dropped=walk.dropped, degraded=degraded,
                        peak_rss_mb=round(peak / 2**20, 1) if peak else None)


def _beam_width(bounds: SearchBounds, n: int) -> int:
    """No wider than what keeps the beam's expansions (n x width) within the states budget."""
    return max(1, min(bounds.beam_width, bounds.max_states // max(n, 1)))


class _ShortestPath:
    """Dijkstra over the cover states, at most `signatures_per_cover` states per covered set,
    raising _OverBudget past the states or memory budget."""

    def __init__(self, states: CoverStates, bounds: SearchBounds):
        self.states, self.bounds = states, bounds
        self.expanded = self.stored = self.dropped = 0
        self.best: dict = {}
        self.heap: list = []

    def release(self) -> None:
        """Let the beam have the memory (what it needs of ours it reaches through parents)."""
        self.best, self.heap = {}, []

    def run(self) -> Label | None:
        states, bounds = self.states, self.bounds
        per_cover = max(1, bounds.signatures_per_cover)
        settled: dict[int, int] = {}  # covered mask -> signatures expanded
        memory = MemoryWatch(bounds)
        start = states.start()
        best = self.best
        best[start.key] = start
        tie = itertools.count()
        heap = self.heap
        heap.append((0.0, next(tie), start))
        full = states.full
        while heap:
            _, _, lab = heapq.heappop(heap)
            if best.get(lab.key) is not lab:
                continue  # a cheaper path to the same state came first
            if lab.mask == full:
                return lab
            seen = settled.get(lab.mask, 0)
            if seen >= per_cover:
                self.dropped += 1
                continue
            settled[lab.mask] = seen + 1
            self.expanded += 1
            for key, new, front, codes, total, c, cross, sw in states.successors(lab):
                if settled.get(new, 0) >= per_cover:
                    continue
                old = best.get(key)
                if old is not None and total >= old.cost:
                    continue
                nlab = Label(key, new, front, codes, total, lab, c, cross, sw)
                best[key] = nlab
                heapq.heappush(heap, (total, next(tie), nlab))
                self.stored += 1
                if self.stored > bounds.max_states:
                    raise _OverBudget(f"{bounds.max_states} states stored, "
                                      f"{self.expanded} expanded")
                grown = memory.over(self.stored)
                if grown is not None:
                    raise _OverBudget(f"memory grew {grown / 2**20:.0f} MB during the search, "
                                      f"{self.stored} states stored")
        return None


def _by_first_node(view: GraphView, candidates: Iterable[Candidate], order: list, pos: dict,
                   strategy: str) -> tuple[dict, int]:
    """Each node's position -> the (mask, candidate) pairs covering it, and how many
    candidates were dropped as not convex; raises when a node has no candidate at all.

    Candidate generation only proposes convex candidates; the search re-checks (once per
    candidate), because a non-convex one (a path leaving it and re-entering) would make the
    plan cyclic."""
    n = len(order)
    by_first: dict[int, list[tuple[int, Candidate]]] = {k: [] for k in range(n)}
    g = facts(view)
    nonconvex = 0
    for c in candidates:
        if not g.is_convex(mask_of(c.ops)):
            nonconvex += 1
            continue
        mask = 0
        for i in c.ops:
            mask |= 1 << pos[i]
        for i in c.ops:
            by_first[pos[i]].append((mask, c))
    uncoverable = [order[k] for k in range(n) if not by_first[k]]
    if uncoverable:
        raise ProvmapError(f"{strategy}: no candidate covers {view.describe(uncoverable[0])} "
                           f"({len(uncoverable)} node(s) uncovered; check constraints)")
    return by_first, nonconvex


def coalesce(view: GraphView, plan: Plan, cuts: set | frozenset = frozenset()) -> Plan:
    """Merge partitions on the same backend that touch, when merging creates no cycle (step 6).

    Two adjacent partitions on one backend become one subgraph, built once: fewer calls and no
    hand-over between them.  A merge is refused if some path leaves A through another partition
    and comes back into B, since the merged partition would then depend on itself, and when a
    user's cut (`cuts`: op node indices whose outputs must stay partition boundaries) lies
    between them.
    """
    parts = [PartitionSpec(p.backend, list(p.ops), why=p.why) for p in plan.partitions]
    changed = True
    while changed:
        changed = False
        owner = {i: k for k, p in enumerate(parts) for i in p.ops}
        succ: dict[int, set[int]] = {k: set() for k in range(len(parts))}
        for i in view.op_nodes:
            for j in view.op_successors(i):
                if owner[i] != owner[j]:
                    succ[owner[i]].add(owner[j])
        for a in range(len(parts)):
            for b in sorted(succ[a]):
                if parts[a].backend != parts[b].backend:
                    continue
                if _reaches_avoiding(succ, a, b):
                    continue
                if cuts and _cut_between(view, cuts, parts[a].ops, parts[b].ops):
                    continue
                parts[a] = PartitionSpec(parts[a].backend, sorted(parts[a].ops + parts[b].ops),
                                         why=_merge_why(parts[a].why, parts[b].why))
                del parts[b]
                changed = True
                break
            if changed:
                break
    return Plan(strategy=plan.strategy, partitions=parts, info=dict(plan.info))


def _cut_between(view: GraphView, cuts, a_ops, b_ops) -> bool:
    a, b = set(a_ops), set(b_ops)
    for i in cuts:
        if i in a and view.op_successors(i) & b:
            return True
        if i in b and view.op_successors(i) & a:
            return True
    return False


def _merge_why(a: str, b: str) -> str:
    return a if a == b else f"{a} + {b}"[:300]


def _reaches_avoiding(succ: dict[int, set[int]], a: int, b: int) -> bool:
    """Is there a path a -> x -> ... -> b with x != b (i.e. not just the direct edge)?"""
    stack = [x for x in succ[a] if x != b]
    seen = set(stack)
    while stack:
        x = stack.pop()
        if x == b:
            return True
        for y in succ[x]:
            if y not in seen:
                seen.add(y)
                stack.append(y)
    return False
