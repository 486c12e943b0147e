"""The kept plan of an earlier search, stored in the cost cache and reused by the next compile.

A search costs minutes; the plan it keeps depends on the model's structure, the backends and the
options, not on the weights.  So the kept plan is stored under those (`plan_cache_keys`) and a
later compile with the same ones builds it without measuring anything (`reuse_plan`), unless it
was decided under contention (partition/measure/hygiene.py) or `--research` asks again.
"""

from __future__ import annotations

import hashlib
import json
import time

from provmap.provenance.util.errors import ProvmapError
from provmap.runtime_module.backend import Backend
from provmap.runtime_module.graph_view import GraphView
from provmap.runtime_module.plan import PartitionSpec, Plan, order_plan
from provmap.runtime_module.subgraph import Subgraph

from .collage_report import CollageReport
from .measure.cache import backend_identity
from .decision import PROCEDURE
from .measure.hygiene import reuse_refusal

# Every option that changes what a search keeps (CollageOptions' names).  `rule` is the one
# comparison procedure's numbers, written by its key (evidence.Rule.key) together with the
# procedure's version: a plan kept under another rule is searched again, not reused.
SEARCH_SETTINGS = ("max_depth", "max_size", "max_exits", "pins", "forbids", "cuts",
                   "e2e_single_factor", "e2e_variants", "measure_budget_s",
                   "refine_budget_s", "in_context", "schedules")


def plan_cache_keys(view: GraphView, backends: dict[str, Backend], opts) -> tuple[str, str]:
    """(model, search) under which the kept plan is stored: the model's structure (not its
    weights: prices do not depend on them), and everything that changes what a search keeps --
    each backend's identity (library version, priced options), the candidate limits, the
    constraints and the end-to-end and second-level settings.  The host is the cache's own."""
    model = Subgraph(view, view.op_nodes).key
    settings = {"backends": {n: list(backend_identity(b)) for n, b in backends.items()},
                "rule": [PROCEDURE, opts.rule.key()],
                **{k: getattr(opts, k) for k in SEARCH_SETTINGS}}
    search = hashlib.blake2b(json.dumps(settings, sort_keys=True, default=str).encode(),
                             digest_size=16).hexdigest()
    return model, search


def reuse_plan(view: GraphView, cache, keys, say) -> tuple[Plan, CollageReport] | None:
    """The stored kept plan for `keys` (with its schedule in plan.info) and its report, or None
    (none stored, refused, or it no longer fits this view)."""
    hit = cache.get_plan(*keys)
    if hit is None:
        return None
    stored, report, created = hit
    if (why := reuse_refusal(report)) is not None:
        say(f"not reusing the plan cached for this model: {why}; searching")
        return None
    index = {nid: i for i, nid in enumerate(view.node_ids)}
    try:
        parts = [PartitionSpec(p["backend"], [index[n] for n in p["ops"]], why=p.get("why", ""))
                 for p in stored["partitions"]]
        plan = order_plan(view, Plan(stored["strategy"], parts))
    except (KeyError, ProvmapError):
        return None
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(created))
    rep = CollageReport.from_json(report)
    rep.plan_cache = {"reused": True, "stored": when,
                      "note": "the kept plan of an earlier search with the same model "
                              "structure, backends and options on this host; nothing was "
                              "measured (--research searches again)"}
    say(f"reusing the plan kept by the search of {when} ({stored['strategy']},"
        f" {len(parts)} partition(s)) from the cost cache; --research searches again")
    plan.info["schedule"] = stored.get("schedule")
    return plan, rep
