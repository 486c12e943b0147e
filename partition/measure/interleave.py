"""End-to-end latency of several alternatives measured together, so machine noise hits all alike.

Used by the one comparison procedure (partition/decision.py: every decision between plans) and
by the bench suite (report them).  Measured in blocks, not run by run: one backend's lingering worker threads (ONNX
Runtime's pool spins after a run) would otherwise be charged to whichever alternative runs next;
a short settle before each block and a re-warm call absorb that.  Two or more passes over the
blocks spread slow drifts of the machine (thermal, other processes) over every alternative, and
the per-pass medians tell a real difference (same winner in every pass) from noise.

Each alternative can also be measured in a room of its own (`rooms`): loaded before each of its
blocks and closed after, so no other alternative's sessions, thread pools or compiled models
live in the process while it runs -- the way a user runs one artifact.  Why: with every
strategy's sessions loaded at once (the bench's dozen, the end-to-end check's few), MobileNet-v3
measured ORT 8.0 ms against OpenVINO 6.35 in the bench where the search's own check, with four
loaded, had both at 6.1 (2026-11-26); and GPT-2 small's bench held ~10 GB.

A sample is the mean of `k` back-to-back calls, `k` chosen per alternative so that a sample
lasts at least `min_sample_s` (TVM's time_evaluator `number`, timeit's autorange).  Why: below a
millisecond one call's time is mostly timer, scheduler and thread-pool wake-up noise, and its
minimum is a lucky outlier -- two identical 0.1 ms ONNX Runtime artifacts measured 0.06 and
0.10 ms by minimum in one run -- while a mean over a millisecond of calls is steady.  Models
slower than `min_sample_s` keep one call per sample.
"""

from __future__ import annotations

import math
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Mapping

from provmap.runtime_module.backend import percentile


@dataclass
class Latency:
    samples_s: list[float] = field(default_factory=list)
    pass_medians_s: list[float] = field(default_factory=list)
    pass_mins_s: list[float] = field(default_factory=list)  # each pass's fastest sample
    first_call_s: float = 0.0
    capped: bool = False  # far slower than the fastest: measured a few times only
    calls_per_sample: int = 1  # each sample is the mean of this many back-to-back calls

    def summary(self) -> dict:
        s = sorted(self.samples_s)
        med = statistics.median(s)
        p90 = percentile(s, 0.9)
        return {"median_ms": med * 1e3, "p90_ms": p90 * 1e3, "min_ms": s[0] * 1e3,
                "spread": (p90 - s[0]) / med if med > 0 else 0.0, "runs": len(s),
                "pass_medians_ms": [m * 1e3 for m in self.pass_medians_s],
                "capped": self.capped, "calls_per_sample": self.calls_per_sample}


def brief(lat: Mapping[str, Latency]) -> dict:
    """What a decision's record keeps of each measured alternative (explain prints it)."""
    out = {}
    for k, v in lat.items():
        s = v.summary()  # sorts the samples: once per alternative
        out[k] = {n: s[n] for n in ("median_ms", "min_ms", "pass_medians_ms")}
    return out


def measure_interleaved(fns: Mapping[str, Callable[[], object]], repeats: int = 20,
                        passes: int = 2, warmup: int = 3, settle_s: float = 0.2,
                        min_block_s: float = 0.5, max_block_runs: int = 250,
                        slow_factor: float = 10.0, slow_budget_s: float = 10.0,
                        never_cap: tuple = (), min_sample_s: float = 1e-3,
                        progress=None, rooms: Mapping[str, tuple] | None = None,
                        alternate: bool = False,
                        between: Callable[[], object] | None = None) -> dict[str, Latency]:
    """Latency of each zero-argument callable.

    Each gets 1 + `warmup` calls, then `passes` rounds of one block each (at least repeats/passes
    samples and `min_block_s` seconds, at most `max_block_runs` samples; a sample is the mean of
    enough calls to last `min_sample_s`, see the module's docstring).  An alternative whose fastest
    warm-up call is over `slow_factor` x the fastest one's (untuned TVM next to ONNX Runtime) is not
    worth that: it gets as many runs as fit in `slow_budget_s` (at least 3, one pass) and is
    marked `capped`, unless its key is in `never_cap`.

    `rooms` maps a key to (open, close): open() before each of that alternative's warm-ups and
    blocks, close() after (see the module's docstring); keys without a room stay loaded.
    `between` is called in each block's settle, when nothing measured runs (the parallelism
    gauge's probe, partition/measure/parallelism.py).
    """
    out = {k: Latency() for k in fns}
    for k, f in fns.items():
        with _room(rooms, k):
            f()  # the first run pays lazy compilation and allocation
            best = float("inf")
            for _ in range(max(1, warmup)):  # the fastest warm-up call: one slow call is noise
                t = time.perf_counter()
                f()
                best = min(best, time.perf_counter() - t)
        out[k].first_call_s = best
    fastest = min(v.first_call_s for v in out.values())
    slow = {k for k, v in out.items()
            if v.first_call_s > slow_factor * fastest and k not in never_cap}
    for k in slow:
        n = max(3, min(repeats, int(slow_budget_s / max(out[k].first_call_s, 1e-9))))
        if progress:
            progress(f"{k} is {out[k].first_call_s / fastest:.1f}x slower than the fastest in "
                     f"warm-up; measured {n} times")
        out[k].capped = True
        with _room(rooms, k):
            fns[k]()
            for _ in range(n):
                t = time.perf_counter()
                fns[k]()
                out[k].samples_s.append(time.perf_counter() - t)
        out[k].pass_medians_s.append(statistics.median(out[k].samples_s))
        out[k].pass_mins_s.append(min(out[k].samples_s))
    for k, v in out.items():
        if k not in slow and v.first_call_s > 0:
            v.calls_per_sample = max(1, math.ceil(min_sample_s / v.first_call_s))
    per_block = max(repeats // passes, 1)
    for p in range(passes):
        order = list(fns.items())
        if alternate and p % 2:
            order.reverse()
        for k, f in order:
            if k in slow:
                continue
            n = out[k].calls_per_sample
            calls = range(n)
            with _room(rooms, k):
                # the gauge's probe (~20 ms) inside the settle, first: the block still
                # starts after a quiet gap, and measuring costs no more than before it
                t_settle = time.perf_counter()
                if between is not None:
                    between()
                time.sleep(max(0.0, settle_s - (time.perf_counter() - t_settle)))
                for _ in range(1 if rooms is None or k not in rooms else max(1, warmup)):
                    f()  # re-warm after the previous block (a fresh room: its first calls)
                block = []
                start = time.perf_counter()
                while len(block) < per_block or (time.perf_counter() - start < min_block_s
                                                 and len(block) < max_block_runs):
                    t = time.perf_counter()
                    for _ in calls:
                        f()
                    block.append((time.perf_counter() - t) / n)
            out[k].samples_s.extend(block)
            out[k].pass_medians_s.append(statistics.median(block))
            out[k].pass_mins_s.append(min(block))
    return out


@contextmanager
def _room(rooms, key):
    """Open `key`'s room for the block inside, close it after (a no-op for keys without one)."""
    room = (rooms or {}).get(key)
    if room is None:
        yield
        return
    room[0]()
    try:
        yield
    finally:
        room[1]()


@contextmanager
def artifact_calls(artifacts: Mapping[str, object], point: str = "opt",
                   one_at_a_time: bool = True):
    """(label -> zero-argument call, label -> room or None) over built artifacts (Artifact
    objects), each called on the first one's seeded random inputs at the profile's `point`;
    closed on leaving.  Each is loaded for its own blocks and closed after (`one_at_a_time`,
    see the module's docstring), so a plan is priced as it will run: alone in its process.
    What every measurement of whole artifacts opens (measure_artifacts, partition/decision.py)."""
    from provmap.runtime_module import compile_cache
    from provmap.runtime_module.module import ArtifactModule

    # Each room loads its plan again: a library may keep what it compiled for the next load
    # in a directory of this measurement's own (compile_cache).
    with compile_cache.scratch():
        # Built by this process (the search's alternatives): their native code is our own.
        mods = {k: ArtifactModule(a, trust=True) for k, a in artifacts.items()}
        try:
            feeds = next(iter(mods.values())).random_inputs(0, point)  # a profile's point
            rooms = ({k: (m.load_runners, m.close) for k, m in mods.items()} if one_at_a_time
                     else None)
            if rooms is None:
                for m in mods.values():
                    m.load_runners()
            yield {k: (lambda m=m: m.run(feeds)) for k, m in mods.items()}, rooms
        finally:
            for m in mods.values():
                m.close()


def measure_artifacts(artifacts: Mapping[str, object], one_at_a_time: bool = True,
                      point: str = "opt", **options) -> dict[str, Latency]:
    """`measure_interleaved` over built artifacts (`artifact_calls`); `options` go to
    measure_interleaved."""
    with artifact_calls(artifacts, point, one_at_a_time) as (fns, rooms):
        return measure_interleaved(fns, rooms=rooms, **options)
