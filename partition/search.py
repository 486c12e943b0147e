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
from .opgraph import facts, mask_of

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


class _Edges:
    """Boundary tensors of each candidate, computed once: (tensor bytes, producer or consumer)."""

    def __init__(self, view: GraphView):
        self.view = view
        self._cache: dict[frozenset, tuple[list, list]] = {}

    def of(self, ops: frozenset) -> tuple[list, list]:
        got = self._cache.get(ops)
        if got is not None:
            return got
        v = self.view
        ins, outs = [], []
        for i in ops:
            for j in v.op_successors(i):
                if j not in ops:
                    outs.append((self._bytes_between(i, j), j))
        for i in ops:
            for p in self._op_preds(i):
                if p not in ops:
                    ins.append((self._bytes_between(p, i), p))
        self._cache[ops] = (ins, outs)
        return ins, outs

    def _op_preds(self, i: int) -> set[int]:
        preds = getattr(self, "_preds", None)
        if preds is None:
            preds = {k: set() for k in self.view.op_nodes}
            for a in self.view.op_nodes:
                for b in self.view.op_successors(a):
                    preds[b].add(a)
            self._preds = preds
        return preds[i]

    def _bytes_between(self, producer: int, consumer: int) -> int:
        v = self.view
        total = 0
        for t in v.nodes[producer].output:
            if not t:
                continue
            try:
                total += v.spec(t).nbytes
            except ProvmapError:
                pass
            # Only count the tensors the consumer (or its helpers) actually reads: near enough
            # to take every output of a single-output producer, which is nearly all of them.
        return total


def search(view: GraphView, candidates: Iterable[Candidate],
           price: Callable[[Candidate], Estimate], crossing: Crossing = no_crossing,
           strategy: str = "collage",
           switch: Callable[[str, str], float] | None = None) -> SearchResult:
    """Cheapest cover of `view.op_nodes` by `candidates`; raises ProvmapError if none exists."""
    t0 = time.perf_counter()
    order = list(view.op_nodes)
    pos = {n: k for k, n in enumerate(order)}
    n = len(order)
    full = (1 << n) - 1
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

    edges = _Edges(view)
    backends = sorted({c.backend for lst in by_first.values() for _, c in lst})
    bcode = {b: k + 1 for k, b in enumerate(backends)}  # 0 = not covered yet

    # With crossing costs the future cost of a state depends on which backend computed the
    # covered nodes that still touch uncovered ones (the frontier), so the frontier's backends
    # are part of the state; without crossing costs the covered set alone is the state.
    adj = [0] * n
    for k in range(n):
        for j in view.op_successors(order[k]):
            adj[k] |= 1 << pos[j]
            adj[pos[j]] |= 1 << k
    use_crossing = crossing is not no_crossing or switch is not None

    def key_of(mask: int, a: bytes, front: int):
        """State key, and the frontier: covered nodes that still touch uncovered ones.  The
        caller passes the candidate frontier (old frontier | newly covered), so this is
        O(frontier), not O(covered)."""
        sig = []
        fm = 0
        m = front
        while m:
            low = m & -m
            k = low.bit_length() - 1
            if adj[k] & ~mask:
                fm |= low
                if use_crossing:
                    sig.append((k, a[k]))
            m ^= low
        return ((mask, tuple(sig)) if use_crossing else mask), fm

    start, _ = key_of(0, bytes(n), 0)
    best: dict = {start: 0.0}
    parent: dict = {}
    assign: dict = {start: bytes(n)}
    frontier: dict = {start: 0}
    tie = itertools.count()
    heap = [(0.0, next(tie), 0, start)]
    expanded = 0
    final = None
    while heap:
        cost, _, state, key = heapq.heappop(heap)
        if cost > best.get(key, float("inf")):
            continue
        if state == full:
            final = key
            break
        expanded += 1
        first = (~state & (state + 1)).bit_length() - 1  # lowest zero bit
        a = assign[key]
        for mask, c in by_first[first]:
            if mask & state:
                continue
            est = cost_of(c)
            if not est.valid:
                continue
            cross, sw = (_crossing_cost(edges, c, a, pos, backends, crossing, switch)
                         if use_crossing else (0.0, 0.0))
            new = state | mask
            total = cost + est.seconds + cross
            na = bytearray(a)
            code = bcode[c.backend]
            for i in c.ops:
                na[pos[i]] = code
            na = bytes(na)
            nkey, nfront = key_of(new, na, frontier[key] | mask)
            if total < best.get(nkey, float("inf")):
                best[nkey] = total
                parent[nkey] = (key, c, cross, sw)
                assign[nkey] = na
                frontier[nkey] = nfront
                heapq.heappush(heap, (total, next(tie), new, nkey))
    if final is None:
        raise ProvmapError(f"{strategy}: no valid cover of the model by the candidates "
                           f"(invalid candidates: {invalid or 'none'})")
    chosen, crossing_total, switch_total = _path(parent, estimates, start, final)
    parts = [PartitionSpec(c.backend, sorted(c.ops), why=f"{strategy}: {c.rule}, "
                           f"est {e.seconds * 1e3:.3f} ms") for c, e in chosen]
    plan = Plan(strategy=strategy, partitions=parts,
                info={"estimated_ms": best[final] * 1e3, "crossing_ms": crossing_total * 1e3,
                      "switch_ms": switch_total * 1e3})
    return SearchResult(plan=plan, chosen=chosen, estimated_s=best[final],
                        crossing_s=crossing_total, states_expanded=expanded,
                        priced=len(estimates), invalid=invalid,
                        seconds=time.perf_counter() - t0, estimates=estimates,
                        switch_s=switch_total)


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


def _crossing_cost(edges: "_Edges", c: Candidate, a: bytes, pos: dict, backends: list,
                   crossing: Crossing, switch=None) -> tuple[float, float]:
    """What placing `c` costs at its boundaries with the nodes already assigned (`a`: each
    node's backend code, 0 = not yet), in both directions: (all of it, the switches' part).
    Tensors pay `crossing` each; a change of backend pays `switch` once per distinct pair."""
    cross = 0.0
    pairs = set()
    ins, outs = edges.of(c.ops)
    for nbytes, p in ins:
        src = a[pos[p]]
        if src and backends[src - 1] != c.backend:
            cross += crossing(nbytes, backends[src - 1], c.backend)
            pairs.add((backends[src - 1], c.backend))
    for nbytes, q in outs:
        dst = a[pos[q]]
        if dst and backends[dst - 1] != c.backend:
            cross += crossing(nbytes, c.backend, backends[dst - 1])
            pairs.add((c.backend, backends[dst - 1]))
    sw = sum(switch(x, y) for x, y in pairs) if switch is not None else 0.0
    return cross + sw, sw


def _path(parent: dict, estimates: dict, start, final) -> tuple[list, float, float]:
    """The chosen candidates from the start state to `final`, in order, their crossings and
    the switches' part of them."""
    chosen = []
    crossing_total = switch_total = 0.0
    k = final
    while k != start:
        prev, c, cross, sw = parent[k]
        chosen.append((c, estimates[c]))
        crossing_total += cross
        switch_total += sw
        k = prev
    chosen.reverse()
    return chosen, crossing_total, switch_total


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
