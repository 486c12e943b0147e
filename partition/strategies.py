"""Partitioning strategies that need no measurement: the baselines the Collage search must beat.

`single:<backend>` gives the whole model to one backend (and fails, naming the node, if that
backend cannot take some node).  `greedy:<b1>,<b2>,...` gives each op node to the first backend
in the list that supports it, then grows the largest partitions it can: it walks the graph in a
topological order that stays on the current backend while any node of it is ready, so a branch
the first backend lacks becomes one small partition instead of splitting the whole graph.
"""

from __future__ import annotations

from provmap.provenance.util.errors import ProvmapError
from provmap.runtime_module.backend import Backend
from provmap.runtime_module.plan import PartitionSpec, Plan
from provmap.runtime_module.graph_view import GraphView


def _verdicts(view: GraphView, backends: list[Backend]) -> dict[str, dict]:
    return {b.name: b.verdicts(view) for b in backends}


def single(view: GraphView, backend: Backend) -> Plan:
    label = f"single:{backend.name}"  # the canonical spelling (str of a Strategy)
    verdict = backend.verdicts(view)
    for i in view.op_nodes:
        v = verdict.get(i)
        if v is None or not v.ok:
            why = v.reason if v is not None else "no verdict"
            raise ProvmapError(f"{label}: {view.describe(i)} is not supported by "
                               f"{backend.name}: {why}")
    parts = [PartitionSpec(backend.name, list(view.op_nodes), why=label)]
    return Plan(strategy=label, partitions=parts if view.op_nodes else [])


def greedy(view: GraphView, backends: list[Backend]) -> Plan:
    verdicts = _verdicts(view, backends)
    names = [b.name for b in backends]
    label = f"greedy:{','.join(names)}"
    choice: dict[int, str] = {}
    why: dict[int, str] = {}
    declined: dict[int, dict[str, str]] = {}
    for i in view.op_nodes:
        skipped = []
        for b in names:
            v = verdicts[b].get(i)
            if v is not None and v.ok:
                choice[i] = b
                why[i] = "; ".join(skipped)
                break
            skipped.append(f"{b}: {v.reason if v else 'no verdict'}")
            declined.setdefault(i, {})[b] = v.reason if v else "no verdict"
        else:
            raise ProvmapError(f"{label}: no listed backend supports "
                               f"{view.describe(i)} ({'; '.join(skipped)})")

    # Kahn's algorithm over op nodes, preferring ready nodes on the current partition's backend.
    preds: dict[int, set[int]] = {i: set() for i in view.op_nodes}
    for i in view.op_nodes:
        for j in view.op_successors(i):
            preds[j].add(i)
    remaining = {i: len(p) for i, p in preds.items()}
    succs = {i: view.op_successors(i) for i in view.op_nodes}
    ready = sorted(i for i, n in remaining.items() if n == 0)
    parts: list[PartitionSpec] = []
    current = None
    while ready:
        same = [i for i in ready if current is not None and choice[i] == current.backend]
        if same:
            i = same[0]
        else:
            # Switch backend: prefer the highest-priority backend among ready nodes.
            i = min(ready, key=lambda x: (names.index(choice[x]), x))
            current = PartitionSpec(choice[i], [], why=label)
            parts.append(current)
        ready.remove(i)
        current.ops.append(i)
        for j in succs[i]:
            remaining[j] -= 1
            if remaining[j] == 0:
                ready.append(j)
        ready.sort()
    fallbacks = sorted({f"{view.describe(i)} -> {choice[i]} ({why[i]})"
                        for i in view.op_nodes if why[i]})
    # Per node that did not get the first backend: who declined it and why (explain shows it).
    decisions = [{"node": view.node_ids[i], "node_desc": view.describe(i), "backend": choice[i],
                  "declined_by": declined[i]} for i in view.op_nodes if i in declined]
    return Plan(strategy=label, partitions=parts,
                info={"fallbacks": fallbacks, "order": names, "decisions": decisions})
