"""What bench adds to each model's rows about how far to trust them and how far a plan could go.

* Load: the latency run of a model (every strategy interleaved) is one measuring window
  (`provmap.partition.measure.contention`); each row records that window's load and the other
  processes' CPU, and is marked noisy when the window was contended or the row's own samples
  spread more than `SPREAD_MAX` ((p90 - min) / median).  A noisy row's ratio is not a result.
* Limit: the per-node oracle (`provmap.workbench.headroom`) over the searched backends and their
  variants, each backend's node times calibrated to add up to its profiled whole (so the oracle
  is at most every profiled single by construction), a bound never above a measured single
  configuration, its per-node calibrated times saved to recompute it, and the share of the headroom
  the kept plan captured, (best single - kept) / (best single - bound), all from the same
  profiling runs (the kept plan is profiled beside the singles): one source, where mixing the
  profile's oracle with this run's medians had claimed 64% on the transformer block for 22%
  from the profile alone (issue 35).  See docs/bench.md.
"""

from __future__ import annotations

import os

from provmap.partition.measure.contention import SPREAD_MAX, Window, with_gauge


def measured_with_load(measure, say, gauge=None):
    """`measure()` in a window: (its result, the window's Conditions); says so if contended.
    `gauge`: the parallelism gauge `measure` probes between its blocks, judged with the window."""
    w = Window()
    out = measure()
    cond = w.stop() if gauge is None else with_gauge(w.stop(), gauge)
    if cond.contended:
        say(cond.line("latency run") + "; its rows are marked noisy")
    return out, cond


def row_load(cond, summary: dict) -> dict:
    """The row's fields: the window's load, and whether the row is noisy (and why)."""
    why = list(cond.reasons)
    if (summary.get("spread") or 0) > SPREAD_MAX:
        why.append(f"samples spread {summary['spread']:.2f}")
    return {"load": {"load1": round(cond.load1, 2), "others_cores": round(cond.others_cores, 2),
                     "steal_share": round(cond.steal_share, 3), "cores": cond.cores,
                     **({"parallelism": cond.parallelism} if cond.parallelism else {})},
            "noisy": bool(why), "noisy_why": "; ".join(why)}


def headroom(view, opts, rows: list[dict], say, repeats: int = 10,
             kept_artifact=None) -> dict | None:
    """The model's limit row: the bound over `opts.search_backends` and their end-to-end
    variants, the best single and the kept plan (`kept_artifact`, a path or artifact) as the
    same profiling runs measured them, and the captured share from those numbers alone."""
    from provmap.partition.variants import default_specs, e2e_variants
    from provmap.runtime_module.registry import get_backend
    from provmap.workbench.headroom import node_oracle

    searched = {b: get_backend(b) for b in opts.search_backends}
    every = {**searched, **{v: be for v, (_o, be) in
                            e2e_variants(searched, default_specs(searched, view)).items()}}
    kept = next((r for r in rows if r["strategy"].startswith("collage")), None)
    twin = (kept or {}).get("same_plan_as") or ""
    kept_is = twin[len("single:"):] if twin.startswith("single:") else None
    if kept_is not in every:
        kept_is = None
    kept_mod = None
    if kept_artifact is not None and kept_is is None:
        from provmap.runtime_module.module import load

        kept_mod = load(kept_artifact) if isinstance(kept_artifact, (str, os.PathLike)) \
            else kept_artifact
    # the latency run is the measurement of record: the limit's best single is the table's
    by_strategy = {r["strategy"]: r.get("median_ms") for r in rows}
    wholes = {b: by_strategy.get(f"single:{b}") for b in every}
    wholes = wholes if all(wholes.values()) else None
    try:
        h = node_oracle(view, every, kept=kept_mod, repeats=repeats, progress=say,
                        kept_is=kept_is, wholes=wholes,
                        kept_whole=(kept or {}).get("median_ms"))
    except ValueError as e:
        say(str(e))
        return None
    finally:
        if kept_mod is not None and kept_mod is not kept_artifact:
            kept_mod.close()
    if kept is not None:
        kept.update(oracle_ms=h["oracle_ms"], headroom_captured=h["captured"])
    plans = None
    if getattr(opts, "oracle_plans", False) and h["headroom_share"]:
        from provmap.workbench.oracle_plan import oracle_plans

        try:
            plans = oracle_plans(view, h, every, say=say)
        except Exception as e:  # the limit row stands without them
            say(f"headroom: the oracle's plans could not be measured: {e}".splitlines()[0])
            plans = {"tried": [], "note": f"{type(e).__name__}: {e}".splitlines()[0]}
    return {"model": rows[0]["model"] if rows else view.imported.label,
            "oracle_ms": h["oracle_ms"], "calibrated_ms": h["calibrated_ms"],
            "oracle_sum_ms": h["oracle_sum_ms"],
            "bound_by": h["bound_by"], "headroom_share": h["headroom_share"],
            "best_single": h["best_single"], "best_single_ms": h["best_single_ms"],
            "kept": kept["kept"] if kept else None,
            "kept_ms": h["kept_ms"], "captured": h["captured"],
            "noisy": bool((kept or {}).get("noisy") or h["conditions"].get("contended")),
            "profiled": {b: p["profiled_ms"] for b, p in h["per_backend"].items()},
            # what the node times were calibrated to: the latency run's medians, or the profile
            "wholes_from": h["wholes_from"],
            "wholes": {b: p["e2e_ms"] for b, p in h["per_backend"].items()},
            "attributed": {b: p["attributed_share"] for b, p in h["per_backend"].items()},
            # enough to recompute the bound offline (workbench.headroom.saved_oracle)
            "units": h.get("units", []), "per_node_ms": h.get("per_node_ms"),
            "scales": {b: p["scale"] for b, p in h["per_backend"].items()},
            "calibrated_nodes": {b: p["calibrated_nodes"] for b, p in h["per_backend"].items()},
            "nodes_fastest_on": h["nodes_fastest_on"], "failed": h["failed"],
            "unattributed": h.get("unattributed", {}),
            # the oracle's own assignments built and measured (workbench/oracle_plan.py)
            "oracle_plans": plans,
            "conditions": h["conditions"]}
