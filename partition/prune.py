"""Pruning candidates that cannot matter (Collage step 3), before any is measured.

Measuring is what a cold search spends its time on, so every candidate removed here is seconds
saved; `prune`'s docstring says which candidates are provably useless and which removals are
heuristics (mode "collage")."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from provmap.runtime_module.graph_view import GraphView

from .candidate import Candidate
from .opgraph import bits, mask_of


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
