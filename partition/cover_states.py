"""The first level's states and the edges out of them, shared by the shortest path and the beam.

A state is a covered set of op nodes plus the backends of its frontier (the covered nodes that
still touch uncovered ones): those are the only backends a later candidate can meet across its
boundary, so they are all a future crossing cost depends on.  The frontier itself is a function
of the covered set, so a state's key holds the covered mask and one byte per frontier node (its
backend code, in position order) and nothing else.  The old search kept an n-byte copy of every
node's backend in every state, which is what made 8 GB of a BERT-base's states; here a state
points at the state it came from and the candidate that led there, and the plan is read back
along those pointers once, at the end.
"""

from __future__ import annotations

from typing import Callable

from provmap.provenance.util.errors import ProvmapError
from provmap.runtime_module.graph_view import GraphView

from .candidate import Candidate, Estimate


class Label:
    """One state reached by one path: its cost, and where it came from (never a copy of the
    path's assignment)."""
    __slots__ = ("key", "mask", "front", "codes", "cost", "parent", "cand", "cross", "sw")

    def __init__(self, key, mask: int, front: int, codes: bytes, cost: float,
                 parent: "Label | None" = None, cand: Candidate | None = None,
                 cross: float = 0.0, sw: float = 0.0):
        self.key, self.mask, self.front, self.codes = key, mask, front, codes
        self.cost, self.parent, self.cand, self.cross, self.sw = cost, parent, cand, cross, sw

    @property
    def first(self) -> int:
        """Position of the first uncovered node (n when every node is covered)."""
        m = self.mask
        return (~m & (m + 1)).bit_length() - 1


def bits(m: int):
    while m:
        low = m & -m
        yield low.bit_length() - 1
        m ^= low


class _Edges:
    """Boundary tensors of each candidate, computed once: (tensor bytes, producer or consumer)."""

    def __init__(self, view: GraphView):
        self.view = view
        self._cache: dict[frozenset, tuple[list, list]] = {}
        self._preds: dict[int, set[int]] | None = None

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
        if self._preds is None:
            preds = {k: set() for k in self.view.op_nodes}
            for a in self.view.op_nodes:
                for b in self.view.op_successors(a):
                    preds[b].add(a)
            self._preds = preds
        return self._preds[i]

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


class CoverStates:
    """The state graph: where the search starts, and the states one candidate away."""

    def __init__(self, view: GraphView, order: list, pos: dict, by_first: dict,
                 cost_of: Callable[[Candidate], Estimate], crossing, switch, use_crossing: bool):
        self.order, self.pos, self.by_first = order, pos, by_first
        self.n = len(order)
        self.full = (1 << self.n) - 1
        self.cost_of, self.crossing, self.switch = cost_of, crossing, switch
        self.use_crossing = use_crossing
        self.edges = _Edges(view)
        self.backends = sorted({c.backend for lst in by_first.values() for _, c in lst})
        self.bcode = {b: k + 1 for k, b in enumerate(self.backends)}  # 0 = not covered yet
        adj = [0] * self.n
        for k in range(self.n):
            for j in view.op_successors(order[k]):
                adj[k] |= 1 << pos[j]
                adj[pos[j]] |= 1 << k
        self.adj = adj

    def start(self) -> Label:
        return Label(0 if not self.use_crossing else (0, b""), 0, 0, b"", 0.0)

    def successors(self, lab: Label):
        """(key, covered mask, frontier, frontier codes, cost, candidate, crossing, switch) for
        each valid candidate covering the first uncovered node and disjoint from the covered."""
        state = lab.mask
        codes = dict(zip(bits(lab.front), lab.codes)) if self.use_crossing else None
        for mask, c in self.by_first[lab.first]:
            if mask & state:
                continue
            est = self.cost_of(c)
            if not est.valid:
                continue
            cross, sw = self._crossing_cost(c, codes) if self.use_crossing else (0.0, 0.0)
            new = state | mask
            total = lab.cost + est.seconds + cross
            front, ncodes = self._frontier(new, lab.front | mask, mask, codes,
                                           self.bcode[c.backend])
            key = (new, ncodes) if self.use_crossing else new
            yield key, new, front, ncodes, total, c, cross, sw

    def _frontier(self, mask: int, maybe: int, placed: int, codes, code: int):
        """The new state's frontier (from the old one and the nodes just placed, so O(frontier)
        not O(covered)), and its backend codes when crossings are priced."""
        adj = self.adj
        out = []
        fm = 0
        for k in bits(maybe):
            if adj[k] & ~mask:
                fm |= 1 << k
                if codes is not None:
                    out.append(code if (placed >> k) & 1 else codes[k])
        return fm, bytes(out)

    def _crossing_cost(self, c: Candidate, codes: dict) -> tuple[float, float]:
        """What placing `c` costs at its boundaries with the nodes already placed, in both
        directions: (all of it, the switches' part).  Every covered neighbour of `c` is on the
        frontier, so the frontier's codes are all it reads.  Tensors pay `crossing` each; a
        change of backend pays `switch` once per distinct pair."""
        cross = 0.0
        pairs = set()
        pos, backends, crossing = self.pos, self.backends, self.crossing
        ins, outs = self.edges.of(c.ops)
        for nbytes, p in ins:
            src = codes.get(pos[p], 0)
            if src and backends[src - 1] != c.backend:
                cross += crossing(nbytes, backends[src - 1], c.backend)
                pairs.add((backends[src - 1], c.backend))
        for nbytes, q in outs:
            dst = codes.get(pos[q], 0)
            if dst and backends[dst - 1] != c.backend:
                cross += crossing(nbytes, c.backend, backends[dst - 1])
                pairs.add((c.backend, backends[dst - 1]))
        sw = sum(self.switch(x, y) for x, y in pairs) if self.switch is not None else 0.0
        return cross + sw, sw


def path_of(final: Label, estimates: dict) -> tuple[list, float, float]:
    """The chosen candidates from the start to `final`, in order, their crossings and the
    switches' part of them."""
    chosen = []
    crossing_total = switch_total = 0.0
    lab = final
    while lab.parent is not None:
        chosen.append((lab.cand, estimates[lab.cand]))
        crossing_total += lab.cross
        switch_total += lab.sw
        lab = lab.parent
    chosen.reverse()
    return chosen, crossing_total, switch_total
