"""The bench record's Collage search tables: what a cold compile costs, and which level kept the plan.

The compile's time is split into the search, the wait for quiet and the rest, because issue 51's
"a cold collage search within 10 minutes" is about provmap's work. On a shared 2-core host the
end-to-end check and the second level wait whenever a neighbour holds a CPU or its physical
core's sibling (partition/decision.py); that wait was up to 560 s of one 1,152 s compile. It is
the machine's time, not the search's, so a reader needs the two apart to judge either.
"""

from __future__ import annotations

from .md import fmt, table


def waited_s(s: dict) -> float:
    """Seconds the compile's phases waited for quiet (the record's conditions, phase by phase:
    the wait before the search, the end-to-end check's, the second level's)."""
    phases = (s.get("conditions") or {}).get("phases") or {}
    return sum(float((p or {}).get("waited_s") or 0.0) for p in phases.values())


def _states(s: dict) -> str:
    """The first level's states expanded and its peak RSS (from its start); "beam" when its
    bound made it give up the shortest path (rows older than issue 51 have neither: "-")."""
    if s.get("search_states") is None:
        return "-"
    rss = s.get("search_peak_rss_mb")
    return (f"{s['search_states']}" + (f" ({rss:.0f})" if rss else "")
            + (" beam" if s.get("search_method") == "beam" else ""))


def _hogged(s: dict) -> str:
    """A search beside a one-core hog (`--search-beside-hog`) and what its record says."""
    if not s.get("beside_hog"):
        return ""
    cond = s.get("conditions") or {}
    what = ("; measured beside the load (accepted)" if cond.get("contended") else
            "; quiet by the time it measured")
    ends = " that ends when the search waits" if s.get("beside_hog") == "ends" else ""
    return f" **[searched beside a one-core hog{ends}{what}]**".replace("|", "/")


def _first(s: dict) -> list:
    """first compile s, of it search s, of it waiting for quiet s, the rest s."""
    wait = waited_s(s)
    return [f"{s['first_s']:.1f}", f"{s['first_search_only_s']:.1f}", f"{wait:.1f}",
            f"{s['first_s'] - s['first_search_only_s'] - wait:.1f}"]


def search_tables(rows: list[dict]) -> list[str]:
    """The search table, and the two levels' table for rows that record a level."""
    if not rows:
        return []
    lines = table(
        "Collage search: first compile (cold when the cache is fresh), split into the search, "
        "the phases' wait for quiet (a neighbour on a CPU or its physical core: the machine's "
        "time, not provmap's) and the rest (building the whole-model plans, the end-to-end "
        "check, the second level, writing the artifact); a second compile on the same cache "
        "(search only: every price a cache hit); and the first compile's command again "
        "(end-to-end check on: the kept plan comes from the cost cache; 'searched' if it did "
        "not).",
        ["model", "backends", "cache", "first compile s", "of it search s",
         "of it waiting for quiet s", "the rest s", "candidates", "after pruning", "measured",
         "skipped (budget)", "cache hits", "invalid", "states (peak RSS MB)",
         "second compile s (measured)", "same command again s", "kept", "why"],
        [[s["model"], s["strategy"].split(":", 1)[-1], s["cache"], *_first(s),
          s["candidates"], s["after_pruning"], s["measured"], s.get("skipped_budget", 0),
          s["cache_hits"], s["invalid"], _states(s), f"{s['warm_s']:.1f} ({s['warm_measured']})",
          (fmt(s.get("warm_e2e_s"), "{:.1f}") + ("" if s.get("warm_e2e_plan_reused", True)
                                                 else " (searched)")), s["kept"],
          (s.get("e2e_why") or "-").replace("|", "/")
          + (" (measured under contention: not stored in the plan cache)"
             if s.get("plan_cache_refused") else "") + _hogged(s)]
         for s in rows])
    levels = [s for s in rows if s.get("level")]
    if levels:
        lines += table(
            "Collage's two levels: the first level's (DP) plan, estimated from isolated "
            "prices and measured end to end; the second level's end-to-end measured changes "
            "to the kept plan; and which level found the plan the artifact keeps.",
            ["model", "DP partitions", "DP estimated ms", "DP measured ms",
             "second level: kept / proposed", "second level s", "stopped",
             "kept plan found by"],
            [[s["model"], s.get("first_level_partitions", "-"),
              fmt(s.get("first_level_estimated_ms"), "{:.2f}"),
              fmt(s.get("first_level_measured_ms"), "{:.2f}", "same as a single plan"),
              (f"{s['refine']['kept']} / {s['refine']['proposals']}" if s.get("refine")
               else "off"),
              fmt((s.get("refine") or {}).get("seconds"), "{:.0f}"),
              (s.get("refine") or {}).get("stopped") or "-",
              s["level"]] for s in levels])
    return lines
