"""Which partitions of an artifact may run at once, and with how many threads each.

Why.  The executor ran partitions one after another, each backend with its own default thread
pool (on a 2-core host, two threads each).  Independent partitions (Inception's branches, a
detector's heads, a transformer's parallel projections) can instead run at the same time, each
with fewer threads: two one-thread partitions side by side keep both cores busy without the
fork/join of a two-thread pool per op.  Whether that is faster is measured (the Collage second
level, `provmap.partition.schedule_search`), never assumed; serial stays the default.

The schedule (manifest key "schedule", absent for serial):

    {"stages": [["p0"], ["p1", "p2"], ["p3"]], "threads": {"p1": 1, "p2": 1}, "why": "..."}

Stages run in order; the partitions of one stage run concurrently (a thread pool in the
executor), and a stage starts when every partition of the previous one has finished (a barrier:
simple, and a failure never leaves work running behind the error).  A partition may read only
graph inputs, constants and outputs of earlier stages.  `threads` gives a partition's intra-op
thread count, handed to its backend when the partition is loaded (ONNX Runtime
`intra_op_num_threads`, OpenVINO `INFERENCE_NUM_THREADS`: the backends' `threads` option); a
partition not named keeps its backend's options.
"""

from __future__ import annotations

from provmap.provenance.util.errors import ProvmapError


def _producers(partitions: list[dict]) -> dict[str, str]:
    return {t["name"]: p["id"] for p in partitions for t in p["outputs"]}


def dependencies(partitions: list[dict]) -> dict[str, set[str]]:
    """Partition id -> ids of the partitions whose outputs it reads (manifest partitions)."""
    prod = _producers(partitions)
    return {p["id"]: {prod[t["name"]] for t in p["inputs"] if t["name"] in prod} - {p["id"]}
            for p in partitions}


def asap_stages(partitions: list[dict]) -> list[list[str]]:
    """Each partition in the earliest stage its inputs allow (stage = 1 + its latest
    producer's), in execution order within a stage."""
    deps = dependencies(partitions)
    level: dict[str, int] = {}
    for p in partitions:  # manifest order is topological
        level[p["id"]] = 1 + max((level[d] for d in deps[p["id"]]), default=-1)
    stages: list[list[str]] = [[] for _ in range(1 + max(level.values(), default=-1))]
    for p in partitions:
        stages[level[p["id"]]].append(p["id"])
    return stages


def has_independent(partitions: list[dict]) -> bool:
    """Whether any two partitions could run at once."""
    return any(len(s) > 1 for s in asap_stages(partitions))


def check_schedule(partitions: list[dict], schedule: dict) -> None:
    """Refuse a schedule that does not cover every partition once, or runs a partition no
    later than one it reads from; one line naming the partition."""
    ids = [p["id"] for p in partitions]
    stages = schedule.get("stages")
    if not isinstance(stages, list) or not all(isinstance(s, list) and s for s in stages):
        raise ProvmapError("schedule: 'stages' must be a list of non-empty lists of partition ids")
    seen: dict[str, int] = {}
    for k, stage in enumerate(stages):
        for pid in stage:
            if pid not in ids:
                raise ProvmapError(f"schedule: stage {k} names {pid!r}, which is no partition "
                                   f"(partitions: {', '.join(ids)})")
            if pid in seen:
                raise ProvmapError(f"schedule: partition {pid} is in stages {seen[pid]} and {k}")
            seen[pid] = k
    missing = [p for p in ids if p not in seen]
    if missing:
        raise ProvmapError(f"schedule: partition {missing[0]} is in no stage")
    for pid, deps in dependencies(partitions).items():
        for d in sorted(deps):
            if seen[d] >= seen[pid]:
                raise ProvmapError(f"schedule: partition {pid} (stage {seen[pid]}) reads an "
                                   f"output of {d} (stage {seen[d]}): it must run in a later "
                                   "stage")
    threads = schedule.get("threads") or {}
    if not isinstance(threads, dict):
        raise ProvmapError("schedule: 'threads' must map partition ids to thread counts")
    for pid, n in threads.items():
        if pid not in seen:
            raise ProvmapError(f"schedule: threads names {pid!r}, which is no partition")
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ProvmapError(f"schedule: threads for {pid} must be an integer >= 1, got {n!r}")


def make_schedule(partitions: list[dict], threads: dict | None = None, why: str = "",
                  stages: list[list[str]] | None = None) -> dict:
    """A checked schedule: `stages` (default: `asap_stages`) and per-partition threads."""
    sched = {"stages": [list(s) for s in (stages or asap_stages(partitions))],
             "threads": {k: int(v) for k, v in (threads or {}).items()}}
    if why:
        sched["why"] = why
    check_schedule(partitions, sched)
    return sched


def is_concurrent(schedule: dict | None) -> bool:
    return bool(schedule) and any(len(s) > 1 for s in schedule["stages"])


def describe(schedule: dict | None) -> str:
    """One line: "serial" or "p0 | p1+p2 | p3 (threads p1=1, p2=1)"."""
    if not schedule:
        return ("serial (one partition at a time, each backend with the threads its options "
                "set, else the library default)")
    text = " | ".join("+".join(s) for s in schedule["stages"])
    th = schedule.get("threads") or {}
    if th:
        text += " (threads " + ", ".join(f"{k}={v}" for k, v in sorted(th.items())) + ")"
    if not is_concurrent(schedule):
        text = "serial: " + text
    return text


def split_threads(stage_ids: list[list[str]], cores: int) -> dict[str, int]:
    """An even split of `cores` among the partitions of each concurrent stage (at least 1)."""
    out = {}
    for s in stage_ids:
        if len(s) > 1:
            for pid in s:
                out[pid] = max(1, cores // len(s))
    return out


def check_runner_names(where: str, partitions, stages, produced: set) -> None:
    """The names a partition's loaded code reads and writes come from its blob, not from the
    manifest the schema checked: a stranger's blob naming a tensor that nothing before it
    produces failed deep in the run with a KeyError.  Each name is checked against the
    partition's manifest tensors and against what graph inputs, constants and earlier stages
    produce (`produced`, updated here)."""
    from .schema_base import _short

    for stage in stages:
        made = set()
        for k in stage:
            m = partitions[k]
            r = m.runner
            declared_in = {t["name"] for t in m.info["inputs"]}
            declared_out = {t["name"] for t in m.info["outputs"]}
            for n in r.input_names:
                if n not in declared_in or n not in produced:
                    raise ProvmapError(
                        f"{where}: partition {m.id}'s code reads tensor {_short(n)}, "
                        + ("which is not among its manifest inputs" if n not in declared_in
                           else "which no graph input, constant or earlier partition produces")
                        + "; the artifact is inconsistent")
            for n in r.output_names:
                if n not in declared_out:
                    raise ProvmapError(
                        f"{where}: partition {m.id}'s code writes tensor {_short(n)}, which is "
                        "not among its manifest outputs; the artifact is inconsistent")
            made.update(r.output_names)
        produced |= made
