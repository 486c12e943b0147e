"""What `provmap explain` says per partition of a searched plan: what the search paid for the
region, and what the same region costs whole on each backend.

Kept apart from the search itself (collage.py): it prices regions after the search has decided,
for the reader, not for the decision.
"""

from __future__ import annotations

from provmap.runtime_module.graph_view import GraphView
from provmap.runtime_module.plan import Plan

from .candidate import Candidate


def region_alternatives(view: GraphView, plan: Plan, res, est, verdicts: dict,
                        names: list[str]) -> list:
    """Per partition of the searched plan: what the search paid for it, and what the same
    region would cost on each backend as one partition (None: unsupported or invalid, with
    the reason).  Regions the search never priced whole (coalesced ones) are priced now, from
    the cache when possible.  `greedy` names the backend greedy would have used for it: the
    first backend, in the order given, that supports every node of the region."""
    chosen = [(frozenset(c.ops), c, e) for c, e in res.chosen]
    out = []
    for p in plan.partitions:
        region = frozenset(p.ops)
        paid = sum(e.seconds for ops, _c, e in chosen if ops <= region and e.valid)
        parts = [c.rule for ops, c, _e in chosen if ops <= region]
        alts = {}
        supported = []
        for b in names:
            bad = next((i for i in sorted(region)
                        if not (verdicts[b].get(i) and verdicts[b][i].ok)), None)
            if bad is not None:
                alts[b] = {"ms": None, "reason": f"unsupported: {view.describe(bad)}"}
                continue
            supported.append(b)
            e = est.estimate(view, Candidate(b, region, "explain"))
            alts[b] = {"ms": e.seconds * 1e3 if e.valid else None, "reason": e.reason}
        greedy_b = supported[0] if supported else None
        out.append({"op_ids": sorted(view.node_ids[i] for i in p.ops), "backend": p.backend,
                    "ops": len(p.ops),
                    "first": view.describe(p.ops[0]), "searched_ms": paid * 1e3,
                    "from_candidates": parts, "alternatives": alts, "greedy_backend": greedy_b})
    return out
