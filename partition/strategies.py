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


def _untyped_units(view: GraphView, names: list[str], verdicts: dict[str, dict],
                   choice: dict[int, str], moved: dict[int, str] | None = None
                   ) -> list[list[int]]:
    """Op nodes joined by a tensor no inference types, as units greedy never cuts, in order.

    A partition boundary needs the tensor's type (common_old.onnx's Casts after com.microsoft
    DynamicQuantizeLSTM have none: ONNX's and ONNX Runtime's inference both give up there), so
    the producer and the consumers of such a tensor go together, with every node on a path
    between them (a unit that left one out could not run before or after it), on the first
    listed backend that takes them all; `choice` is updated in place.  Nodes a unit cannot
    stay together on (no backend takes them all) are left alone: the build then names the
    tensor as before.  `moved` receives node -> the backend it would have had alone.
    """
    order = {i: k for k, i in enumerate(view.op_nodes)}
    parent = {i: i for i in view.op_nodes}

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in view.op_nodes:
        for o in view.nodes[i].output:
            if not o or view.known(o) is not None or o in view.initializers:
                continue
            for j in view.consumers.get(o, ()):
                if j in order:
                    parent[find(j)] = find(i)
    groups: dict[int, set[int]] = {}
    for i in view.op_nodes:
        groups.setdefault(find(i), set()).add(i)
    succs = {i: view.op_successors(i) for i in view.op_nodes}
    taken: set[int] = set()
    units: list[set[int]] = []
    moved = moved if moved is not None else {}
    joined = sorted((g for g in groups.values() if len(g) > 1),
                    key=lambda g: min(order[i] for i in g))
    for members in joined:
        members = _convex(members, succs, order) - taken
        ok = [b for b in names if all(verdicts[b].get(i) is not None and verdicts[b][i].ok
                                      for i in members)]
        if not ok:
            continue
        for i in members:
            if choice[i] != ok[0]:
                moved[i] = choice[i]
            choice[i] = ok[0]
        taken |= members
        units.append(members)
    units += [{i} for i in view.op_nodes if i not in taken]
    return [sorted(u, key=order.__getitem__) for u in units]


def _convex(members: set[int], succs: dict[int, set[int]], order: dict[int, int]) -> set[int]:
    """`members` with every node both downstream of one of them and upstream of another."""
    down: set[int] = set()
    stack = list(members)
    while stack:
        for j in succs[stack.pop()]:
            if j not in down:
                down.add(j)
                stack.append(j)
    last = max(order[i] for i in members)
    preds: dict[int, set[int]] = {}
    for i, js in succs.items():
        for j in js:
            preds.setdefault(j, set()).add(i)
    up: set[int] = set()
    stack = list(members)
    while stack:
        for j in preds.get(stack.pop(), ()):
            if j not in up and order[j] <= last:
                up.add(j)
                stack.append(j)
    return members | (down & up)


def _grow(view: GraphView, names: list[str], choice: dict[int, str], label: str,
          units: list[list[int]]) -> list[PartitionSpec]:
    """Kahn's algorithm over units (one op node, or nodes joined by untyped tensors), preferring
    ready units on the current partition's backend."""
    unit_of = {i: k for k, u in enumerate(units) for i in u}
    preds: dict[int, set[int]] = {k: set() for k in range(len(units))}
    for i in view.op_nodes:
        for j in view.op_successors(i):
            if unit_of[i] != unit_of[j]:
                preds[unit_of[j]].add(unit_of[i])
    succs: dict[int, set[int]] = {k: set() for k in preds}
    for k, ps in preds.items():
        for p in ps:
            succs[p].add(k)
    remaining = {k: len(p) for k, p in preds.items()}
    order = {i: n for n, i in enumerate(view.op_nodes)}
    first = {k: min(order[i] for i in u) for k, u in enumerate(units)}
    backend = {k: choice[u[0]] for k, u in enumerate(units)}
    ready = sorted((k for k, n in remaining.items() if n == 0), key=first.__getitem__)
    parts: list[PartitionSpec] = []
    current = None
    done = 0
    while ready:
        same = [k for k in ready if current is not None and backend[k] == current.backend]
        if same:
            k = same[0]
        else:
            # Switch backend: prefer the highest-priority backend among ready units.
            k = min(ready, key=lambda x: (names.index(backend[x]), first[x]))
            current = PartitionSpec(backend[k], [], why=label)
            parts.append(current)
        ready.remove(k)
        current.ops.extend(units[k])
        done += 1
        for j in succs[k]:
            remaining[j] -= 1
            if remaining[j] == 0:
                ready.append(j)
        ready.sort(key=first.__getitem__)
    if done < len(units):  # two units each upstream of the other: grow node by node instead
        return _grow(view, names, choice, label, [[i] for i in view.op_nodes])
    return parts


def plan_from_choice(view: GraphView, choice: dict[int, str], order: list[str],
                     label: str) -> list[PartitionSpec]:
    """Partitions for a given backend per op node, in run order, as few switches as Kahn's
    order finds (the current backend's ready nodes first, then `order`'s priority): greedy's
    own grouping, for callers that chose the backends another way (workbench/oracle_plan.py)."""
    return _grow(view, order, choice, label, [[i] for i in view.op_nodes])


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

    moved: dict[int, str] = {}
    parts = _grow(view, names, choice, label,
                  _untyped_units(view, names, verdicts, choice, moved))
    for i, alone in moved.items():
        note = f"{alone}: kept with the nodes it shares an untyped tensor with"
        why[i] = "; ".join(x for x in (why[i], note) if x)
        declined.setdefault(i, {})[alone] = note
    fallbacks = sorted({f"{view.describe(i)} -> {choice[i]} ({why[i]})"
                        for i in view.op_nodes if why[i]})
    # Per node that did not get the first backend: who declined it and why (explain shows it).
    decisions = [{"node": view.node_ids[i], "node_desc": view.describe(i), "backend": choice[i],
                  "declined_by": declined[i]} for i in view.op_nodes if i in declined]
    return Plan(strategy=label, partitions=parts,
                info={"fallbacks": fallbacks, "order": names, "decisions": decisions})
