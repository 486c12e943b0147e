"""The values Collage's levels pass each other (partition/collage.py chains them).

`CollageOptions` is what a caller sets; `SearchSpace` is what every level reads; `FirstLevel`,
`EndToEnd` and `SecondLevel` are each level's result; `CollageResult` is what compile_model gets:
the kept plan and the report, and the artifact the search already built to measure the plan
(compile_model assembles, records and saves it, so no plan is built twice).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from provmap.runtime_module.graph_view import GraphView
from provmap.runtime_module.plan import Plan

from .collage_report import CollageReport
from .defaults import DEFAULT_SEARCH_BUDGET_S  # defined where the CLI's help reads it
from .search import SearchResult
from .search_bounds import DEFAULT_BOUNDS, SearchBounds


@dataclass
class CollageOptions:
    max_depth: int = 4
    max_size: int = 12
    max_exits: int = 4
    pins: list = field(default_factory=list)
    forbids: list = field(default_factory=list)
    cuts: list = field(default_factory=list)
    cache_path: str | None = None   # None: $PROVMAP_CACHE or ~/.cache/provmap/costs.sqlite
    e2e_check: bool = True
    e2e_repeats: int = 10
    e2e_single_factor: float = 3.0  # measure single plans estimated within this factor of best
    e2e_margin: float = 0.03        # a plan with more partitions must win by this, every pass
    e2e_tie_margin: float = 0.03    # equally simple plans this close are measured again, longer
    e2e_tie_passes: int = 4         # ...in this many interleaved passes (0: no tie-break)
    # Options tried as whole-partition variants of each searched backend, in the end-to-end
    # check (single plans) and the second level (moves), not priced by the first level; see
    # e2e_variants.  (): none.
    e2e_variants: tuple = ("threads=1",)
    isolate: bool = True
    measure_budget_s: float | None = DEFAULT_SEARCH_BUDGET_S  # MeasuredEstimator.budget_s
    refine_budget_s: float | None = 60.0  # second level (partition/refine.py); 0: off, None: no
    #                                       limit (it stops when it runs out of proposals)
    refine_margin: float = 0.02     # a refinement must win by this, in every pass and by min
    refine_confirm_passes: int = 4  # ...and win again in a fresh measurement of this many passes (0: not)
    recheck_passes: int = 2         # a kept one-library plan against its closest rival, at a
    #                                 second moment (partition/recheck.py; 0: not)
    quiet_wait_s: float = 120.0     # a contended decision with no quiet price: wait this long
    #                                 for quiet and measure it again (partition/quiet_again.py)
    accept_contended: bool = False  # ...and if it stays busy, keep the fallback's guess rather
    #                                 than write nothing (partition/fallback.py: `refuse_guess`)
    schedules: bool = True          # second level: measure concurrent schedules (schedule_search)
    in_context: bool = True         # feed partition times inside the kept plan back to the cache
    measure_on: str | None = None   # "tracker:HOST:PORT/KEY": price candidates on those servers
    reuse_plan: bool = True         # a kept plan stored in the cost cache for this model and
                                    # these settings is reused (see plan_cache_keys)
    search_bounds: SearchBounds = DEFAULT_BOUNDS  # the first level's states and memory, past
    #                                 which it finishes as a beam (partition/search_bounds.py)


@dataclass
class CollageResult:
    """The kept plan and what the search recorded; compile_model builds, records and saves the
    artifact.  `artifact` is the kept plan as the search already built it to measure it (None
    when nothing was measured end to end: the plan is built from scratch), so it is not built
    twice; `strategy` is then the manifest's name for it (collage, collage->single:b, ...)."""
    plan: Plan
    report: CollageReport
    artifact: object | None = None
    backends: dict | None = None    # every backend the plan may name (variants included)
    strategy: str | None = None


@dataclass
class SearchSpace:
    """What every level reads: the backends and what they support, the constraints, the
    candidates left to price, where prices come from and go, and the end-to-end variants."""
    view: GraphView
    backends: dict
    verdicts: dict
    cons: object | None
    candidates: dict                # generated / after constraints / after pruning (report)
    kept: list                      # the candidates the first level prices
    cache: object                   # the CostCache prices are read from and stored in
    pool: object | None             # a RemotePool when prices come from servers
    host: str | None
    variants: dict                  # variant name -> (searched backend, Backend)
    every: dict                     # the backends and their variants
    plan_keys: tuple | None         # where the kept plan is stored (None: it is not)

    @property
    def names(self) -> list[str]:
        return list(self.backends)

    @property
    def cuts(self) -> frozenset:
        return frozenset(self.cons.cuts) if self.cons else frozenset()


@dataclass
class FirstLevel:
    plan: Plan                      # the DP's coalesced plan (or, if cyclic, its fallback)
    dp: SearchResult                # the shortest path itself, with every price it asked for
    cyclic: str | None              # why the cheapest cover cannot run, if it cannot
    single_est: dict                # backend -> estimated whole-model ms (None: invalid)
    report: CollageReport
    phases: dict                    # measuring conditions of each phase (hygiene)


@dataclass
class EndToEnd:
    winner: str                     # the label of the kept alternative
    plan: Plan                      # its plan, ordered
    artifact: object                # built and measured
    blobs: dict                     # partitions built once, shared with the second level
    built: dict = field(default_factory=dict)  # label -> artifact, every alternative measured
    plans: dict = field(default_factory=dict)  # label -> plan, of those alternatives


@dataclass
class SecondLevel:
    label: str                      # the end-to-end winner, or "refined"
    plan: Plan
    artifact: object
