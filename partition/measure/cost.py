"""Pricing candidates: a `CostEstimator` turns (view, Candidate) into an `Estimate`.

The search only ever talks to this interface, so a measuring estimator (`measured`), a model of
costs, or a test's fixed prices are interchangeable.  The pieces of the measuring estimator are
one module each: `measured` (the estimator and its design), `worker` (the isolated measuring
process), `accuracy` (inputs and the output check), `boundary` (the price of a hand-over).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Callable, Mapping

from ..candidate import Candidate, Estimate

__all__ = ["CostEstimator", "MockEstimator"]


# ------------------------------------------------------------------------------------------
# interface
# ------------------------------------------------------------------------------------------

class CostEstimator(ABC):
    """Prices a candidate.  `begin(total)` announces how many `estimate` calls will follow
    (for progress reporting); `stats()` returns counters; `close()` releases resources."""

    @abstractmethod
    def estimate(self, view, candidate: Candidate) -> Estimate:
        ...

    def begin(self, total: int) -> None:
        pass

    def stats(self) -> dict:
        return {}

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class MockEstimator(CostEstimator):
    """Costs from a table {(backend, frozenset(ops)): seconds | Estimate | None} or a function
    (view, candidate) -> seconds | Estimate | None.  Missing or None -> invalid.  For unit tests
    of rules and search; `calls` records every candidate asked about."""

    def __init__(self, table_or_fn: Mapping | Callable):
        self._fn = table_or_fn if callable(table_or_fn) else None
        self._table = None if callable(table_or_fn) else dict(table_or_fn)
        self.calls: list[Candidate] = []

    def estimate(self, view, candidate: Candidate) -> Estimate:
        self.calls.append(candidate)
        if self._fn is not None:
            v = self._fn(view, candidate)
        else:
            v = self._table.get((candidate.backend, frozenset(candidate.ops)))
        if v is None:
            return Estimate(None, reason=f"no mock cost for {candidate.backend} "
                                         f"{sorted(candidate.ops)}")
        if isinstance(v, Estimate):
            return v
        return Estimate(float(v))

    def stats(self) -> dict:
        return {"calls": len(self.calls)}


# ------------------------------------------------------------------------------------------
# helpers shared by the parent and the worker
# ------------------------------------------------------------------------------------------


# ------------------------------------------------------------------------------------------
# the worker process
# ------------------------------------------------------------------------------------------


# ------------------------------------------------------------------------------------------
# the measuring estimator
# ------------------------------------------------------------------------------------------


# ------------------------------------------------------------------------------------------
# boundary calibration
# ------------------------------------------------------------------------------------------


