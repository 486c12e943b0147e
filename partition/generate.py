"""Candidate partitions for every backend (Collage step 2): `generate` runs each backend's rules.

The rules themselves are in `provmap.partition.rules`, the facts and validity checks they use in
`provmap.partition.opgraph`, and pruning (step 3) in `provmap.partition.prune`.
"""

from __future__ import annotations

from provmap.runtime_module.backend import Support
from provmap.runtime_module.graph_view import GraphView

from .candidate import Candidate
from .rules import candidates_for_backend

__all__ = ["generate"]


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
    out: list[Candidate] = []
    for backend, verdicts in verdicts_by_backend.items():
        out.extend(candidates_for_backend(view, backend, verdicts, max_depth=max_depth,
                                          max_size=max_size, max_exits=max_exits,
                                          max_entries=max_entries))
    return out
