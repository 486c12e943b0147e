"""The limit with its cuts priced: how much room is left once a boundary costs what it measured.

The oracle (workbench/headroom.py) lets every fused unit run on its fastest backend with free
boundaries.  Its own plans, built and measured (workbench/oracle_plan.py), showed boundaries are
anything but free: on the four user-sized CNNs of 2026-11-26 each plan's partitions took
1.3-3.3x their calibrated node times, while the executor's time between them stayed under 1 ms.
A cut costs inside the partitions (lost fusion, each library's per-call work, cold caches,
layout reorders at the edges), so "headroom 30%" was what a plan could have *if* cuts were free.

So the cut gets a price, and the limit is recomputed with it:

* kappa, the price of one cut, from the model's own measured oracle plans: a plan of P
  partitions measured r times the best single configuration, where its calibrated node times
  predicted p, cost (r - p) * W more than additivity says (W: the best single's calibrated
  whole), i.e. (r - p) * W / (P - 1) per cut.  Both statistics (median, minimum) of every plan
  are taken, and kappa is the *smallest* of them: a lower price lowers the priced limit, so
  the limit stays on the optimistic side of what was measured.  A negative or missing value
  means the cut could not be priced on this model, and kappa is 0 (the unpriced limit);
* the priced limit is a shortest path over the fused units in the model's run order, one state
  per backend: a unit costs its calibrated time on the state's backend, a change of backend
  costs kappa.  With kappa 0 it is the unit oracle; staying on one backend is always a path, so
  it is never above the best single configuration's calibrated whole;
* break-even: the largest kappa at which the priced limit still shows `NO_ROOM` (5%) of room,
  i.e. how cheap cuts would have to be for a partitioned plan to be worth building.

What this assumes, said where the numbers are shown: cuts cost at least kappa each on average
(kappa is the cheapest average the model's plans measured, not a per-cut minimum), and a plan's
partitions follow the run order (a plan whose partitions interleave along it would have fewer
cuts than the path counts; plan_from_choice and the search build run-order partitions).
"""

from __future__ import annotations

from .headroom import NO_ROOM


def cut_prices(o: dict, cal: dict) -> list[dict]:
    """Per measured oracle plan of two or more partitions and per statistic, the excess over
    additivity per cut in calibrated ms: [{"plan", "by", "kappa_ms"}] (see the module doc)."""
    best = o.get("best_single")
    whole = sum((cal.get(best) or {}).values())
    out = []
    if whole <= 0:
        return out
    for r in o.get("tried", []):
        if r.get("partitions", 0) < 2 or "measured_ms" not in r:
            continue
        predicted = r["predicted_ms"] / whole
        for by, key, ref in (("median", "measured_ms", "best_single_ms"),
                             ("minimum", "min_ms", "best_single_min_ms")):
            if r.get(key) and o.get(ref):
                excess = (r[key] / o[ref] - predicted) * whole
                out.append({"plan": r["plan"], "by": by,
                            "kappa_ms": excess / (r["partitions"] - 1)})
    return out


def in_run_order(units: list[list[str]], order: dict) -> list[list[str]]:
    """`units` sorted by their first node's position (`order`: node id -> position)."""
    return sorted(units, key=lambda u: min(order.get(i, len(order)) for i in u))


def priced_path(cal: dict, units: list[list[str]], order: dict, kappa: float,
                at: dict | None = None) -> tuple[float, dict, int]:
    """(the cheapest path's calibrated ms, node id -> backend, its number of cuts) over `units`
    taken in run order (`order`: node id -> position), each unit on one backend of `cal`
    ({backend: {node id: calibrated ms}}), kappa ms per change of backend, or `at`'s price for
    a cut before the unit holding that node id (a position whose own cut was measured)."""
    names = sorted(cal)
    seq = in_run_order(units, order)
    if not seq or not names:
        return 0.0, {}, 0
    cost = {b: 0.0 for b in names}
    came: list[dict] = []
    for k, u in enumerate(seq):
        here = {b: sum(cal[b].get(i, 0.0) for i in u) for b in names}
        price = max((at or {}).get(i, kappa) for i in u)  # a cut before this unit
        new, back = {}, {}
        for b in names:
            prev = b if k == 0 else min(names, key=lambda a: cost[a] + (a != b) * price)
            new[b] = (0.0 if k == 0 else cost[prev] + (prev != b) * price) + here[b]
            back[b] = prev
        cost = new
        came.append(back)
    b = min(names, key=lambda n: cost[n])
    total, choice, cuts = cost[b], {}, 0
    for u, back in zip(reversed(seq), reversed(came)):
        choice.update({i: b for i in u})
        cuts += back[b] != b
        b = back[b]
    return total, choice, cuts


def break_even(cal: dict, units: list[list[str]], order: dict, whole: float,
               share: float = NO_ROOM) -> float | None:
    """The largest kappa (ms) at which the priced limit still leaves `share` of `whole`; None
    when even free cuts leave less.  The priced limit rises with kappa, so bisection finds it."""
    def room(k):
        return (whole - priced_path(cal, units, order, k)[0]) / whole

    if whole <= 0 or room(0.0) < share:
        return None
    lo, hi = 0.0, whole
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if room(mid) >= share else (lo, mid)
    return lo


def priced_limit(o: dict, cal: dict, units: list[list[str]], order: dict) -> dict:
    """The limit with kappa priced from `o` (oracle_plans' measured result): kappa and where it
    came from, the priced limit, its headroom over the best single's calibrated whole, its
    plan's choice and cuts, and the break-even price."""
    best = o.get("best_single")
    whole = sum((cal.get(best) or {}).values())
    prices = cut_prices(o, cal)
    low = min(prices, key=lambda p: p["kappa_ms"]) if prices else None
    kappa = max(low["kappa_ms"], 0.0) if low else 0.0
    ms, choice, cuts = priced_path(cal, units, order, kappa)
    ms = min(ms, whole) if whole > 0 else ms
    share = (whole - ms) / whole if whole > 0 else None
    return {"kappa_ms": kappa, "kappa_from": low, "prices": prices,
            "priced": low is not None and low["kappa_ms"] > 0,
            "priced_ms": ms, "whole_ms": whole, "headroom_share": share,
            "cuts": cuts, "choice": choice if cuts else {},
            "break_even_ms": break_even(cal, units, order, whole)}


def format_priced(p: dict) -> list[str]:
    """The lines bench and `explain --oracle-plans` show for the priced limit."""
    if not p or p.get("headroom_share") is None:
        return []
    share = p["headroom_share"]
    verdict = "no room (<5%)" if share < NO_ROOM else f"room {share:.0%}"
    if p["priced"]:
        src = p["kappa_from"]
        price = (f"{p['kappa_ms']:.3f} ms a cut (the cheapest average measured: "
                 f"{src['plan']} by {src['by']})")
    else:
        price = "cuts free (no measured plan priced them above 0)"
    be = p.get("break_even_ms")
    return [f"limit with cuts priced at {price}: {p['priced_ms']:.3f} ms vs "
            f"{p['whole_ms']:.3f}, {p['cuts']} cut(s), headroom {share:.1%}: {verdict}",
            "  5% of room needs cuts under "
            + (f"{be:.3f} ms each" if be is not None else "0 ms: none even with free cuts")
            + "; assumes run-order partitions and cuts costing at least that on average"
            ] + format_rounds(p)


def _measured_words(m: dict | None) -> str:
    """Why the final figure is a measurement (workbench/tighten.py `settle`), in words."""
    if not m:
        return ""
    got = f"{m['vs_best_median']:+.1%} by median, {m['vs_best_min']:+.1%} by minimum"
    if m["faster"]:
        return (f"; its path is the {m['plan']} plan, measured {got}"
                + (" and decided faster" if m["decided"] else ", not yet decided")
                + ": the room is what it measured")
    return (f"; its path is the {m['plan']} plan, measured {got}"
            + (" and not decided faster" if m["decided"] else "")
            + ": the best single configuration stands")


def format_rounds(p: dict) -> list[str]:
    """The tightening's lines (workbench/tighten.py): each round's plan and the final limit."""
    if p.get("tightened_share") is None:
        return []
    out = []
    for r in p.get("rounds", []):
        got = (f"measured {r['vs_best_median']:+.1%} by median, {r['vs_best_min']:+.1%} by "
               f"minimum" if r.get("vs_best_median") is not None else "not measured")
        timed = "; ".join(f"{t['nodes']} nodes on {t['backend']}: profiled "
                          f"{t['profiled_ms']:.3f} ms, measured {t['measured_ms']:.3f}"
                          for t in r.get("timed", []))
        own = r.get("own_cuts")
        if own and own.get("failed"):
            own_text = f"; the same cuts on the best single did not build: {own['failed']}"
        elif own:
            own_text = (f"; the same cuts on the best single: {own['vs_best_median']:+.1%} by "
                        f"median, {own['vs_best_min']:+.1%} by minimum, "
                        f"{own['per_cut_median_ms']:.3f}/{own['per_cut_min_ms']:.3f} ms per "
                        f"cut (kappa {own['kappa_ms']:.3f}"
                        + (": these cuts cost less than kappa, so kappa overprices them"
                           if own["below_kappa"] else "") + ")")
        else:
            own_text = ""
        if r.get("kappa_after_ms") is not None:
            own_text += (f"; later rounds and the limit charge {r['kappa_after_ms']:.3f} ms a "
                         "cut, what these cuts measured")
        if r.get("cut_priced_ms"):
            own_text += (f"; a cut at that position costs {r['cut_priced_ms']['ms']:.3f} ms from "
                         "here on, what it measured (other positions: kappa)")
        out.append(f"  round {r['round']}: {r['cuts']} cut(s), predicted "
                   f"{r['predicted_vs_best']:+.1%}, {got}" + (f"; timed in context: {timed}"
                                                              if timed else "") + own_text)
    share = p["tightened_share"]
    out.append(f"  tightened by measuring its plans: {p['tightened_ms']:.3f} ms, "
               f"{p['tightened_cuts']} cut(s)"
               + (f" at {p['tightened_kappa_ms']:.3f} ms a cut"
                  if p.get("tightened_kappa_ms") is not None else "")
               + f", headroom {share:.1%}: "
               + ("no room (<5%)" if share < NO_ROOM else f"room {share:.0%}")
               + f" (stopped: {p['stopped']})" + _measured_words(p.get("final_measured"))
               + ("; measured under contention: not a result" if p.get("noisy") else ""))
    return out
