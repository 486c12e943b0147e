"""Candidate partitions for every backend, their validity checks, and pruning (Collage steps 2-3).

Vocabulary (op nodes only: helper nodes are copied into every subgraph that needs them and are
never part of a candidate):

* **reachability**: for each op node, the bitset (a Python int, bit ``i`` = ONNX node index
  ``i``) of its strict descendants, following `GraphView.op_successors` (so a path through a
  helper node, e.g. a Shape of an op's output, counts as a dependency).
* **convex**: no path leaves the candidate and comes back into it.  Checked as
  ``desc(S) & anc(S) & ~S == 0`` where ``desc(S)``/``anc(S)`` are the unions of the members'
  descendant/ancestor bitsets: an outside node that is both below one member and above another
  lies on such a path, and every such path has one.  A non-convex candidate cannot run as one
  call (it would need its own output), so it is never proposed.
* **connected**: the members form one piece when edges are taken in both directions.  Required
  for every rule except "whole-model" (a model with two independent branches is still one valid
  single-backend candidate).
* **exits**: distinct tensors an op of the candidate produces that are read outside it (by an op
  node, directly or through helper nodes) or are graph outputs: exactly
  ``view.subgraph(ops).outputs``, counted without building a Subgraph.  Collage's **taps** (an
  inner value that is consumed inside *and* outside) are exits too, and are counted; `boundary`
  reports them separately.  **entries** are the mirror image: distinct tensors the candidate
  (with its copied helpers) reads from other op nodes or graph inputs; weights do not count.
  "combine" and "fusion-pattern" candidates must have at most ``max_exits`` exits and
  ``max_entries`` entries; "single-op", "maximal" and "whole-model" are exempt (they are needed
  for coverage or are unique).
* **depth**: the longest path inside the candidate, counted in op nodes (a chain of 3 has depth
  3).  Bounded by ``max_depth`` for "combine" only; ``max_size`` bounds the number of op nodes.

`generate` runs the per-backend rules of `provmap.partition.rules` for every backend.  `prune` removes
candidates that cannot matter (see its docstring); `reachability` is the shared utility.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from provmap.runtime_module.backend import Support
from provmap.runtime_module.subgraph import GraphView

from .candidate import Candidate

__all__ = [
    "OpGraph",
    "PruneReport",
    "bits",
    "facts",
    "generate",
    "mask_of",
    "prune",
    "reachability",
    "validate",
]


def bits(mask: int) -> Iterator[int]:
    """Indices of the set bits of `mask`, ascending."""
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def mask_of(ops: Iterable[int]) -> int:
    m = 0
    for i in ops:
        m |= 1 << i
    return m


class OpGraph:
    """Facts about the op-node dataflow graph of one GraphView, computed once (see `facts`).

    All sets are int bitsets over ONNX node indices.  `succ`/`pred`: direct op successors /
    predecessors; `desc`/`anc`: strict descendants / ancestors; `outs[i]`: for each output
    tensor of op node i, (name, bitset of op nodes reading it, is a graph output).
    """

    def __init__(self, view: GraphView):
        # No reference to `view` is kept: `facts` caches this object in a WeakKeyDictionary
        # keyed by the view, and a strong reference back would keep both alive forever.
        self.op_type: dict[int, str] = {i: view.nodes[i].op_type for i in view.op_nodes}
        self.order: list[int] = list(view.op_nodes)
        self.all: int = mask_of(self.order)
        self.succ: dict[int, int] = {i: mask_of(view.op_successors(i)) for i in self.order}
        self.pred: dict[int, int] = {i: 0 for i in self.order}
        for i in self.order:
            for j in bits(self.succ[i]):
                self.pred[j] |= 1 << i
        self.rank = {i: k for k, i in enumerate(self.order)}
        # ONNX requires topologically sorted nodes, so ascending node index is a topological
        # order and iterating a bitset's bits visits members in dataflow order.  Checked anyway.
        self.index_is_topological = all(j > i for i in self.order for j in bits(self.succ[i]))
        if not self.index_is_topological:
            self.order = _kahn(self.order, self.succ, self.pred)
            self.rank = {i: k for k, i in enumerate(self.order)}
        self.desc: dict[int, int] = {}
        for i in reversed(self.order):
            m = 0
            for j in bits(self.succ[i]):
                m |= (1 << j) | self.desc[j]
            self.desc[i] = m
        self.anc: dict[int, int] = {}
        for i in self.order:
            m = 0
            for j in bits(self.pred[i]):
                m |= (1 << j) | self.anc[j]
            self.anc[i] = m
        # Which op nodes read a helper node's value (the helper is copied into their subgraph).
        helper_users: dict[int, int] = {}
        for op in self.order:
            for h in view.helper_closure([op]):
                helper_users[h] = helper_users.get(h, 0) | (1 << op)
        graph_outputs = set(view.graph_outputs)
        self.outs: dict[int, list[tuple[str, int, bool]]] = {}
        for i in self.order:
            lst = []
            for t in view.nodes[i].output:
                if not t:
                    continue
                cm = 0
                for c in view.consumers.get(t, ()):
                    if view.is_op(c):
                        cm |= 1 << c
                    else:
                        cm |= helper_users.get(c, 0)
                lst.append((t, cm, t in graph_outputs))
            self.outs[i] = lst
        # Tensors each op node's subgraph would read from elsewhere: its own inputs and those of
        # the helpers copied with it, when produced by an op node or a graph input.
        self.ins: dict[int, list[tuple[str, int]]] = {}
        for i in self.order:
            lst = []
            for n in [i, *sorted(view.helper_closure([i]))]:
                for x in view.nodes[n].input:
                    if not x or x in view.initializers:
                        continue
                    p = view.producer.get(x)
                    if p is None:
                        lst.append((x, -1))
                    elif view.is_op(p):
                        lst.append((x, p))
            self.ins[i] = list(dict.fromkeys(lst))
        #: per-rule memo (e.g. "combine" enumerations shared by backends with equal support)
        self.memo: dict = {}

    # -- per-set checks ----------------------------------------------------------------------
    def members(self, mask: int) -> list[int]:
        """Members of `mask` in topological order."""
        ms = list(bits(mask))
        if not self.index_is_topological:
            ms.sort(key=self.rank.__getitem__)
        return ms

    def is_convex(self, mask: int) -> bool:
        d = a = 0
        for i in bits(mask):
            d |= self.desc[i]
            a |= self.anc[i]
        return not (d & a & ~mask)

    def component(self, mask: int) -> int:
        """The connected part of `mask` containing its lowest node (edges either way)."""
        start = mask & -mask
        seen = start
        stack = [start.bit_length() - 1]
        while stack:
            i = stack.pop()
            nb = (self.succ[i] | self.pred[i]) & mask & ~seen
            seen |= nb
            stack.extend(bits(nb))
        return seen

    def is_connected(self, mask: int) -> bool:
        return bool(mask) and self.component(mask) == mask

    def depth(self, mask: int) -> int:
        """Longest path inside `mask`, in op nodes."""
        longest: dict[int, int] = {}
        best = 0
        for i in self.members(mask):
            d = 1
            for p in bits(self.pred[i] & mask):
                if longest[p] + 1 > d:
                    d = longest[p] + 1
            longest[i] = d
            if d > best:
                best = d
        return best

    def exit_count(self, mask: int) -> int:
        n = 0
        inv = ~mask
        for i in bits(mask):
            for _, cm, g in self.outs[i]:
                if g or cm & inv:
                    n += 1
        return n

    def entry_count(self, mask: int) -> int:
        """Distinct tensors the set reads from outside (graph inputs, other op nodes)."""
        seen = set()
        for i in bits(mask):
            for t, p in self.ins[i]:
                if p < 0 or not mask >> p & 1:
                    seen.add(t)
        return len(seen)

    def boundary(self, mask: int) -> tuple[list[str], list[str]]:
        """(exits, taps): tensors leaving the set; taps are those also consumed inside it."""
        exits, taps = [], []
        for i in bits(mask):
            for t, cm, g in self.outs[i]:
                if g or cm & ~mask:
                    exits.append(t)
                    if cm & mask:
                        taps.append(t)
        return exits, taps


def _kahn(order: list[int], succ: dict[int, int], pred: dict[int, int]) -> list[int]:
    indeg = {i: bin(pred[i]).count("1") for i in order}
    ready = sorted(i for i in order if indeg[i] == 0)
    out = []
    while ready:
        i = ready.pop(0)
        out.append(i)
        for j in bits(succ[i]):
            indeg[j] -= 1
            if indeg[j] == 0:
                ready.append(j)
        ready.sort()
    return out


_FACTS: "weakref.WeakKeyDictionary[GraphView, OpGraph]" = weakref.WeakKeyDictionary()


def facts(view: GraphView) -> OpGraph:
    """The view's OpGraph, computed on first use and cached for the view's lifetime."""
    g = _FACTS.get(view)
    if g is None:
        g = OpGraph(view)
        _FACTS[view] = g
    return g


def reachability(view: GraphView) -> dict[int, int]:
    """Strict-descendant bitset (bit i = ONNX node index i) of every op node."""
    return dict(facts(view).desc)


def validate(view: GraphView, ops: Iterable[int], *, max_size: int | None = None,
             max_depth: int | None = None, max_exits: int | None = None,
             max_entries: int | None = None, connected: bool = True) -> str:
    """Why `ops` is not a valid candidate ("" when it is).  Convexity is always required."""
    g = facts(view)
    ops = list(ops)
    if not ops:
        return "empty"
    for i in ops:
        if not view.is_op(i):
            return f"{view.describe(i)} computes nothing at run time"
    m = mask_of(ops)
    if not g.is_convex(m):
        return "not convex (a path leaves it and re-enters)"
    if connected and not g.is_connected(m):
        return "not connected"
    if max_size is not None and len(ops) > max_size:
        return f"{len(ops)} op nodes > max_size {max_size}"
    if max_depth is not None and g.depth(m) > max_depth:
        return f"depth {g.depth(m)} > max_depth {max_depth}"
    if max_exits is not None and g.exit_count(m) > max_exits:
        return f"{g.exit_count(m)} exits > max_exits {max_exits}"
    if max_entries is not None and g.entry_count(m) > max_entries:
        return f"{g.entry_count(m)} entries > max_entries {max_entries}"
    return ""


# ------------------------------------------------------------------------------------------
# Generation
# ------------------------------------------------------------------------------------------


def generate(view: GraphView, verdicts_by_backend: dict[str, dict[int, Support]],
             max_depth: int = 4, max_size: int = 12, max_exits: int = 4,
             max_entries: int = 3) -> list[Candidate]:
    """Every backend's candidates (see `provmap.partition.rules`), backends in the dict's order.

    Each candidate is convex; all but "whole-model" are connected; "combine" and
    "fusion-pattern" ones also respect `max_size`, `max_exits`, `max_entries` (and `max_depth`
    for "combine").
    A (backend, ops) pair appears once; its `rule` names every rule that proposed it, joined
    by "+" (e.g. "maximal+combine").
    """
    from .rules import candidates_for_backend  # rules imports this module

    out: list[Candidate] = []
    for backend, verdicts in verdicts_by_backend.items():
        out.extend(candidates_for_backend(view, backend, verdicts, max_depth=max_depth,
                                          max_size=max_size, max_exits=max_exits,
                                          max_entries=max_entries))
    return out


# ------------------------------------------------------------------------------------------
# Pruning
# ------------------------------------------------------------------------------------------


@dataclass
class PruneReport:
    before: int
    after: int
    by_rule: dict[str, int] = field(default_factory=dict)  # rule -> candidates it removed
    restored: int = 0  # candidates put back to keep every (node, backend) coverable
    by_backend: dict[str, tuple[int, int]] = field(default_factory=dict)  # before, after

    def __str__(self) -> str:
        rules = ", ".join(f"{k}: -{v}" for k, v in self.by_rule.items() if v) or "nothing"
        extra = f", {self.restored} restored for coverage" if self.restored else ""
        return f"{self.before} -> {self.after} candidates ({rules}{extra})"


def prune(view: GraphView, candidates: Iterable[Candidate],
          mode: str = "safe") -> tuple[list[Candidate], PruneReport]:
    """Remove candidates that cannot improve the search's result; returns (kept, report).

    Run it after constraints are applied (`constraints.filter_candidates`): "which backends can
    take a node" is read from the candidates themselves.  A node is **exclusive** to backend X
    when no candidate of another backend contains it.

    mode="safe" (default), two rules:

    * "duplicate": the same (backend, ops) twice; the first is kept, its rule names merged.
    * "dominated": a multi-op candidate A of backend X is removed when a strictly larger
      candidate B of X contains it and every node of B - A is exclusive to X.  Any plan using A
      must put B - A on X as well, so there is no reason to cut between A and the rest of B;
      by Collage's heuristic (one call of A u B on X is no slower than separate calls of A and
      the rest on X) B serves instead.  This is TVM's "prune non-maximal candidates unless
      their boundary can bridge to another backend", made precise: A is kept as soon as a
      node next to it inside B could go elsewhere.  Removal is transitive and a maximal
      superset is never removed, so every node keeps a candidate for every backend that had
      one.  Single-op candidates are never removed: with them any assignment of nodes to
      backends stays expressible, so pruning can never make the search infeasible.
      When every backend supports every node, nothing is exclusive and this rule removes
      nothing: without prices there is no safe way to rule out a mixed plan.

    mode="collage": TVM's PruneCandidates as written (prune_candidates.cc): repeatedly keep the
    maximal candidates (not strictly inside another candidate of the same backend), and drop
    from the pool every kept candidate that overlaps a different-set kept candidate, until no
    new maximal one appears.  It assumes one large call always beats a split, so with
    all-supported backends it leaves only the whole-model candidates.  Afterwards any (node,
    backend) pair left uncovered gets its single-op candidate back (`restored`).
    """
    cands = list(candidates)
    before = len(cands)
    by_rule: dict[str, int] = {}

    # duplicates
    seen: dict[tuple[str, frozenset], int] = {}
    uniq: list[Candidate] = []
    for c in cands:
        key = (c.backend, c.ops)
        k = seen.get(key)
        if k is None:
            seen[key] = len(uniq)
            uniq.append(c)
        else:
            by_rule["duplicate"] = by_rule.get("duplicate", 0) + 1
            old = uniq[k]
            names = old.rule.split("+") if old.rule else []
            for r in (c.rule.split("+") if c.rule else []):
                if r not in names:
                    names.append(r)
            uniq[k] = Candidate(old.backend, old.ops, "+".join(names))
    cands = uniq
    masks = [mask_of(c.ops) for c in cands]

    # (node, backend) coverage before pruning, and each node's backends.
    takers: dict[int, set[str]] = {}
    for c in cands:
        for i in c.ops:
            takers.setdefault(i, set()).add(c.backend)

    if mode == "safe":
        keep = _prune_dominated(cands, masks, takers)
        by_rule["dominated"] = len(cands) - sum(keep)
        kept = [c for c, k in zip(cands, keep) if k]
        restored = 0
    elif mode == "collage":
        kept_idx = _prune_collage(cands, masks)
        by_rule["collage-nonmaximal"] = len(cands) - len(kept_idx)
        kept_set = set(kept_idx)
        # Restore coverage: every (node, backend) that had a candidate keeps one.
        covered: set[tuple[int, str]] = set()
        for k in kept_set:
            for i in cands[k].ops:
                covered.add((i, cands[k].backend))
        restored = 0
        for k, c in enumerate(cands):
            if k in kept_set or len(c.ops) != 1:
                continue
            (i,) = c.ops
            if (i, c.backend) not in covered:
                kept_set.add(k)
                covered.add((i, c.backend))
                restored += 1
        # A (node, backend) pair with no single-op candidate: keep its smallest candidate.
        for k in sorted(range(len(cands)), key=lambda k: len(cands[k].ops)):
            c = cands[k]
            if k not in kept_set and any((i, c.backend) not in covered for i in c.ops):
                kept_set.add(k)
                restored += 1
                covered.update((i, c.backend) for i in c.ops)
        kept = [cands[k] for k in sorted(kept_set)]
    else:
        raise ValueError(f"prune mode {mode!r}: expected 'safe' or 'collage'")

    by_backend: dict[str, tuple[int, int]] = {}
    for c in cands:
        b, a = by_backend.get(c.backend, (0, 0))
        by_backend[c.backend] = (b + 1, a)
    for c in kept:
        b, a = by_backend[c.backend]
        by_backend[c.backend] = (b, a + 1)
    return kept, PruneReport(before=before, after=len(kept), by_rule=by_rule,
                             restored=restored, by_backend=by_backend)


def _inside_bits(cands: list[Candidate]) -> dict[tuple[str, int], int]:
    """(backend, op node) -> bitset over candidate indices of that backend's candidates
    containing the node.  AND-ing a candidate's entries gives its same-backend supersets."""
    inside: dict[tuple[str, int], int] = {}
    for k, c in enumerate(cands):
        bit = 1 << k
        for i in c.ops:
            key = (c.backend, i)
            inside[key] = inside.get(key, 0) | bit
    return inside


def _supersets(c: Candidate, k: int, inside: dict[tuple[str, int], int]) -> int:
    """Candidates of c's backend containing c, other than c itself (a bitset)."""
    acc = -1
    for i in sorted(c.ops, key=lambda i: inside[(c.backend, i)].bit_count()):
        acc &= inside[(c.backend, i)]
        if acc == 1 << k:
            return 0
    return acc & ~(1 << k)


def _prune_dominated(cands: list[Candidate], masks: list[int],
                     takers: dict[int, set[str]]) -> list[bool]:
    exclusive: dict[str, int] = {}
    for i, bs in takers.items():
        if len(bs) == 1:
            (b,) = bs
            exclusive[b] = exclusive.get(b, 0) | (1 << i)
    inside = _inside_bits(cands)
    keep = [True] * len(cands)
    for k, c in enumerate(cands):
        if len(c.ops) < 2:
            continue
        ex = exclusive.get(c.backend, 0)
        if not ex:
            continue
        a = masks[k]
        for j in bits(_supersets(c, k, inside)):
            if ((masks[j] & ~a) & ~ex) == 0:  # (dedup made masks[j] != a)
                keep[k] = False
                break
    return keep


def _prune_collage(cands: list[Candidate], masks: list[int]) -> list[int]:
    inside = _inside_bits(cands)
    # Same op set, any backend: "equal" for the intersection test.
    same: dict[int, int] = {}
    for k, m in enumerate(masks):
        same[m] = same.get(m, 0) | (1 << k)
    any_backend: dict[int, int] = {}
    for (_, i), b in inside.items():
        any_backend[i] = any_backend.get(i, 0) | b
    supersets = [_supersets(c, k, inside) for k, c in enumerate(cands)]
    pool = (1 << len(cands)) - 1
    pruned = 0
    while True:
        # maximal: no strict superset of the same backend left in the pool
        maximal = 0
        for k in bits(pool):
            if not supersets[k] & pool:
                maximal |= 1 << k
        new = maximal & ~pruned
        if not new:
            break
        pruned |= new
        # Kept candidates that overlap a kept candidate with a different op set (any backend):
        # the search could not use both, so drop them from the pool to let smaller "bridging"
        # ones become maximal in the next round.
        intersecting = 0
        for x in bits(pruned):
            touching = 0
            for i in cands[x].ops:
                touching |= any_backend[i]
            if touching & pruned & ~same[masks[x]]:
                intersecting |= 1 << x
        pool &= ~intersecting
    return list(bits(pruned))
