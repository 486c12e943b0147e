"""The values Collage's levels pass each other (partition/collage.py chains them).

`CollageOptions` is what a caller sets (collage_options.py); `SearchSpace` is what every level reads; `FirstLevel`,
`EndToEnd` and `SecondLevel` are each level's result; `CollageResult` is what compile_model gets:
the kept plan and the report, and the artifact the search already built to measure the plan
(compile_model assembles, records and saves it, so no plan is built twice).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from provmap.runtime_module.graph_view import GraphView
from provmap.runtime_module.plan import Plan

from .collage_options import CollageOptions  # noqa: F401  (re-exported: the levels read it here)
from .collage_report import CollageReport
from .search import SearchResult


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
    #: Built when `plan` fails to (no end-to-end check built it): the plan of the measured
    #: candidates themselves, before coalescing joined neighbours no library built together.
    fallback: Plan | None = None


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
    accuracy: object = None         # measure/plan_accuracy.PlanAccuracy, or None (no reference)


@dataclass
class SecondLevel:
    label: str                      # the end-to-end winner, or "refined"
    plan: Plan
    artifact: object
