"""CandidatePartition: a set of op nodes proposed for one backend (Collage's unit of search).

Kept free of any estimate or measurement: candidates are generated from rules, filtered by
constraints, priced by a CostEstimator and finally chosen by the search; each stage lives in its
own module and speaks only in these.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Candidate:
    backend: str
    ops: frozenset  # op node indices of the GraphView (each index is an ONNX node position)
    rule: str = ""  # which rule proposed it, e.g. "whole-model", "single-op", "combine<=4"

    def __len__(self) -> int:
        return len(self.ops)


@dataclass(frozen=True)
class Estimate:
    """A candidate's price on its backend.  `seconds` is None when the candidate is invalid."""

    seconds: float | None
    reason: str = ""        # why invalid (build error, crash, accuracy guard), or ""
    spread: float = 0.0     # (p90 - min) / median of the measurement, 0 for estimates
    cached: bool = False    # answered from the persistent cache
    max_abs_err: float | None = None  # accuracy guard result vs the reference, if checked

    @property
    def valid(self) -> bool:
        return self.seconds is not None
