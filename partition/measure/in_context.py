"""Partition times measured inside the running plan, fed back to the first level's prices.

An isolated price is what a region costs alone: its weights warm in cache, no neighbour's
thread pool still spinning, no layout reorder at its boundary.  Inside the plan it can cost
more (or less).  After the kept plan is chosen, each partition is timed by the executor's
per-partition hook over the same runs a user makes, and the median is stored beside the
isolated price (`CostCache.put_in_context`); the next search that meets the same region on the
same backend, host and options prices it from that (`MeasuredEstimator(in_context=True)`).
Times measured under contention are reported but not stored (`not_stored` says why).
"""

from __future__ import annotations

import statistics
import time

from provmap.partition.measure.contention import MIN_WINDOW_S, Window, acting
from provmap.runtime_module.module import ArtifactModule


#: Warm-up runs, and the shortest measuring window (one shorter cannot be judged for contention).
WARMUP = 3
MIN_S = MIN_WINDOW_S + 0.05


def measure_partitions(artifact, runs: int = 20, warmup: int = WARMUP,
                       min_s: float = MIN_S) -> dict[str, float]:
    """Median seconds of each partition call over at least `runs` end-to-end runs (after
    `warmup`), and for at least `min_s`: a window that short could not be judged for
    contention (partition/measure/contention.py).  `artifact` is the plan the search just built
    in this process: its native code is ours."""
    return {pid: statistics.median(ts)
            for pid, ts in _partition_samples(artifact, runs, warmup, min_s).items()}


def _partition_samples(artifact, runs: int, warmup: int, min_s: float) -> dict[str, list]:
    """Each partition's call times (seconds) over the runs measure_partitions describes."""
    mod = ArtifactModule(artifact, trust=True)
    feeds = mod.random_inputs(0)
    mod.load_runners()
    times: dict[str, list[float]] = {m.id: [] for m in mod.partitions}
    try:
        for _ in range(warmup):
            mod.run(feeds)
        end, n = time.monotonic() + min_s, 0
        while n < runs or time.monotonic() < end:
            mod.run(feeds, on_partition=lambda m, _i, _o, dt: times[m.id].append(dt))
            n += 1
    finally:
        mod.close()
    return {pid: ts for pid, ts in times.items() if ts}


def feed_back(artifact, cache, backends: dict, plan_label: str, runs: int = 20) -> list[dict]:
    """Measure the partitions in context, store them in `cache`, and return one row per
    partition: its isolated price (if the cache has it) beside the in-context time."""
    win = Window()
    samples = _partition_samples(artifact, runs, WARMUP, MIN_S)
    cond = win.stop()
    # times taken under contention are this run's only: never stored as clean (hygiene.py)
    skip = cond.contended and acting()
    rows = []
    for p in artifact.manifest["partitions"]:
        be = backends[p["backend"]]
        ts = samples.get(p["id"])
        if ts is None:
            continue
        sec = statistics.median(ts)
        iso = cache.get(p["key"], be)
        if not skip:  # runs: the samples taken, at least `runs` (the window has a minimum)
            cache.put_in_context(p["key"], be, seconds=sec, runs=len(ts), plan=plan_label,
                                 label=f"{plan_label} {p['id']} ({len(p['ops'])} op(s))")
        rows.append({"partition": p["id"], "backend": p["backend"], "ops": len(p["ops"]),
                     "in_context_ms": sec * 1e3,
                     "isolated_ms": (iso.seconds * 1e3 if iso is not None and iso.seconds
                                     else None),
                     **({"not_stored": "; ".join(cond.reasons)} if skip else {})})
    return rows
