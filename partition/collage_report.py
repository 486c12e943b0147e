"""What a Collage search recorded, as one type for code and one dict on disk.

The search's levels fill a `CollageReport`; the artifact's manifest (`plan_info["collage"]`),
the plan cache, `provmap explain` and bench keep reading the dict `to_json()` gives, whose keys
are those every provmap since the end-to-end check wrote.  A report read back from the plan
cache (an older provmap's, possibly) goes through `from_json`, which gives the same dict back:
keys this version does not know are carried in `extra`, and a first-level key the stored
report lacked is not invented.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

# Written by the first level, always, in this order (the manifest sorts keys; memory does not).
FIRST_LEVEL_KEYS = ("backends", "constraints", "candidates", "estimator",
                    "boundary_calibration", "search", "estimated_ms", "crossing_ms",
                    "partitions_before_coalescing", "partitions", "search_total_s",
                    "measure_budget_s", "explain", "measured_on", "conditions")


@dataclass
class CollageReport:
    # -- the first level (the shortest path over measured candidates) ----------------------
    backends: list | None = None
    constraints: str | None = None
    candidates: dict | None = None          # generated / after constraints / after pruning
    estimator: dict | None = None           # MeasuredEstimator.stats()
    boundary_calibration: dict | None = None
    search: dict | None = None              # SearchResult.record(): states, peak RSS, ...
    estimated_ms: dict | None = None        # "collage" and "single:<b>" estimates
    crossing_ms: float | None = None
    partitions_before_coalescing: int | None = None
    partitions: int | None = None
    search_total_s: float | None = None
    measure_budget_s: float | None = None
    explain: list | None = None             # region_alternatives per partition
    measured_on: dict | None = None         # local host or the remote pool
    conditions: dict | None = None          # measuring conditions of every phase (hygiene)
    constraint_flags: list | None = None    # [{"node", "kind", "flag"}]: --pin/--forbid/--cut
    # -- what the first level could not do ---------------------------------------------------
    search_plan_cyclic: str | None = None
    e2e_skipped: str | None = None
    # -- the end-to-end check ------------------------------------------------------------------
    e2e_variants: list | None = None
    e2e_same_as_collage: list | None = None
    e2e_same: dict | None = None
    e2e_failed: dict | None = None
    e2e_accuracy: dict | None = None        # distances; mixes refused (measure/plan_accuracy)
    e2e: dict | None = None                 # measured, winner, why, decision (+ note)
    level: str | None = None                # which level found the kept plan
    # -- the second level and after ------------------------------------------------------------
    refine: dict | None = None
    schedule_search: dict | None = None
    in_context: list | None = None
    in_context_error: str | None = None
    plan_cache_refused: str | None = None
    plan_cache_error: str | None = None
    plan_cache: dict | None = None          # set when the kept plan was reused, not searched
    extra: dict = field(default_factory=dict)  # keys of a stored report this version lacks
    # None: built by this search (every first-level key is written, None or not); else the
    # keys of the stored report it was read from (only those of them are written back).
    _given: frozenset | None = field(default=None, repr=False, compare=False)

    def to_json(self) -> dict:
        """The dict `plan_info["collage"]` holds: first-level keys always (as stored, for a
        report read back), every later key only when its step ran."""
        out = {}
        for f in fields(self):
            if f.name in ("extra", "_given"):
                continue
            value = getattr(self, f.name)
            written = (f.name in FIRST_LEVEL_KEYS if self._given is None
                       else f.name in self._given)
            if value is not None or written:
                out[f.name] = value
        out.update(self.extra)
        return out

    @classmethod
    def from_json(cls, d: dict) -> "CollageReport":
        names = {f.name for f in fields(cls)} - {"extra", "_given"}
        known = {k: v for k, v in d.items() if k in names}
        return cls(**known, extra={k: v for k, v in d.items() if k not in names},
                   _given=frozenset(d))

    def note(self, d: dict) -> None:
        """Take back what a step that writes the dict added (store_plan's refusal or error)."""
        for k in ("plan_cache_refused", "plan_cache_error"):
            if k in d:
                setattr(self, k, d[k])


def kept_label(strategy: str) -> str | None:
    """The end-to-end check's label of an artifact's kept plan, from the manifest's strategy
    ("collage" -> "collage", "collage->single:b" -> "single:b"); None for other strategies."""
    if strategy == "collage" or strategy.startswith("collage:"):
        return "collage"
    return strategy.split("->", 1)[1] if "->" in strategy else None


def predicted_vs_measured(report: dict, strategy: str) -> dict:
    """The kept plan's predicted time (the first level's estimate of it) against its measured
    one (the end-to-end check's median), and predicted / measured.  One reading for explain and
    bench, so both show the same numbers: a plan found by the second level was measured, never
    predicted (predicted None)."""
    label = kept_label(strategy or "")
    est = (report or {}).get("estimated_ms") or {}
    e2e = (report or {}).get("e2e") or {}
    predicted = est.get(label) if label and label != "refined" else None
    measured = ((e2e.get("measured") or {}).get(label) or {}).get("median_ms") if label else None
    if label == "refined":
        kept = [t for t in ((report or {}).get("refine") or {}).get("trail") or []
                if t.get("status") == "kept" and t.get("proposal")]
        measured = kept[-1]["proposal"].get("median_ms") if kept else None
    return {"label": label, "predicted_ms": predicted, "measured_ms": measured,
            "ratio": predicted / measured if predicted and measured else None}
