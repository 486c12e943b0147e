"""The second level's last step: run independent partitions of the kept plan at once, if that is
measured faster end to end.

Why.  Serial execution leaves a core idle whenever a partition's library cannot use both (small
ops, fork/join per op), and on 2 cores two libraries each default to 2 threads.  Independent
partitions (Inception's branches, a detector's heads) can run at the same time, each with fewer
threads.  Whether that wins depends on the libraries, the sizes and what else the machine is
doing, so it is measured, never assumed.

How.  When the kept plan has partitions with no data dependency between them
(`runtime_module.schedule.asap_stages`), two schedules are proposed: the earliest-stage
schedule with each backend's own thread count, and the same with the cores split evenly among
the partitions of each concurrent stage (1 thread each for two partitions on 2 cores), for the
backends that take a thread count (`Backend.takes_threads`: ONNX Runtime, OpenVINO, TVM).  Each is the same built artifact under another manifest
(nothing is rebuilt), decided against the incumbent by the one comparison procedure
(partition/decision.py; a concurrent schedule is the more complex plan, so it must earn the
rule's minimum gain).
Every proposal and its numbers go into the report ("schedule_search"), which explain shows.
"""

from __future__ import annotations

import os
import time

from provmap.runtime_module.artifact_edit import with_schedule
from provmap.runtime_module.registry import backend_class
from provmap.runtime_module.schedule import asap_stages, describe, has_independent, \
    make_schedule, split_threads

from .decision import Busy, decide_artifacts
from .measure.evidence import RULE, Rule


def proposals(partitions: list[dict], cores: int) -> list[tuple[str, dict]]:
    """(what, schedule) for each concurrent schedule worth measuring for these partitions."""
    if not has_independent(partitions):
        return []
    stages = asap_stages(partitions)
    takes = {p["id"] for p in partitions if backend_class(p["backend"]).takes_threads()}
    out = [("run independent partitions at once, each backend with its own threads",
            make_schedule(partitions, {}, why="second level: concurrent stages, measured faster "
                                              "end to end"))]
    split = {k: v for k, v in split_threads(stages, cores).items() if k in takes}
    if split:
        out.append((f"run independent partitions at once, {cores} core(s) split among them",
                    make_schedule(partitions, split, why="second level: concurrent stages with "
                                                         "a thread split, measured faster end "
                                                         "to end")))
    return out


def search_schedules(artifact, label: str, report: dict, rule: Rule = RULE,
                     cores: int | None = None, progress=None, wait_s: float = 120.0,
                     accept_contended: bool = False):
    """The kept artifact, under the fastest measured schedule (or as it was); what was measured
    goes to report["schedule_search"]."""
    say = (lambda m: progress(f"collage: {m}")) if progress else (lambda m: None)
    parts = artifact.manifest["partitions"]
    cores = cores or os.cpu_count() or 1
    todo = proposals(parts, cores)
    if not todo:
        report["schedule_search"] = {"start": label, "kept": 0, "trail": [],
                                     "note": "no two partitions are independent"}
        return artifact
    t0 = time.perf_counter()
    inc, inc_label, trail, kept = artifact, label, [], 0
    for what, sched in todo:
        change = f"{what}: {describe(sched)}"
        say(f"schedule: trying {change}")
        cand = with_schedule(artifact, sched)
        try:
            d = decide_artifacts({"incumbent": inc, "proposal": cand}, rule=rule,
                                 wait_s=wait_s, accept_contended=accept_contended,
                                 what="schedule")
        except Busy:
            raise  # a load that outlasted the wait: the compile ends with its one line
        except Exception as e:  # a schedule that fails to run is rejected, never kept
            trail.append({"change": change, "status": "failed", "reason": str(e)})
            continue
        ok, why = d.kept == "proposal", d.why
        trail.append({"change": change, "schedule": sched, "against": inc_label,
                      "incumbent": d.measured.get("incumbent"),
                      "proposal": d.measured.get("proposal"), "versus": d.versus,
                      "passes": d.passes, "status": "kept" if ok else "rejected",
                      "reason": why})
        say(f"schedule: {trail[-1]['status']}: {why}")
        if ok:
            inc, inc_label, kept = cand, describe(sched), kept + 1
    report["schedule_search"] = {"start": label, "kept": kept, "trail": trail,
                                 "cores": cores, "rule": rule.key(),
                                 "seconds": round(time.perf_counter() - t0, 1),
                                 "schedule": inc.manifest.get("schedule")}
    return inc
