"""User constraints on the partition search: --pin, --forbid, --cut.

A NODE is named in one of four ways, tried in this order:

* ``re:PATTERN``: every ONNX node whose name fully matches the regular expression
  (``re.fullmatch``; write ``re:.*conv.*`` for "contains conv").  Helper nodes among the matches
  are skipped; matching no op node is an error.
* an ONNX node name (every node with that exact name);
* a node ID (``n`` + hex, as `provmap inspect` prints; `GraphView.node_ids`);
* a Relax expression ID (``e`` + hex): the ONNX node whose converter produced that binding.

Constraints apply to op nodes only.  Naming a helper node (one that computes nothing at run
time: a Constant, a weight generator, shape arithmetic folded at import) is an error, since it
is copied into whichever partition needs it and has no backend of its own.

* ``--pin NODE=BACKEND``: the node runs on BACKEND (candidates of other backends containing it
  are dropped).
* ``--forbid NODE=BACKEND``: the node never runs on BACKEND.
* ``--cut NODE``: the node's output is a partition boundary: no candidate contains both the
  node and one of its op consumers (`GraphView.op_successors`).  The node and its consumers may
  still run on the same backend, as separate partitions.

`parse_constraints` resolves names and refuses contradictions it can see without verdicts
(pinned to two backends, pinned to and forbidden from one backend, every backend forbidden);
`check` adds the ones that need verdicts (pinned to a backend that cannot run the node, or no
allowed backend supports it).  Every error is a ProvmapError naming the node by
`GraphView.describe` and quoting the flag that caused it.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Iterable

from provmap.provenance.util.errors import ProvmapError
from provmap.runtime_module.backend import Support
from provmap.runtime_module.graph_view import GraphView

from .candidate import Candidate
from .constraint_text import check_backend, split_assignment

__all__ = ["Constraints", "allows", "check", "filter_candidates", "parse_constraints",
           "resolve_nodes"]


@dataclass
class Constraints:
    pins: dict[int, str] = field(default_factory=dict)            # op node -> backend
    forbids: dict[int, set[str]] = field(default_factory=dict)    # op node -> backends
    cuts: set[int] = field(default_factory=set)                   # op nodes
    backends: list[str] = field(default_factory=list)
    #: the flag text behind each constraint, for messages: ("pin", node), ("cut", node) or
    #: ("forbid", node, backend) -> e.g. "--pin conv1=tvm"
    origin: dict[tuple, str] = field(default_factory=dict)
    view: GraphView | None = field(default=None, repr=False, compare=False)

    def __bool__(self) -> bool:
        return bool(self.pins or self.forbids or self.cuts)

    def summary(self) -> str:
        parts = []
        if self.pins:
            parts.append(f"{len(self.pins)} pinned")
        if self.forbids:
            parts.append(f"{sum(len(v) for v in self.forbids.values())} forbidden")
        if self.cuts:
            parts.append(f"{len(self.cuts)} cut")
        return ", ".join(parts) or "none"


def resolve_nodes(view: GraphView, token: str, flag: str) -> list[int]:
    """ONNX node indices named by `token` (see module doc); errors name `flag`."""
    token = token.strip()
    if not token:
        raise ProvmapError(f"{flag}: empty node name")
    nodes = view.nodes
    if token.startswith("re:"):
        pattern = token[3:]
        try:
            rx = re.compile(pattern)
        except re.error as e:
            raise ProvmapError(f"{flag}: bad regular expression {pattern!r}: {e}") from None
        hits = [i for i, n in enumerate(nodes) if n.name and rx.fullmatch(n.name)]
        ops = [i for i in hits if view.is_op(i)]
        if not ops:
            if hits:
                raise ProvmapError(f"{flag}: regular expression {pattern!r} matches only nodes "
                                   f"that compute nothing at run time, e.g. "
                                   f"{view.describe(hits[0])}")
            raise ProvmapError(f"{flag}: regular expression {pattern!r} matches no ONNX node "
                               "name (it must match the whole name)")
        return ops
    hits = [i for i, n in enumerate(nodes) if n.name == token]
    if not hits:
        hits = [i for i, nid in enumerate(view.node_ids) if nid == token]
    if not hits:
        hits = [i for i, eids in view.produced.items() if token in eids]
        if not hits and _is_expr_id(view, token):
            raise ProvmapError(f"{flag}: Relax expression {token} is not produced by any ONNX "
                               "node (a graph input or output binding?); name a node instead")
    if not hits:
        names = [n.name for n in nodes if n.name]
        close = difflib.get_close_matches(token, names, n=3)
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise ProvmapError(f"{flag}: no ONNX node is named {token!r} (nor has that node ID or "
                           f"Relax expression ID){hint}")
    helpers = [i for i in hits if not view.is_op(i)]
    if helpers:
        raise ProvmapError(f"{flag}: {view.describe(helpers[0])} computes nothing at run time "
                           "(its value is folded or copied into the partitions that use it), so "
                           "it has no backend and no boundary; constrain the nodes that use it")
    return sorted(hits)


def _is_expr_id(view: GraphView, token: str) -> bool:
    return any(e.id == token for e in view.imported.pmap.exprs)


def parse_constraints(view: GraphView, pins: Iterable[str] = (), forbids: Iterable[str] = (),
                      cuts: Iterable[str] = (), backends: Iterable[str] = ()) -> Constraints:
    """Resolve --pin/--forbid/--cut texts against `view`; refuse what cannot hold."""
    backends = list(backends)
    c = Constraints(backends=backends, view=view)
    for text in pins:
        flag = f"--pin {text}"
        node, backend = split_assignment(text, "--pin")
        check_backend(backend, backends, flag)
        for i in resolve_nodes(view, node, flag):
            old = c.pins.get(i)
            if old is not None and old != backend:
                raise ProvmapError(f"{view.describe(i)} is pinned to two backends: {old} "
                                   f"({c.origin[('pin', i)]}) and {backend} ({flag})")
            c.pins[i] = backend
            c.origin.setdefault(("pin", i), flag)
    for text in forbids:
        flag = f"--forbid {text}"
        node, backend = split_assignment(text, "--forbid")
        check_backend(backend, backends, flag)
        for i in resolve_nodes(view, node, flag):
            c.forbids.setdefault(i, set()).add(backend)
            c.origin.setdefault(("forbid", i, backend), flag)
    for text in cuts:
        flag = f"--cut {text}"
        for i in resolve_nodes(view, text, flag):
            c.cuts.add(i)
            c.origin.setdefault(("cut", i), flag)
    for i, b in c.pins.items():
        if b in c.forbids.get(i, ()):
            raise ProvmapError(f"{view.describe(i)} is both pinned to {b} "
                               f"({c.origin[('pin', i)]}) and forbidden on it "
                               f"({c.origin[('forbid', i, b)]})")
    for i, bs in c.forbids.items():
        if backends and set(backends) <= bs:
            raise ProvmapError(f"{view.describe(i)} is forbidden on every backend "
                               f"({', '.join(sorted(bs))}); nothing could run it")
    return c


def check(constraints: Constraints, verdicts: dict[str, dict[int, Support]],
          view: GraphView | None = None) -> None:
    """Refuse constraints the backends' verdicts make impossible (names node and reason).

    `verdicts` is {backend: Backend.verdicts(view)}; `view` defaults to the one parsed against.
    """
    c = constraints
    view = view if view is not None else c.view
    if view is None:
        raise ValueError("check() needs the GraphView the constraints were parsed against")
    for i, b in sorted(c.pins.items()):
        if b not in verdicts:
            raise ProvmapError(f"{c.origin[('pin', i)]}: backend {b} is not part of the search")
        v = verdicts[b].get(i)
        if v is None or not v.ok:
            why = v.reason if v is not None and v.reason else "no verdict"
            raise ProvmapError(f"{view.describe(i)} is pinned to {b} ({c.origin[('pin', i)]}) "
                               f"but {b} does not support it: {why}")
    for i in view.op_nodes:
        if i in c.pins:
            continue
        forbidden = c.forbids.get(i, set())
        if not forbidden:
            continue
        able = [b for b, vs in verdicts.items()
                if b not in forbidden and vs.get(i) is not None and vs[i].ok]
        if not able:
            flags = sorted({c.origin[("forbid", i, b)] for b in forbidden})
            raise ProvmapError(f"{view.describe(i)}: no allowed backend supports it "
                               f"(forbidden by {', '.join(flags)}; the others cannot run it)")


def allows(constraints: Constraints, candidate: Candidate, view: GraphView) -> tuple[bool, str]:
    """(ok, reason): whether `candidate` respects the constraints; reason names the node."""
    c = constraints
    b = candidate.backend
    for i in sorted(candidate.ops):
        p = c.pins.get(i)
        if p is not None and p != b:
            return False, f"pin: {view.describe(i)} is pinned to {p} ({c.origin[('pin', i)]})"
        if b in c.forbids.get(i, ()):
            return False, (f"forbid: {view.describe(i)} may not run on {b} "
                           f"({c.origin[('forbid', i, b)]})")
    if c.cuts:
        ops = candidate.ops
        for i in sorted(c.cuts & ops):
            inside = view.op_successors(i) & ops
            if inside:
                return False, (f"cut: spans the cut after {view.describe(i)} "
                               f"({c.origin[('cut', i)]}), e.g. into "
                               f"{view.describe(min(inside))}")
    return True, ""


def filter_candidates(constraints: Constraints, candidates: Iterable[Candidate],
                      view: GraphView) -> tuple[list[Candidate], dict[str, int]]:
    """(kept candidates, {"pin"|"forbid"|"cut": how many were dropped for it})."""
    kept: list[Candidate] = []
    dropped: dict[str, int] = {}
    if not constraints:
        return list(candidates), dropped
    for cand in candidates:
        ok, why = allows(constraints, cand, view)
        if ok:
            kept.append(cand)
        else:
            kind = why.split(":", 1)[0]
            dropped[kind] = dropped.get(kind, 0) + 1
    return kept, dropped
