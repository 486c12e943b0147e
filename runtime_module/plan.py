"""A partition plan: which backend computes which op nodes.  Strategies and the search emit these.

A plan is valid when every op node is in exactly one partition and the partitions can run one
after another (no cycle through two partitions): the executor runs them in a fixed topological
order, so a cyclic plan is refused here, naming a node on the cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from provmap.provenance.util.errors import ProvmapError
from provmap.provenance.util.toposort import toposort

if TYPE_CHECKING:  # pragma: no cover  (a plan is read with artifacts, which must not import TVM)
    from .graph_view import GraphView


@dataclass
class PartitionSpec:
    backend: str
    ops: list[int]
    id: str = ""
    why: str = ""  # how the strategy chose it (shown by inspect/explain)


@dataclass
class Plan:
    strategy: str
    partitions: list[PartitionSpec]
    info: dict = field(default_factory=dict)  # strategy-specific summary (JSON)

    def signature(self) -> frozenset:
        """What the plan runs where, ignoring partition order and names: equal signatures are
        the same plan (built and measured once)."""
        return frozenset((p.backend, frozenset(p.ops)) for p in self.partitions)

    def backends(self) -> list[str]:
        seen = []
        for p in self.partitions:
            if p.backend not in seen:
                seen.append(p.backend)
        return seen


def order_plan(view: GraphView, plan: Plan) -> Plan:
    """Validate `plan`, sort its partitions topologically and name them p0, p1, ..."""
    owner: dict[int, int] = {}
    for k, p in enumerate(plan.partitions):
        if not p.ops:
            raise ProvmapError(f"plan {plan.strategy}: partition #{k} ({p.backend}) is empty")
        for i in p.ops:
            if not view.is_op(i):
                raise ProvmapError(f"plan {plan.strategy}: {view.describe(i)} computes nothing at "
                                   "run time and cannot be assigned")
            if i in owner:
                raise ProvmapError(f"plan {plan.strategy}: {view.describe(i)} is in two partitions")
            owner[i] = k
    missing = [i for i in view.op_nodes if i not in owner]
    if missing:
        raise ProvmapError(f"plan {plan.strategy}: {view.describe(missing[0])} is in no partition "
                           f"({len(missing)} node(s) uncovered)")
    succ: dict[int, set[int]] = {k: set() for k in range(len(plan.partitions))}
    witness: dict[tuple[int, int], int] = {}
    for i in view.op_nodes:
        for j in view.op_successors(i):
            a, b = owner[i], owner[j]
            if a != b:
                succ[a].add(b)
                witness.setdefault((a, b), j)
    order = toposort(succ, succ.__getitem__, key=lambda k: min(plan.partitions[k].ops))
    if len(order) != len(plan.partitions):
        placed = set(order)
        stuck = [k for k in succ if k not in placed]
        a = stuck[0]
        b = next(x for x in succ[a] if x in stuck)
        raise ProvmapError(f"plan {plan.strategy}: partitions form a cycle (data flows out of "
                           f"the {plan.partitions[a].backend} partition and back into it, e.g. "
                           f"through {view.describe(witness[(a, b)])})")
    parts = []
    for n, k in enumerate(order):
        p = plan.partitions[k]
        parts.append(PartitionSpec(backend=p.backend, ops=sorted(p.ops), id=f"p{n}", why=p.why))
    return Plan(strategy=plan.strategy, partitions=parts, info=dict(plan.info))
