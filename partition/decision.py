"""The one comparison procedure: which of several measured alternatives provmap keeps.

Every phase that keeps or drops a plan calls `decide` (the end-to-end check, each second-level
proposal, the concurrent schedules) and bench judges with the same statistic
(partition/measure/evidence.py).  One procedure, so a reader can tell from one place what
evidence keeps a plan (docs/collage.md, "What keeps a plan"):

1. The alternatives are measured together in rounds of `Rule.round_passes` paired passes (one
   block of each per pass, the order reversed every other pass, each loaded alone for its
   block).  An alternative ten times slower than the fastest in warm-up leaves at once.
2. After each round, the per-pass ratio of each pair's fastest samples gives an interval
   (evidence.interval).  An alternative leaves the contest when another one at most as complex
   is, with that confidence, not `min_gain` slower than it (it is not worth its complexity), or
   when any other is faster than it by the gain its extra complexity must earn.
3. Rounds go on until one alternative is left ("decided") or `Rule.max_passes` passes are
   spent ("undecided"): then the simplest left is kept (fewer partitions, then the library's
   default over a variant), and among equally simple ones the lower median of pass minimums.
4. A round measured while another process holds a CPU, or while one CPU runs slower than the
   other (a neighbour on its physical core, which no process list shows: the parallelism gauge
   probed between blocks, partition/measure/parallelism.py), is not evidence (a two-thread
   library loses a core a one-thread variant never had): the procedure waits for quiet,
   bounded, and measures that round again; a load that outlasts the wait ends the decision
   with `Busy` (one line, no artifact), unless the caller accepts contended rounds, which the
   record says.

Why sequential: most decisions are clear after one round (a mixed plan 30% slower, a library
2x slower); only alternatives within the machine's drift of each other need more passes, and
those are exactly the ones a fixed-length measurement decided by a coin toss before.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

from .measure.contention import Busy, Window, acting, wait_for_quiet, with_gauge  # noqa: F401
from .measure.parallelism import Gauge
from .measure.evidence import RULE, STATISTIC, Rule, cannot_gain, faster_by, interval, pass_ratios
from .measure.interleave import artifact_calls, measure_interleaved


#: The procedure's version: bumped when the steps above change without a Rule number changing
#: (a stored plan kept by another procedure is searched again, partition/plan_cache.py).
#: 2: the parallelism gauge judges rounds too, and the end-to-end check measures a library
#: whose whole model the accuracy guard refused (partition/collage.py, _alternatives).
PROCEDURE = 2


@dataclass
class Decision:
    kept: str
    decided: bool                   # False: the passes ran out, the simpler plan was kept
    why: str
    passes: int = 0
    left: dict = field(default_factory=dict)        # label -> why it left the contest
    versus: dict = field(default_factory=dict)      # label -> interval of label / kept
    measured: dict = field(default_factory=dict)    # label -> min, median, pass minimums (ms)
    contended_rounds: int = 0       # rounds counted under a load (accept_contended only)
    waited_s: float = 0.0
    reasons: list = field(default_factory=list)     # what the counted contended rounds saw
    rule: Rule = RULE
    pass_mins: dict = field(default_factory=dict)   # label -> each pass's fastest sample (s)
    pass_medians: dict = field(default_factory=dict)
    parallelism: list = field(default_factory=list)  # each round's gauge (contended or not)

    def conditions(self) -> dict:
        """The decision's measuring conditions, as a phase's record (contention.combine)."""
        return {"contended": bool(self.contended_rounds), "reasons": list(self.reasons),
                "rounds_contended": self.contended_rounds, "waited_s": round(self.waited_s, 1),
                "parallelism": list(self.parallelism)}

    def to_dict(self) -> dict:
        return {"kept": self.kept, "decided": self.decided, "why": self.why,
                "passes": self.passes, "left": self.left, "versus": self.versus,
                "measured": self.measured, "contended_rounds": self.contended_rounds,
                "waited_s": round(self.waited_s, 1), "statistic": STATISTIC,
                "rule": self.rule.key()}


def plan_complexity(manifest: dict) -> tuple[int, int, int]:
    """(partitions, partitions on a variant, concurrent schedule): what makes one plan simpler
    than another when neither is measurably faster."""
    parts = manifest.get("partitions") or []
    variants = sum(1 for p in parts if "[" in str(p.get("backend", "")))
    sched = manifest.get("schedule") or {}
    return len(parts), variants, int(bool(sched.get("threads")) or any(
        len(s) > 1 for s in sched.get("stages") or ()))


def _gain(a, b, complexity: dict, rule: Rule) -> float:
    """What a must be faster than b by to be kept over it."""
    return rule.min_gain if complexity[a] > complexity[b] else 0.0


def _ms(values) -> list[float]:
    return [round(v * 1e3, 6) for v in values]


def decide(fns: dict, complexity: dict, say=None, rooms: dict | None = None,
           rule: Rule = RULE, wait_s: float = 120.0, accept_contended: bool = False,
           what: str = "decision", measure=None,
           cap_slow: bool = True, until: float | None = None,
           settled=None) -> Decision:
    """The alternative to keep among `fns` (label -> zero-argument callable), with the record.
    `complexity` orders them (lower: simpler); `rooms` as measure_interleaved's; `cap_slow`
    False measures every alternative in every pass (a pair whose interval is wanted); `until`
    (time.monotonic) starts no round after it but the first, and what is left undecided then
    keeps the simplest, as when the passes run out (a phase with a budget: the second level
    went on 60 s past its 120 s finishing a decision it had started).

    `settled` (the pooled pass minimums, label -> seconds -> bool) asks a question other than
    which one to keep: is a pair within a bound of each other (bench's 1% item, the container's
    2%)?  Then no alternative leaves the contest (each is measured in every pass, as with
    `cap_slow` False), and rounds go on, pooled, until `settled` says the question is answered
    or the passes run out; `decided` says which.  The same rounds, statistic and contention
    handling as a contest: only the stopping rule is the caller's."""
    say = say or (lambda m: None)
    measure = measure or measure_interleaved  # looked up per call: a test can replace it
    alive = sorted(fns, key=lambda k: complexity[k])
    mins: dict[str, list[float]] = {k: [] for k in fns}   # each pass's fastest sample (s)
    meds: dict[str, list[float]] = {k: [] for k in fns}   # each pass's median (described only)
    samples: dict[str, list[float]] = {k: [] for k in fns}
    left: dict[str, str] = {}
    passes, contended, waited, first, reasons, gauges = 0, 0, 0.0, True, [], []
    done = False  # settled said so
    cap_slow = cap_slow and settled is None
    while not done and len(alive) > 1 and passes < rule.max_passes and not (
            passes and until is not None and time.monotonic() >= until):
        n = min(rule.round_passes, rule.max_passes - passes)
        w, gauge = Window(), Gauge()
        lat = measure({k: fns[k] for k in alive}, repeats=n, passes=n, min_block_s=rule.block_s,
                      rooms={k: rooms[k] for k in alive if k in rooms} if rooms else None,
                      never_cap=() if first and cap_slow else tuple(alive), alternate=True,
                      between=gauge.probe)
        cond = with_gauge(w.stop(), gauge)
        gauges.append(gauge.to_dict())
        if cond.contended and acting() and not accept_contended:
            # the round's own time counts against the wait: a load the 1 s probe misses (a CPU
            # slow in bursts) would otherwise have its rounds measured again without end
            waited += cond.seconds
            if waited >= wait_s:
                raise Busy(f"{what}: the machine stayed busy ({'; '.join(cond.reasons)}) "
                           f"through {waited:.0f} s of waiting for quiet and measuring again; "
                           "no plan is kept on "
                           "measurements a load skews (run again on a quiet machine, wait "
                           "longer with --quiet-wait SECONDS, or accept it with "
                           "--accept-contended)")
            say(f"{what}: {'; '.join(cond.reasons)}: that round is not evidence; waiting up "
                f"to {wait_s - waited:.0f} s for quiet, then measuring it again")
            t0 = time.monotonic()
            probe = wait_for_quiet(wait_s - waited, probe_s=2.0)  # long enough for the gauge
            waited += time.monotonic() - t0
            if probe.contended:
                waited = wait_s  # the next contended round raises
            continue
        if cond.contended:
            contended += 1
            reasons = list(cond.reasons)
        for k, v in lat.items():
            if v.capped:
                left[k] = (f"{v.first_call_s / min(x.first_call_s for x in lat.values()):.0f}x "
                           "slower than the fastest in warm-up")
                continue
            mins[k].extend(v.pass_mins_s)
            meds[k].extend(v.pass_medians_s)
            samples[k].extend(v.samples_s)
        alive = [k for k in alive if k not in left]
        passes += n
        first = False
        if settled is None:
            _drop(alive, mins, complexity, rule, left)
        else:
            done = bool(settled(mins))
    kept, decided, why = _verdict(alive, mins, complexity, left, passes,
                                  "" if passes >= rule.max_passes else ", out of time")
    if settled is not None:
        decided, why = done, (f"settled after {passes} passes" if done else
                              f"not settled after {passes} passes")
    d = Decision(kept, decided, why, passes, left, contended_rounds=contended, waited_s=waited,
                 reasons=reasons, rule=rule, pass_mins=mins, pass_medians=meds,
                 parallelism=gauges)
    for k in fns:
        if mins[k] and k != kept:
            d.versus[k] = interval(pass_ratios(mins[k], mins[kept])).to_dict()
        if samples[k]:
            d.measured[k] = {"min_ms": min(samples[k]) * 1e3,
                             "median_ms": statistics.median(samples[k]) * 1e3,
                             "pass_min_ms": _ms(mins[k]), "pass_median_ms": _ms(meds[k])}
    say(f"{what}: {why}")
    return d


def _drop(alive: list, mins: dict, complexity: dict, rule: Rule, left: dict) -> None:
    """Step 2 of the module doc, on the passes so far (in place)."""
    out = {}
    for y in alive:
        for x in alive:
            if x == y:
                continue
            iv = interval(pass_ratios(mins[y], mins[x]))
            g = _gain(y, x, complexity, rule)
            if complexity[x] <= complexity[y] and cannot_gain(iv, g):
                simpler = "the simpler " if g else ""  # g == 0: as complex as x
                out[y] = (f"slower than {simpler}{x}: {iv.text()}" if iv.low > 1.0 else
                          f"not {g:.0%} faster than the simpler {x}: {iv.text()}")
                break
            back = interval(pass_ratios(mins[x], mins[y]))
            if faster_by(back, _gain(x, y, complexity, rule)):
                out[y] = f"{x} faster: {x}/{y} {back.text()}"
                break
    if len(out) == len(alive):  # never every one (ratios need not be transitive)
        out.pop(min(alive, key=lambda k: (complexity[k], statistics.median(mins[k]))))
    left.update(out)
    alive[:] = [k for k in alive if k not in out]


def _verdict(alive: list, mins: dict, complexity: dict, left: dict,
             passes: int, short: str = "") -> tuple[str, bool, str]:
    if len(alive) == 1:
        kept = alive[0]
        gone = "; ".join(f"{k} {why}" for k, why in left.items())
        return kept, True, f"{kept} kept after {passes} passes ({gone})" if gone else \
            f"{kept} kept (the only alternative)"
    least = min(complexity[k] for k in alive)
    simple = [k for k in alive if complexity[k] == least]
    kept = min(simple, key=lambda k: statistics.median(mins[k]))
    rest = [k for k in alive if k != kept]
    ivs = "; ".join(f"{k}/{kept} {interval(pass_ratios(mins[k], mins[kept])).text()}"
                    for k in rest)
    how = ("the simpler plan stays" if len(simple) == 1 else
           "the lower median of pass minimums among equally simple plans")
    return kept, False, (f"{kept} kept, undecided after {passes} passes{short} against "
                         f"{', '.join(rest)} ({ivs}): {how}")


def decide_artifacts(artifacts: dict, say=None, point: str = "opt", **kw) -> Decision:
    """`decide` over built artifacts, each loaded alone for its own blocks (a plan measured as
    a user runs it), on the first one's seeded random inputs at the profile's `point`."""
    with artifact_calls(artifacts, point) as (fns, rooms):
        return decide(fns, {k: plan_complexity(a.manifest) for k, a in artifacts.items()}, say,
                      rooms=rooms, **kw)
