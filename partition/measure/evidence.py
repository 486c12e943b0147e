"""What a measurement of two alternatives means: the one statistic, its interval and the verdict
every decision between measured plans is taken on (partition/decision.py), and bench's
judgements too (bench/paired.py).

The statistic is the **per-pass ratio of each block's fastest sample** (a sample is the mean of
at least a millisecond of calls, partition/measure/interleave.py), and what is estimated is that
ratio's median over passes, with a distribution-free interval (the sign test's order
statistics).  Why these:

* *Paired passes*: on this 2-core guest the machine's speed drifts 10-70% between moments, and
  the ratio between two libraries drifts too (MobileNet-v3, ONNX Runtime / OpenVINO by median:
  p10-p90 1.045-1.193 over 105 moments in 7 minutes, bench/out/drift/amd-epyc-avx512-2cpu.json).
  Two blocks in one pass see the same machine; ratios within passes cancel what the moments
  share, and passes spread over the whole decision sample the drift.
* *Each block's fastest sample*, not its median: noise on a shared machine only adds time.  On
  the 28 container pairs measured in 16 paired passes (A/B and A/A, the container step's runs of
  2026-11-27 and -28, cited in docs/collage.md, "What keeps a plan") the 90% interval of the
  per-pass ratio was 1.9% wide by the blocks' minimums against 2.3% by their medians (narrower
  in 22 of 28); at 32 passes 2.3% against 2.7% (16 of 22).
* *The sign test*, not a t interval: per-pass ratios are skewed by the odd slow pass (a step of
  +45% for both libraries at once), and the test assumes only independent passes.  With six
  passes its 90% interval is the lowest and highest ratio: "faster in every pass", the rule the
  older phases each wrote their own way, is this test's first round.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass

#: What the verdicts are taken on (recorded with every decision).
STATISTIC = "median over paired passes of the ratio of each block's fastest sample"


@dataclass(frozen=True)
class Rule:
    """The numbers of the one comparison procedure (docs/collage.md, "What keeps a plan")."""
    coverage: float = 0.90   # the interval's confidence (sign test; 6 passes: 0.969)
    round_passes: int = 6    # passes per round: the fewest whose 90% interval is not everything
    max_passes: int = 24     # sequential: rounds until decided or this many passes
    min_gain: float = 0.02   # a more complex plan is kept only when faster by at least this
    block_s: float = 0.3     # each block lasts at least this long

    def key(self) -> str:
        """What a stored plan was decided by (the plan cache reuses only plans decided by the
        same rule)."""
        return ",".join(f"{k}={v}" for k, v in sorted(asdict(self).items()))


RULE = Rule()


def median_interval(values: list[float], coverage: float = 0.9) -> tuple[float, float, float]:
    """A distribution-free interval for the median of `values` (the sign test's order
    statistics): (low, high, its actual coverage), the narrowest symmetric pair of order
    statistics whose coverage is at least `coverage`, or the whole range with what it covers."""
    v = sorted(values)
    n = len(v)
    if not n:
        return math.nan, math.nan, 0.0
    tail = 0.0  # P(Binomial(n, 1/2) <= k - 1): the median below the k-th order statistic
    best = (v[0], v[-1], 1.0 - 2 * 0.5 ** n)
    for k in range(1, (n + 1) // 2 + 1):
        tail += math.comb(n, k - 1) * 0.5 ** n
        if 1.0 - 2 * tail < coverage:
            break
        best = (v[k - 1], v[n - k], 1.0 - 2 * tail)
    return best


def pass_ratios(a_mins: list[float], b_mins: list[float]) -> list[float]:
    """a/b per pass, from each pass's fastest sample of either (passes where both ran)."""
    return [x / y for x, y in zip(a_mins, b_mins) if y > 0]


@dataclass
class Interval:
    """Where the median per-pass ratio a/b lies."""
    low: float
    high: float
    median: float
    coverage: float
    passes: int

    def to_dict(self) -> dict:
        return {"low": round(self.low, 5), "high": round(self.high, 5),
                "median": round(self.median, 5), "coverage": round(self.coverage, 4),
                "passes": self.passes}

    def slowdown(self) -> tuple[float, float]:
        """(low, high) as fractions slower (ratio - 1): what bench's items are judged on."""
        return self.low - 1.0, self.high - 1.0

    def text(self) -> str:
        return (f"{self.median - 1:+.1%} (interval {self.low - 1:+.1%} .. {self.high - 1:+.1%}, "
                f"{self.passes} passes)")


def interval(ratios: list[float], coverage: float = RULE.coverage) -> Interval:
    lo, hi, cov = median_interval(ratios, coverage)
    med = statistics.median(ratios) if ratios else math.nan
    return Interval(lo, hi, med, cov, len(ratios))


def faster_by(iv: Interval, gain: float) -> bool:
    """a is faster than b by at least `gain`, at the interval's confidence."""
    return iv.passes > 0 and iv.high < 1.0 - gain


def cannot_gain(iv: Interval, gain: float) -> bool:
    """a is not faster than b by `gain` (and, at gain 0, slower), at the interval's confidence:
    a more complex a is then not worth measuring further against a simpler b."""
    return iv.passes > 0 and iv.low > 1.0 - gain


def within(low: float, high: float, limit: float) -> str:
    """A slowdown item ("a at most `limit` slower than b") on an interval of a's slowdown
    (ratio - 1, `Interval.slowdown`): 'within' when even its high end is at most `limit`,
    'slower' when even its low end is above it, else 'undecided' (closer than these passes can
    tell apart)."""
    if high <= limit:
        return "within"
    if low > limit:
        return "slower"
    return "undecided"
