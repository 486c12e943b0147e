"""What bench adds to each model's rows about how far to trust them and how far a plan could go.

* Load: the latency run of a model (every strategy interleaved) is one measuring window
  (`provmap.partition.measure.contention`); each row records that window's load and the other
  processes' CPU, and is marked noisy when the window was contended or the row's own samples
  spread more than `SPREAD_MAX` ((p90 - min) / median).  A noisy row's ratio is not a result.
* Limit: the per-node oracle (`provmap.workbench.headroom`) over the searched backends and their
  variants, and the share of the headroom the kept plan captured, from this run's medians:
  (best single - kept) / (best single - oracle).  See docs/bench.md.
"""

from __future__ import annotations

from provmap.partition.measure.contention import SPREAD_MAX, Window


def measured_with_load(measure, say):
    """`measure()` in a window: (its result, the window's Conditions); says so if contended."""
    w = Window()
    out = measure()
    cond = w.stop()
    if cond.contended:
        say(cond.line("latency run") + "; its rows are marked noisy")
    return out, cond


def row_load(cond, summary: dict) -> dict:
    """The row's fields: the window's load, and whether the row is noisy (and why)."""
    why = list(cond.reasons)
    if (summary.get("spread") or 0) > SPREAD_MAX:
        why.append(f"samples spread {summary['spread']:.2f}")
    return {"load": {"load1": round(cond.load1, 2), "others_cores": round(cond.others_cores, 2),
                     "steal_share": round(cond.steal_share, 3), "cores": cond.cores},
            "noisy": bool(why), "noisy_why": "; ".join(why)}


def headroom(view, opts, rows: list[dict], say, repeats: int = 10) -> dict | None:
    """The model's limit row: the oracle over `opts.search_backends` and their end-to-end
    variants, best single and kept from `rows` (this run's medians), and the captured share."""
    from provmap.partition.collage import CollageOptions
    from provmap.partition.variants import e2e_variants
    from provmap.runtime_module.registry import get_backend
    from provmap.workbench.headroom import captured_share, node_oracle

    searched = {b: get_backend(b) for b in opts.search_backends}
    every = {**searched, **{v: be for v, (_o, be) in
                            e2e_variants(searched, CollageOptions().e2e_variants).items()}}
    try:
        h = node_oracle(view, every, repeats=repeats, progress=say)
    except ValueError as e:
        say(str(e))
        return None
    kept = next((r for r in rows if r["strategy"].startswith("collage")), None)
    best = next((r for r in rows if r["strategy"] == r.get("best_single")), None)
    best_ms = best["median_ms"] if best else None
    kept_ms = kept["median_ms"] if kept else None
    share = captured_share(best_ms, kept_ms, h["oracle_ms"])
    if kept is not None:
        kept.update(oracle_ms=h["oracle_ms"], headroom_captured=share)
    return {"model": rows[0]["model"] if rows else view.imported.label,
            "oracle_ms": h["oracle_ms"], "best_single": best["strategy"] if best else None,
            "best_single_ms": best_ms, "kept": kept["kept"] if kept else None,
            "kept_ms": kept_ms, "captured": share,
            "noisy": bool((kept or {}).get("noisy") or (best or {}).get("noisy")
                          or h["conditions"].get("contended")),
            "profiled": {b: p["e2e_ms"] for b, p in h["per_backend"].items()},
            "nodes_fastest_on": h["nodes_fastest_on"], "failed": h["failed"],
            "unattributed": h.get("unattributed", {}),
            "conditions": h["conditions"]}
