"""The facts every candidate rule and check reads: op-node reachability as bitsets, and the
validity checks a candidate must pass (Collage step 2's vocabulary).

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
  ``Subgraph(view, ops).outputs``, counted without building a Subgraph.  Collage's **taps** (an
  inner value that is consumed inside *and* outside) are exits too, and are counted; `boundary`
  reports them separately.  **entries** are the mirror image: distinct tensors the candidate
  (with its copied helpers) reads from other op nodes or graph inputs; weights do not count.
  "combine" and "fusion-pattern" candidates must have at most ``max_exits`` exits and
  ``max_entries`` entries; "single-op", "maximal" and "whole-model" are exempt (they are needed
  for coverage or are unique).
* **depth**: the longest path inside the candidate, counted in op nodes (a chain of 3 has depth
  3).  Bounded by ``max_depth`` for "combine" only; ``max_size`` bounds the number of op nodes.

It is its own module because both the rules (which propose candidates) and `candidates` (which
runs the rules) read it; with the facts inside `candidates` the two imported each other.
"""

from __future__ import annotations

import weakref
from typing import Iterable, Iterator

from provmap.provenance.util.toposort import toposort
from provmap.runtime_module.graph_view import GraphView

#: One OpGraph per view, shared by every rule and check (computing it is O(nodes^2 / 64)).
_FACTS: "weakref.WeakKeyDictionary[GraphView, OpGraph]" = weakref.WeakKeyDictionary()


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
            self.order = toposort(self.order, lambda i: bits(self.succ[i]))
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
