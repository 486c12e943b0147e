"""Is the machine busy while we measure?  Contention detection, as pyperf and Google Benchmark do it.

Why: a plan decided while another process holds a core is a different plan.  A two-thread
library loses its second core while a one-thread variant does not, so interleaving the
alternatives does not make the comparison fair; measured (issue 28): with one CPU-bound process
running, Collage kept plans that measured 1.48x and 1.53x the best single backend on a quiet
machine.  So every measuring phase (candidate prices, the end-to-end check, the second level,
bench's latency runs) records the conditions it ran under, and says so when they were bad.

What is read, Linux only (elsewhere `Conditions.known` is False and nothing is flagged):

* `/proc/stat`: busy (non-idle) and steal jiffies of the CPUs this process may run on
  (`os.sched_getaffinity`: a neighbour on a CPU we cannot use does not slow us);
* `/proc/<pid>/stat` of this process and every live descendant (the measuring worker, spawned
  tools): their user+system time, plus what their reaped children used;
* `/proc/loadavg`'s one-minute load, against the CPUs this process may use
  (`os.sched_getaffinity`).

Over a window, `others_cores` = (busy - steal - this tree's CPU) / wall: how many of our CPUs
other processes kept busy while we measured.  That is the direct signal; the load average is a
one-minute mean (a hog started 2 s ago hardly shows in it, one that stopped a minute ago still
does) and counts our own threads (a search's own thread pools raise it), so it is recorded, and
judges only a window too short for the counters.  The spread of the samples taken in the
window, (p90 - min) / median, is the third signal: it catches what the counters cannot see
(frequency changes, a hypervisor's neighbours that do not show as steal).  The fourth is the
parallelism gauge (partition/measure/parallelism.py): each CPU's speed on one loop, probed
between measuring blocks and in `wait_for_quiet`, for a CPU whose physical core a neighbour
shares -- it runs ~1.7x slower and nothing above shows it.

`PROVMAP_CONTENTION=ignore` keeps the detection and the record but turns off what the callers
do about it (re-measuring, pausing, refusing to cache): for a machine that is always busy and
accepted as such, and for the test suite, whose plumbing tests run beside other jobs.

Thresholds (`judge`): others above 0.3 CPU (a CPU-bound neighbour reads 0.9-1.0), steal above
5%, spread above 0.75 (the last full bench on this 2-core host, 2026-11-24, had rows of
two-thread libraries on sub-millisecond models up to 0.62, and one outlier at 1.19); load above
CPUs + 1 only where the counters cannot judge.  Jiffies tick at 100 Hz, so a window under
`MIN_WINDOW_S` is not judged by the counters (its others_cores is +- 0.2 CPU of quantization).
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field

from provmap.provenance.util.errors import ProvmapError

from .parallelism import Gauge

OTHERS_MAX_CORES = 0.3
STEAL_MAX_SHARE = 0.05
LOAD_OVER_CORES = 1.0
SPREAD_MAX = 0.75
MIN_WINDOW_S = 0.2
GAUGE_EVERY_S = 0.1

try:
    _TCK = os.sysconf("SC_CLK_TCK")
except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
    _TCK = 100


class Busy(ProvmapError):
    """Another process held a CPU through the wait for quiet: the compile ends with this line
    (partition/measure/hygiene.py before the search, partition/decision.py within one)."""


def acting() -> bool:
    """Whether callers act on contention (see PROVMAP_CONTENTION in the module doc)."""
    return os.environ.get("PROVMAP_CONTENTION", "act").strip().lower() != "ignore"


def usable_cores() -> int:
    """CPUs this process may run on (a taskset or cgroup cpuset narrows os.cpu_count())."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class Snapshot:
    wall: float
    busy: int     # non-idle jiffies over all CPUs (steal included)
    total: int
    steal: int
    ours: int     # jiffies of this process tree
    load1: float
    known: bool   # /proc was readable


def _proc_tree_jiffies(root: int) -> int:
    """user+system time of `root` and its live descendants, with their reaped children's."""
    stats: dict[int, tuple[int, int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                text = f.read()
        except OSError:
            continue  # exited meanwhile
        rest = text[text.rfind(")") + 2:].split()  # the command name may hold spaces
        try:  # fields after the name: state ppid ... utime(12) stime(13) cutime(14) cstime(15)
            stats[int(name)] = (int(rest[1]), sum(int(x) for x in rest[11:15]))
        except (IndexError, ValueError):
            continue
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, todo, seen = 0, [root], set()
    while todo:
        pid = todo.pop()
        if pid in seen or pid not in stats:
            continue
        seen.add(pid)
        total += stats[pid][1]
        todo.extend(children.get(pid, ()))
    return total


def _affinity() -> set[int] | None:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return None


def _cpu_jiffies() -> list[int]:
    """/proc/stat's counters summed over the CPUs this process may run on (a neighbour busy on
    a CPU we cannot use does not slow us); all CPUs if the per-CPU lines cannot be matched."""
    mine = _affinity()
    total, per = None, []
    with open("/proc/stat") as f:
        for line in f:
            if not line.startswith("cpu"):
                break
            head, *vals = line.split()
            vals = [int(x) for x in vals]
            if head == "cpu":
                total = vals
            elif mine is None or int(head[3:]) in mine:
                per.append(vals)
    if not per or mine is None or len(per) != len(mine):
        return total
    return [sum(col) for col in zip(*per)]


def snapshot(root: int | None = None) -> Snapshot:
    now = time.monotonic()
    try:
        cpu = _cpu_jiffies()
        with open("/proc/loadavg") as f:
            load1 = float(f.read().split()[0])
        ours = _proc_tree_jiffies(os.getpid() if root is None else root)
    except (OSError, ValueError, IndexError):
        return Snapshot(now, 0, 0, 0, 0, 0.0, False)
    # user nice system idle iowait irq softirq steal [guest guest_nice: already in user/nice]
    idle = cpu[3] + (cpu[4] if len(cpu) > 4 else 0)
    busy = sum(cpu[:8]) - idle
    return Snapshot(now, busy, sum(cpu[:8]), cpu[7] if len(cpu) > 7 else 0, ours, load1, True)


@dataclass
class Conditions:
    """What a measuring window ran under, and whether that was contended (see the module doc)."""

    seconds: float = 0.0
    cores: int = 1
    load1: float = 0.0
    others_cores: float = 0.0
    ours_cores: float = 0.0
    steal_share: float = 0.0
    spread: float | None = None
    known: bool = False
    contended: bool = False
    reasons: list[str] = field(default_factory=list)
    parallelism: dict | None = None  # the gauge's probes, where it ran

    def to_dict(self) -> dict:
        d = asdict(self)
        if d["parallelism"] is None:
            del d["parallelism"]  # only windows the gauge probed carry it
        for k in ("seconds", "load1", "others_cores", "ours_cores", "steal_share", "spread"):
            if d[k] is not None:
                d[k] = round(d[k], 3)
        return d

    def line(self, what: str = "measuring") -> str:
        """One line for stderr."""
        if not self.contended:
            return f"{what}: no contention (others used {self.others_cores:.2f} of " \
                   f"{self.cores} CPUs, load {self.load1:.2f})"
        return f"{what} ran under contention: {'; '.join(self.reasons)}"


def judge(cores: int, load1: float, others_cores: float, steal_share: float,
          spread: float | None = None, seconds: float = 1.0, known: bool = True,
          ours_cores: float = 0.0) -> Conditions:
    """The verdict from the measured quantities (a pure function: tested with chosen inputs)."""
    c = Conditions(seconds=seconds, cores=cores, load1=load1, others_cores=others_cores,
                   ours_cores=ours_cores, steal_share=steal_share, spread=spread, known=known)
    if known and seconds >= MIN_WINDOW_S:
        if others_cores > OTHERS_MAX_CORES:
            c.reasons.append(f"other processes used {others_cores:.2f} of {cores} CPUs")
        if steal_share > STEAL_MAX_SHARE:
            c.reasons.append(f"the hypervisor stole {steal_share:.0%} of CPU time")
    elif known and load1 > cores + LOAD_OVER_CORES:  # the counters cannot tell: the load may
        c.reasons.append(f"load average {load1:.2f} on {cores} CPUs")
    if spread is not None and spread > SPREAD_MAX:
        c.reasons.append(f"samples spread {spread:.2f} ((p90 - min) / median)")
    c.contended = bool(c.reasons)
    return c


def between(a: Snapshot, b: Snapshot, spread: float | None = None) -> Conditions:
    """The conditions of the window from snapshot `a` to snapshot `b`."""
    wall = max(b.wall - a.wall, 1e-9)
    cores = usable_cores()
    if not (a.known and b.known) or b.total <= a.total:
        return judge(cores, b.load1, 0.0, 0.0, spread, wall, known=False)
    per_cpu = (b.total - a.total) / cores  # jiffies one of our CPUs had in the window
    steal = b.steal - a.steal
    ours = max(b.ours - a.ours, 0)
    others = max((b.busy - a.busy) - steal - ours, 0)
    return judge(cores, b.load1, others / per_cpu, steal / (b.total - a.total), spread, wall,
                 ours_cores=ours / per_cpu)


def spread_of(samples) -> float | None:
    """(p90 - min) / median, the spread every provmap timing reports."""
    s = sorted(samples)
    if len(s) < 3 or s[len(s) // 2] <= 0:
        return None
    p90 = s[min(len(s) - 1, int(round(0.9 * (len(s) - 1))))]
    return (p90 - s[0]) / s[len(s) // 2]


class Window:
    """A measuring window: `Window()` starts it, `stop(samples)` returns its Conditions."""

    def __init__(self):
        self.start = snapshot()

    def stop(self, samples=None) -> Conditions:
        return between(self.start, snapshot(), spread_of(samples) if samples else None)


class RecentWindow(Window):
    """A window that, when it ends shorter than `MIN_WINDOW_S`, is judged from an earlier start
    (a snapshot kept from a previous recent window, at most `reach_s` old): short measurements
    in a row (small candidates, each a few ms) are judged by the time around them instead of
    by the load average alone.  Snapshots are shared by every RecentWindow in the process."""

    _snaps: list = []

    def __init__(self, reach_s: float = 2.0):
        super().__init__()
        self.reach_s = reach_s
        self._keep(self.start)

    @classmethod
    def _keep(cls, snap: Snapshot) -> None:
        cls._snaps = [s for s in cls._snaps if snap.wall - s.wall <= 10.0][-32:] + [snap]

    def stop(self, samples=None) -> Conditions:
        end = snapshot()
        self._keep(end)
        start = self.start
        if end.wall - start.wall < MIN_WINDOW_S:
            older = [s for s in self._snaps
                     if MIN_WINDOW_S <= end.wall - s.wall <= self.reach_s]
            start = older[-1] if older else start
        return between(start, end, spread_of(samples) if samples else None)


def wait_for_quiet(max_wait_s: float = 10.0, probe_s: float = 0.5) -> Conditions:
    """Pause until a `probe_s` window shows no contention, or `max_wait_s` has passed; returns
    the last probe's conditions.  A measurement that was contended is repeated after this.
    The window is judged by the counters and by the parallelism gauge, probed every
    `GAUGE_EVERY_S` in it (a CPU shared with a neighbour shows in neither /proc nor load)."""
    deadline = time.monotonic() + max_wait_s
    while True:
        w, gauge = Window(), Gauge()
        end = time.monotonic() + probe_s
        while time.monotonic() < end:
            gauge.probe()
            time.sleep(max(0.0, min(GAUGE_EVERY_S, end - time.monotonic())))
        c = with_gauge(w.stop(), gauge)
        if not c.contended or time.monotonic() + probe_s > deadline:
            return c


def with_gauge(c: Conditions, gauge) -> Conditions:
    """`c` with the parallelism gauge's verdict added (partition/measure/parallelism.py)."""
    why = gauge.reason()
    c.parallelism = gauge.to_dict()
    if why:
        c.reasons.append(why)
        c.contended = True
    return c


def combine(parts: dict[str, Conditions | dict]) -> dict:
    """One record for several phases: contended when any phase was, with the phases kept."""
    phases = {k: (v.to_dict() if isinstance(v, Conditions) else v) for k, v in parts.items()
              if v is not None}
    bad = {k: v for k, v in phases.items() if v.get("contended")}
    return {"contended": bool(bad),
            "reason": "; ".join(f"{k}: {', '.join(v['reasons'])}" for k, v in bad.items()),
            "phases": phases}
