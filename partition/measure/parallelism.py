"""How many CPUs the moment gives: each CPU's speed on one fixed loop, probed between blocks.

Why: a cloud guest's CPU shares a physical core with another guest's hyperthread, and while that
neighbour is busy ours runs ~1.7x slower -- with nothing in /proc to show it (no steal, no other
process, the load average unchanged), so `contention.Window` cannot see it.  A two-thread library
then waits for its slow thread and a one-thread configuration does not, so a decision between
them measures the moment, not the libraries.  Measured on the 2-core AMD EPYC guest:

* quiet, 2026-11-29 08:05: a 100k-iteration Python loop took 2.5 ms on both CPUs, with bursts of
  0.2-0.6 s where one CPU took 4.0-4.5 ms (sometimes both);
* EfficientNet-B0's end-to-end check, 2026-11-29 ~05:40 (bench/out/user_latency @ 430ca7d): both
  libraries' two-thread plans ran 1.30x and 1.44x their bench time through 24 passes while their
  one-thread configurations ran 0.95-0.98x; the check kept OpenVINO 4.5-11.4% faster, and the
  bench's own paired re-run at a quiet moment found ONNX Runtime 2.0-5.4% faster.

The probe pins this thread to each usable CPU in turn and times the loop a few times (its
fastest run: noise only adds time), ~20 ms in all; the measuring loop calls it in each block's
settle, when nothing of ours runs.  A probe is *uneven* when the slowest CPU took `SLOW_RATIO`
times the fastest one's time; a window is contended when more than `UNEVEN_SHARE_MAX` of its
probes (at least `MIN_PROBES`) were uneven.  The thresholds: see their comments, and the
calibration, `provmap bench parallelism` (bench/out/parallelism/).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

#: A CPU this much slower than the fastest on the same loop is shared with someone: a shared
#: core measured 1.6-1.8x; run-to-run noise of the loop's fastest of three is within 1.05x.
SLOW_RATIO = 1.3
#: The share of uneven probes over which a window is contended.  Quiet, bursts make a few
#: probes uneven (calibration in docs/collage.md, "Contention"); EfficientNet-B0's 1.3-1.44x
#: slowdown of two-thread plans needs one slow CPU about half the time.
UNEVEN_SHARE_MAX = 0.3
#: Fewer probes than this are not judged: a burst of 0.2-0.6 s fills a 1 s window (the probe
#: before a search), and a quiet moment would read as contended.  A decision's round (a block
#: per alternative per pass, 6 passes) and the wait between rounds (2 s) have more.
MIN_PROBES = 10
_LOOP = 100_000


def _loop() -> float:
    t = time.perf_counter()
    s = 0
    for i in range(_LOOP):
        s += i
    return time.perf_counter() - t


def cpu_times(runs: int = 3) -> dict[int, float]:
    """Each usable CPU's fastest of `runs` timings of the loop (s); {} where the thread cannot be
    pinned (not Linux) or only one CPU is usable.  The thread's affinity is restored after."""
    try:
        mine = os.sched_getaffinity(0)
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return {}
    if len(mine) < 2:
        return {}
    out: dict[int, float] = {}
    try:
        for cpu in sorted(mine):
            os.sched_setaffinity(0, {cpu})
            out[cpu] = min(_loop() for _ in range(runs))
    except OSError:  # pragma: no cover - a CPU taken away meanwhile
        return {}
    finally:
        try:
            os.sched_setaffinity(0, mine)
        except OSError:  # pragma: no cover
            pass
    return out


def unevenness(times: dict[int, float]) -> float:
    """The slowest CPU's time over the fastest's (1.0 for fewer than two)."""
    if len(times) < 2 or min(times.values()) <= 0:
        return 1.0
    return max(times.values()) / min(times.values())


#: Our own other threads may run at most this share of a probe's wall time.  Why: a CPU the
#: probe shares with a thread of ours reads as slow as one shared with a neighbour; ONNX
#: Runtime's workers spin on after a run (a probe 1 s after a BERT block: 0.7 of its wall time
#: on another thread of ours, every probe uneven, 1.6-2.9x), and that is not the machine.
OWN_SHARE_MAX = 0.1
#: Tries of a probe our own threads disturbed, 50 ms apart, before it is left out.
OWN_TRIES = 3


def own_cpu_s() -> float | None:
    """CPU seconds the other threads of this process have run (the kernel's schedstat, in ns),
    or None where it cannot be read (not Linux)."""
    me = threading.get_native_id()
    total = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    for t in tasks:
        if int(t) == me:
            continue
        try:
            with open(f"/proc/self/task/{t}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):  # a thread that ended meanwhile
            continue
    return total / 1e9


@dataclass
class Gauge:
    """Probes over one measuring window; `probe` is what the measuring loop calls."""

    ratios: list[float] = field(default_factory=list)
    probe_fn: object = None  # a test's stand-in for cpu_times
    own: int = 0  # probes left out: a thread of ours ran through them (OWN_SHARE_MAX)

    def probe(self) -> None:
        if self.probe_fn is not None:  # a test's stand-in times no CPU: nothing to disturb
            self._count(self.probe_fn())
            return
        for i in range(OWN_TRIES):
            # the window our threads are counted over is the one their counters were read in
            t0 = time.perf_counter()
            before = own_cpu_s()
            times = cpu_times()
            after = own_cpu_s()
            wall = time.perf_counter() - t0
            if before is None or after is None or after - before <= OWN_SHARE_MAX * wall:
                self._count(times)
                return
            if i + 1 < OWN_TRIES:
                time.sleep(0.05)
        self.own += 1

    def _count(self, times: dict) -> None:
        if times:
            self.ratios.append(unevenness(times))

    def uneven(self) -> int:
        return sum(r >= SLOW_RATIO for r in self.ratios)

    def reason(self) -> str | None:
        """Why the window is contended, or None (too few probes, or few uneven)."""
        n, k = len(self.ratios), self.uneven()
        if n < MIN_PROBES or k <= UNEVEN_SHARE_MAX * n:
            return None
        worst = sorted(self.ratios)[-max(1, k // 2)]
        return (f"one CPU ran {worst:.1f}x slower than another in {k} of {n} probes (a "
                "neighbour on its physical core: no process or steal shows it)")

    def to_dict(self) -> dict:
        return {"probes": len(self.ratios), "uneven": self.uneven(),
                "max_ratio": round(max(self.ratios), 3) if self.ratios else None,
                "left_out_ours": self.own}
