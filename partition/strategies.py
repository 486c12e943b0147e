"""Partitioning strategies that need no measurement: the baselines the Collage search must beat.

`single:<backend>` gives the whole model to one backend (and fails, naming the node, if that
backend cannot take some node).  `greedy:<b1>,<b2>,...` gives each op node to the first backend
in the list that supports it, then grows the largest partitions it can: it walks the graph in a
topological order that stays on the current backend while any node of it is ready, so a branch
the first backend lacks becomes one small partition instead of splitting the whole graph.
"""

from __future__ import annotations

from provmap.provenance.util.errors import ProvmapError
from provmap.runtime_module.backend import Backend, BackendError
from provmap.runtime_module.plan import PartitionSpec, Plan
from provmap.runtime_module.registry import split_outside_brackets, variant_name
from provmap.runtime_module.graph_view import GraphView


def parse_strategy(spec: str) -> tuple[str, list[str]]:
    kind, _, rest = spec.partition(":")
    if rest and any(not x.strip() for x in rest.split(",")) and "[" not in rest:
        raise ProvmapError(f"strategy {spec!r}: an empty backend name (two commas, or a comma at "
                           "either end)")
    try:  # variants: onnxruntime[threads=1;...], spelled canonically
        names = [variant_name(b) for b in split_outside_brackets(rest, ",")]
    except BackendError as e:
        raise ProvmapError(f"strategy {spec!r}: {e}") from None
    if kind == "single" and len(names) == 1:
        return kind, names
    if kind == "greedy" and names:
        if len(set(names)) != len(names):
            raise ProvmapError(f"strategy {spec!r}: a backend is listed twice")
        return kind, names
    if kind == "collage":
        return kind, names
    raise ProvmapError(f"bad strategy {spec!r}: expected single:<backend>, "
                       "greedy:<backend>,<backend>,... or collage")


def _verdicts(view: GraphView, backends: list[Backend]) -> dict[str, dict]:
    return {b.name: b.verdicts(view) for b in backends}


def single(view: GraphView, backend: Backend) -> Plan:
    verdict = backend.verdicts(view)
    for i in view.op_nodes:
        v = verdict.get(i)
        if v is None or not v.ok:
            why = v.reason if v is not None else "no verdict"
            raise ProvmapError(f"single:{backend.name}: {view.describe(i)} is not supported by "
                               f"{backend.name}: {why}")
    parts = [PartitionSpec(backend.name, list(view.op_nodes), why=f"single:{backend.name}")]
    return Plan(strategy=f"single:{backend.name}", partitions=parts if view.op_nodes else [])


def greedy(view: GraphView, backends: list[Backend]) -> Plan:
    verdicts = _verdicts(view, backends)
    names = [b.name for b in backends]
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
            raise ProvmapError(f"greedy:{','.join(names)}: no listed backend supports "
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
            current = PartitionSpec(choice[i], [], why=f"greedy:{','.join(names)}")
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
    return Plan(strategy=f"greedy:{','.join(names)}", partitions=parts,
                info={"fallbacks": fallbacks, "order": names, "decisions": decisions})
