"""The search the first level falls back to when the shortest path reaches its budget.

Every edge of the state graph covers the first uncovered node, so the position of the first
uncovered node strictly grows along any path: the states fall into n layers that can be visited
in order, each once.  Keeping only the `width` cheapest states of a layer makes the work at most
n x width expansions and the memory at most a few times n x width states, whatever the graph:
bounded by construction, which the shortest path is not (its covered sets alone can be
exponential in a graph's width).  It is not exact: a state cheap so far but with expensive
crossings ahead can push out the one the optimum needed.  It prices the same candidates the
shortest path asks for (those covering a layer's first node), from the same cache.
"""

from __future__ import annotations

import heapq
import itertools

from .cover_states import CoverStates, Label


def beam(states: CoverStates, width: int) -> tuple[Label | None, int, int]:
    """(the cheapest complete state found or None, states expanded, states stored)."""
    width = max(1, width)
    n = states.n
    layers: list[dict | None] = [dict() for _ in range(n + 1)]
    start = states.start()
    layers[0][start.key] = (start, 0)
    tie = itertools.count(1)
    expanded = stored = 0
    for p in range(n):
        layer = layers[p]
        layers[p] = None  # what is kept lives on through the parents of what it reaches
        if not layer:
            continue
        for lab, _ in _cheapest(layer, width):
            expanded += 1
            for key, new, front, codes, total, c, cross, sw in states.successors(lab):
                q = (~new & (new + 1)).bit_length() - 1
                dest = layers[q]
                old = dest.get(key)
                if old is not None and total >= old[0].cost:
                    continue
                dest[key] = (Label(key, new, front, codes, total, lab, c, cross, sw), next(tie))
                stored += 1
                if len(dest) > 4 * width:  # prune as it fills: never more than 4 x width
                    layers[q] = dest = dict((x[0].key, x) for x in _cheapest(dest, width))
    done = layers[n]
    final = min(done.values(), key=lambda x: (x[0].cost, x[1]))[0] if done else None
    return final, expanded, stored


def _cheapest(layer: dict, width: int) -> list:
    """The `width` cheapest states of a layer, first reached first among equals (so a run
    gives the same plan as the last)."""
    return heapq.nsmallest(width, layer.values(), key=lambda x: (x[0].cost, x[1]))
