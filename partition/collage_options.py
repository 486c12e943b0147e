"""What a caller sets for a Collage search, in a module that imports no backend.

The command line builds these options from its flags before it imports the search: that import
brings TVM, ONNX Runtime and OpenVINO (and torch through TVM where it is installed), seconds in
all, and `compile` with a misspelt flag or a missing model waited for them to be told (issue 53).
collage_types.py re-exports the class beside the values the levels pass each other."""

from __future__ import annotations

from dataclasses import dataclass, field

from .defaults import DEFAULT_SEARCH_BUDGET_S  # defined where the CLI's help reads it
from .measure.evidence import RULE, Rule
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
    e2e_single_factor: float = 3.0  # measure single plans estimated within this factor of best
    # The one comparison procedure's numbers (partition/decision.py): every phase that keeps
    # or drops a plan (the end-to-end check, the second level, the schedules) decides by it.
    rule: Rule = RULE
    # Options tried as whole-partition variants of each searched backend, in the end-to-end
    # check (single plans) and the second level (moves), not priced by the first level; see
    # e2e_variants.  (): none.  None: DEFAULT_VARIANTS plus the settings each searched library
    # suggests for this model (Backend.model_variants: ORT's disable_quant_qdq=1 where a
    # constant is dequantized), since a user of that library would set them.
    e2e_variants: tuple | None = None
    isolate: bool = True
    measure_budget_s: float | None = DEFAULT_SEARCH_BUDGET_S  # MeasuredEstimator.budget_s
    refine_budget_s: float | None = 60.0  # second level (partition/refine.py); 0: off, None: no
    #                                       limit (it stops when it runs out of proposals)
    quiet_wait_s: float = 120.0     # a busy machine: wait this long for quiet before measuring
    #                                 anything, and before measuring a decision's round again
    accept_contended: bool = False  # ...and if it stays busy, measure beside the load anyway
    #                                 (the record says so) rather than write nothing
    schedules: bool = True          # second level: measure concurrent schedules (schedule_search)
    in_context: bool = True         # feed partition times inside the kept plan back to the cache
    measure_on: str | None = None   # "tracker:HOST:PORT/KEY": price candidates on those servers
    reuse_plan: bool = True         # a kept plan stored in the cost cache for this model and
                                    # these settings is reused (see plan_cache_keys)
    search_bounds: SearchBounds = DEFAULT_BOUNDS  # the first level's states and memory, past
    #                                 which it finishes as a beam (partition/search_bounds.py)
