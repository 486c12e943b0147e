"""Partition rules: how one backend's candidates are proposed (Collage's PartitionRule, simplified).

In TVM's Collage a target owns a tree of PartitionRules (patterns, "primitive" ops, a
CombinePartitionRule growing fused groups, OnlyValid filters, ...).  Here every backend gets
the same five rules, applied to the op nodes its verdicts accept ("supported" nodes); a rule
only proposes sets of op node indices, and `candidates_for_backend` deduplicates and checks
them (`provmap.partition.generate` describes convex / connected / exits / depth):

* **single-op**: every supported op node alone.  Always kept (no size/exit limit): it is what
  lets the search give any node to any backend that supports it.
* **combine**: every connected, convex set of supported op nodes with at most `max_size`
  nodes and whose longest internal path has at most `max_depth` nodes, grown one neighbour
  (op successor or predecessor) at a time from every node and deduplicated; emitted when it has
  at least two nodes, at most `max_exits` exits and at most `max_entries` entries (distinct
  tensors it reads from other op nodes or graph inputs; weights and folded constants do not
  count).  The entry bound is what keeps fan-in junctions in check: at each Inception Concat
  every combination of partial branches is a valid set (16.6k sets per backend with 4
  entries, about 1k with at most 3); ResNet-50 and the transformer have none over 3.
  Growing through convex sets only is complete: every connected convex set can be shrunk to
  one node by removing a source or sink that keeps it connected, so each one is reached.
  Exits and entries are not monotone (absorbing a consumer removes an exit), so sets over the
  limits are still grown, just not emitted.  A safety valve stops growing once `ENUM_LIMIT`
  sets were visited (sizes below the one being grown stay complete);
  `OpGraph.memo["combine-truncated"]` then holds the first incomplete size.  At the defaults
  Inception v1, the worst bundled model, grows 17.6k sets before the exit/entry filters.
* **fusion-pattern**: chains typical of vendor fusions, an anchor (Conv, ConvTranspose, MatMul,
  Gemm) followed by elementwise/normalisation/activation nodes (Add, Sum, Mul, Sub, Div,
  BatchNormalization, Relu, Clip, Sigmoid, ...), each link the only op consumer of the previous
  one (no taps).  Every prefix of two or more nodes, up to `max_size` but *not* bounded by
  `max_depth`, so Conv->BatchNormalization->Add->Relu stays one candidate with small depths.
* **whole-model**: all op nodes, when every one is supported (need not be connected).
* **maximal**: the largest regions the backend can take: a topological walk that stays on
  supported nodes while any is ready (the greedy strategy's walk, for one backend), cut into
  runs, each run split into connected pieces.  A run is an interval of a topological order, so
  it is convex, and so is each connected piece of it.  Not bounded by size, depth or exits.

A candidate proposed by several rules appears once, its `rule` listing them ("maximal+combine").
The "combine" enumeration depends only on the supported set, so backends with the same
verdicts share it (memoised on the view's OpGraph).
"""

from __future__ import annotations

from provmap.runtime_module.backend import Support
from provmap.runtime_module.graph_view import GraphView

from .candidate import Candidate
from .opgraph import OpGraph, bits, facts

FUSION_ANCHORS = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm"})
FUSION_FOLLOWERS = frozenset({
    "BatchNormalization", "Add", "Sum", "Mul", "Sub", "Div",
    "Relu", "LeakyRelu", "PRelu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh",
    "Elu", "Selu", "Softplus", "Gelu",
})


def supported_mask(g: OpGraph, verdicts: dict[int, Support]) -> int:
    m = 0
    for i in g.order:
        v = verdicts.get(i)
        if v is not None and v.ok:
            m |= 1 << i
    return m


# -- rules: each returns bitsets (ints) of op nodes ----------------------------------------------

def rule_single_op(g: OpGraph, sup: int, **_) -> list[int]:
    return [1 << i for i in g.order if sup >> i & 1]


def rule_whole_model(g: OpGraph, sup: int, **_) -> list[int]:
    return [g.all] if g.all and (g.all & ~sup) == 0 else []


def rule_maximal(g: OpGraph, sup: int, **_) -> list[int]:
    if not sup:
        return []
    remaining = {i: bin(g.pred[i]).count("1") for i in g.order}
    ready = sorted((i for i, n in remaining.items() if n == 0), key=g.rank.__getitem__)
    runs: list[int] = []
    cur_on = None
    cur = 0
    while ready:
        on = [i for i in ready if (sup >> i & 1) == cur_on] if cur_on is not None else []
        if on:
            i = on[0]
        else:
            # switch: prefer a supported ready node
            sup_ready = [i for i in ready if sup >> i & 1]
            i = sup_ready[0] if sup_ready else ready[0]
            if cur_on and cur:
                runs.append(cur)
            cur_on = bool(sup >> i & 1)
            cur = 0
        ready.remove(i)
        if cur_on:
            cur |= 1 << i
        for j in bits(g.succ[i]):
            remaining[j] -= 1
            if remaining[j] == 0:
                ready.append(j)
        ready.sort(key=g.rank.__getitem__)
    if cur_on and cur:
        runs.append(cur)
    out = []
    for run in runs:
        out.extend(_components(g, run))
    return out


def _components(g: OpGraph, mask: int) -> list[int]:
    comps = []
    left = mask
    while left:
        seen = g.component(left)
        comps.append(seen)
        left &= ~seen
    return comps


def rule_fusion_pattern(g: OpGraph, sup: int, max_size: int, **_) -> list[int]:
    out = []
    for a in g.order:
        if not (sup >> a & 1) or g.op_type[a] not in FUSION_ANCHORS:
            continue
        chain = 1 << a
        cur = a
        size = 1
        while size < max_size:
            outs = g.outs[cur]
            if any(gout for _, _, gout in outs):
                break  # a graph output is a tap
            nxt = g.succ[cur]
            if not nxt or nxt & (nxt - 1):
                break  # no consumer, or several: stop before a tap
            j = nxt.bit_length() - 1
            if not (sup >> j & 1) or g.op_type[j] not in FUSION_FOLLOWERS:
                break
            chain |= nxt
            size += 1
            cur = j
            if g.is_convex(chain):
                out.append(chain)
            else:  # cannot happen for single-consumer links; checked anyway
                break
    return out


#: sets "combine" may visit for one supported set before it stops growing larger ones
ENUM_LIMIT = 400_000


def rule_combine(g: OpGraph, sup: int, max_depth: int, max_size: int, **_) -> list[int]:
    """All connected convex supported sets of 2..max_size nodes with depth <= max_depth.

    Exits are filtered by the caller (they are not monotone under growth).  Memoised on `g`.
    """
    key = ("combine", sup, max_depth, max_size)
    got = g.memo.get(key)
    if got is not None:
        return got
    succ, pred, desc, anc = g.succ, g.pred, g.desc, g.anc
    seen: set[int] = set()
    level: list[tuple[int, int, int, int]] = []  # (mask, desc union, anc union, neighbours)
    for i in g.order:
        if sup >> i & 1:
            seen.add(1 << i)
            level.append((1 << i, desc[i], anc[i], (succ[i] | pred[i]) & sup))
    out: list[int] = []
    size = 1
    truncated = False
    while level and size < max_size and not truncated:
        nxt_level = []
        for m, d, a, nb in level:
            if len(seen) > ENUM_LIMIT:
                g.memo["combine-truncated"] = size + 1  # sets of this size may be missing
                truncated = True
                break
            cand = nb & ~m
            while cand:
                low = cand & -cand
                cand ^= low
                m2 = m | low
                if m2 in seen:
                    continue
                seen.add(m2)
                n = low.bit_length() - 1
                d2 = d | desc[n]
                a2 = a | anc[n]
                if d2 & a2 & ~m2:
                    continue  # not convex: never grown further (see module docstring)
                if g.depth(m2) > max_depth:  # full DP over <= max_size nodes: cheap
                    continue
                nxt_level.append((m2, d2, a2, nb | ((succ[n] | pred[n]) & sup)))
                out.append(m2)
        level = nxt_level
        size += 1
    g.memo[key] = out
    return out


#: application order; it only decides how the merged `rule` string of a candidate reads
_ORDER = ("whole-model", "maximal", "fusion-pattern", "single-op", "combine")
_RULE_FN = {
    "whole-model": rule_whole_model,
    "maximal": rule_maximal,
    "fusion-pattern": rule_fusion_pattern,
    "single-op": rule_single_op,
    "combine": rule_combine,
}
# Rules whose candidates must respect max_exits and max_entries: the bounded ones.
_BOUNDED = ("fusion-pattern", "combine")


def candidates_for_backend(view: GraphView, backend: str, verdicts: dict[int, Support],
                           max_depth: int = 4, max_size: int = 12,
                           max_exits: int = 4, max_entries: int = 3) -> list[Candidate]:
    """`backend`'s candidates from its `verdicts` ({op node index: Support}); see module doc.

    Ordered by (first node, size, nodes) for reproducibility.  Nodes without a verdict count as
    unsupported.
    """
    for name, val in (("max_depth", max_depth), ("max_size", max_size),
                      ("max_exits", max_exits), ("max_entries", max_entries)):
        if not isinstance(val, int) or val < 1:
            raise ValueError(f"{name} must be a positive integer, got {val!r}")
    g = facts(view)
    sup = supported_mask(g, verdicts)
    key = ("candidates", sup, max_depth, max_size, max_exits, max_entries)
    found = g.memo.get(key)
    if found is None:
        found = _propose(g, sup, max_depth, max_size, max_exits, max_entries)
        g.memo[key] = found
    return [Candidate(backend, ops, rule) for ops, rule in found]


def _propose(g: OpGraph, sup: int, max_depth: int, max_size: int, max_exits: int,
             max_entries: int) -> list[tuple[frozenset, str]]:
    found: dict[int, list[str]] = {}
    for rule in _ORDER:
        masks = _RULE_FN[rule](g, sup, max_depth=max_depth, max_size=max_size)
        bounded = rule in _BOUNDED
        for m in masks:
            if bounded:
                if m & (m - 1) == 0:
                    continue  # single nodes belong to "single-op"
                if g.exit_count(m) > max_exits or g.entry_count(m) > max_entries:
                    continue
            names = found.get(m)
            if names is None:
                found[m] = [rule]
            elif rule not in names:
                names.append(rule)
    out = [(frozenset(bits(m)), "+".join(names)) for m, names in found.items()]
    out.sort(key=lambda c: (min(c[0]), len(c[0]), sorted(c[0])))
    return out
