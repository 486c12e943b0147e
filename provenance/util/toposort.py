"""Kahn's topological sort with a tie-break: the one order for op nodes and for partitions.

The search's op-graph facts (provmap.partition.opgraph) and the executor's partition order
(provmap.runtime_module.plan) each wrote it out; the order matters beyond correctness (partition
names p0, p1... in artifacts, bitset ranks), so both take it from here, ready items smallest key
first.  The importer's order of an unsorted ONNX file (provmap.provenance.ids.topological_order)
is a different order on purpose: depth-first from each node in file order, so it stays its own.
"""

from __future__ import annotations

import heapq
from typing import Callable, Hashable, Iterable, TypeVar

T = TypeVar("T", bound=Hashable)


def toposort(items: Iterable[T], successors: Callable[[T], Iterable[T]],
             key: Callable[[T], object] | None = None) -> list[T]:
    """`items` in a topological order of the edges item -> each of `successors(item)` (all
    within `items`): of the items whose predecessors are all placed, the one with the smallest
    `key` (default: the item itself) comes next; equal keys keep the order `items` gave.

    Items on or after a cycle are left out: a result shorter than `items` means a cycle, and
    the caller, who knows what the items are, names it."""
    items = list(items)
    rank = {x: n for n, x in enumerate(items)}
    key = key or (lambda x: x)
    indeg = dict.fromkeys(items, 0)
    for x in items:
        for y in successors(x):
            indeg[y] += 1
    ready = [(key(x), rank[x], x) for x in items if indeg[x] == 0]
    heapq.heapify(ready)
    out = []
    while ready:
        x = heapq.heappop(ready)[2]
        out.append(x)
        for y in successors(x):
            indeg[y] -= 1
            if indeg[y] == 0:
                heapq.heappush(ready, (key(y), rank[y], y))
    return out
