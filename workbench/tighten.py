"""The priced limit tightened by measuring its own plans: regions timed in context.

The priced limit (cut_price.py) still takes each unit's time from a profile of the whole model
on one backend.  Where a region's profile shares are wrong (SqueezeNet, 2026-11-26: a 1-cut plan
predicted 36% faster measured 23% slower, far more than any cut costs), pricing cuts cannot fix
it; only timing the region where it runs can.  So, round by round:

1. the cheapest priced path over the current unit costs; if it stays on the best single
   configuration, the limit is that configuration and there is no room;
2. its plan is built and measured beside the best single, each alone, and hooked runs time each
   partition in the plan (in context: after its neighbours, with its own call and copies);
3. each partition that left the best single configuration gets its measured time: its nodes'
   costs on that backend are scaled so they add up to the measured time (on the profile's scale,
   less one cut's price, which the path charges anyway).  The best single configuration's costs
   stay as profiled: they are the plan being compared against.

Each round also measures the same cuts with every partition on the best single configuration
(its same-cuts twin): where those cuts cost less than kappa, the later rounds and the final limit
charge what they measured instead (`_cheaper_kappa`), so no cut is priced above what one cost.

A one-cut plan's twin prices that very cut: where it measured above kappa, the later rounds
and the final limit charge that position what it measured (`_price_own_cut`), as kappa is
charged elsewhere.

It stops when the path stays on one configuration, returns a plan already measured, a plan
measures faster than the best single by median and minimum (a win: room that exists), or after
`ROUNDS` rounds.  The limit it reports is the last path's cost over the costs measured so far:
every region it moves has either been timed in context or is still on the profile's word, and
the rounds say which, except where that path *is* a plan the rounds measured: then the
measurement is the figure, not the price (`settle`).
"""

from __future__ import annotations

from .cut_price import in_run_order, priced_path

#: At most this many plans are built and measured (each one: a build and a measuring run).
ROUNDS = 4


def tighten(view, o: dict, cal: dict, units: list[list[str]], measure,
            rounds: int = ROUNDS) -> list[dict]:
    """Measure the priced limit's plans (see the module doc); updates o["priced"] with
    `rounds` and the tightened limit, returns the measured rows.  `measure(choice, label)`
    builds and measures a plan beside the best single: (its row with a per-partition
    `breakdown`, its artifact or None), as oracle_plan.measure_choice does."""
    p = o["priced"]
    best, kappa, whole = o["best_single"], p["kappa_ms"], p["whole_ms"]
    ref = o.get("best_single_breakdown") or {}
    # hooked runs are on their own scale: the best single's measured / predicted converts
    scale = (ref["e2e_ms"] / ref["predicted_partitions_ms"]
             if ref.get("e2e_ms") and ref.get("predicted_partitions_ms") else 1.0)
    position = {n: k for k, n in enumerate(view.node_ids)}
    costs = {b: dict(ns) for b, ns in cal.items()}
    rows, log, seen = [], [], {}  # seen: a measured plan's choice -> its label
    at: dict = {}  # node id -> the measured price of the one cut before its unit
    stopped = f"after {rounds} rounds"
    for k in range(1, rounds + 1):
        ms, choice, cuts = priced_path(costs, units, position, kappa, at)
        if not cuts:
            stopped = "the path stays on the best single configuration"
            break
        key = tuple(sorted(choice.items()))
        if key in seen:
            stopped = "the path returned a plan already measured"
            break
        label = "priced limit" if k == 1 else f"priced limit, round {k}"
        seen[key] = label
        row, art = measure(choice, label)
        row["predicted_ms"] = ms
        row["predicted_vs_best"] = ms / whole - 1 if whole > 0 else None
        rows.append(row)
        step = {"round": k, "plan": label, "cuts": cuts, "predicted_vs_best":
                row["predicted_vs_best"], "vs_best_median": row.get("vs_best_median"),
                "vs_best_min": row.get("vs_best_min"), "timed": [],
                "own_cuts": own_cuts(row, kappa)}
        log.append(step)
        kappa = _cheaper_kappa(step["own_cuts"], kappa, step)
        _price_own_cut(step, choice, units, position, kappa, at)
        if art is None:
            stopped = f"the {label} plan did not build"
            break
        if faster_once(row):
            if row.get("contended"):  # not a result: the rounds end without a verdict
                stopped = (f"the {label} plan measured faster under contention "
                           f"({row['contended']}): not a win")
            else:
                stopped = f"the {label} plan measured faster than the best single"
            break
        if row.get("contended"):
            stopped = f"contention while measuring the {label} plan ({row['contended']})"
            break
        step["timed"] = _time_regions(art, row["breakdown"], costs, best, kappa, scale)
    final_ms, final, final_cuts = priced_path(costs, units, position, kappa, at)
    final_ms = min(final_ms, whole) if whole > 0 else final_ms
    p.update(rounds=log, stopped=stopped, tightened_ms=final_ms, tightened_cuts=final_cuts,
             tightened_kappa_ms=kappa, cut_prices_ms=dict(at),
             noisy=bool(o.get("contended") or any(r.get("contended") for r in rows)),
             tightened_share=(whole - final_ms) / whole if whole > 0 else None)
    p["final_plan"] = seen.get(tuple(sorted(final.items()))) if final_cuts else None
    p["final_path_cuts"] = final_cuts
    settle(p, rows)
    return rows


def faster_once(row: dict) -> bool:
    """Faster than the best single by median and by minimum in the run that measured it: what
    sends a limit plan to the comparison procedure (oracle_plan._again), never a verdict."""
    return row.get("vs_best_median", 1) < 0 and row.get("vs_best_min", 1) < 0


def settle(p: dict, rows: list[dict]) -> None:
    """Where the final path is a plan the rounds already measured, its figure is what it
    measured, not what it was priced at.  Why: the price is the profile's word on regions
    the path moves, and that plan has been measured end to end; MobileNet-v3 (2026-11-29)
    reported "room 6%" for a path that was its round-1 plan, measured +14% by median and +20%
    by minimum, and the detector "room 10%" for a round-1 plan that measured faster once and
    lost when the comparison procedure measured it again (oracle_plan._again).

    So: a plan the comparison procedure decided faster has its decided gain as the room; one
    it did not, or one that never measured faster by both statistics, leaves the best single
    configuration as the limit (no room, no cuts).  A plan faster in its round and not yet
    decided has the smaller of its two gains, until oracle_plan calls this again with the
    decision.  Called by tighten at its end, and by oracle_plan after `_again`."""
    label = p.get("final_plan")
    row = next((r for r in rows if r["plan"] == label), None) if label else None
    whole = p.get("whole_ms") or 0.0
    if row is None or whole <= 0 or row.get("vs_best_median") is None:
        return
    again = row.get("again")
    if again is not None:
        faster = again["faster"]
        gain = -(again.get("vs_best_median") or 0.0)
    else:
        faster = faster_once(row) and not row.get("contended")
        gain = -max(row["vs_best_median"], row["vs_best_min"])
    gain = max(gain, 0.0) if faster else 0.0
    p.update(tightened_ms=whole * (1 - gain), tightened_share=gain,
             tightened_cuts=p.get("final_path_cuts", 0) if gain > 0 else 0,
             final_measured={"plan": label, "vs_best_median": row["vs_best_median"],
                             "vs_best_min": row["vs_best_min"], "faster": faster,
                             "decided": again is not None})


def own_cuts(row: dict, kappa: float) -> dict | None:
    """What this plan's own cuts cost, from its same-cuts twin (oracle_plan.same_cuts_plan):
    the twin's excess over the uncut best single, per cut, by median and minimum, beside the
    kappa the path charged.  kappa is the cheapest *average* over earlier plans; a path whose
    own cuts measure cheaper than kappa was priced too high there, and the round says so
    (`below_kappa`) instead of the bound silently resting on it."""
    sc = row.get("same_cuts")
    if not sc or sc.get("failed") or not sc.get("cuts"):
        return {"failed": sc["failed"]} if sc and sc.get("failed") else None
    n = sc["cuts"]
    med = (sc["measured_ms"] - sc["best_single_ms"]) / n
    mn = (sc["min_ms"] - sc["best_single_min_ms"]) / n
    return {"cuts": n, "per_cut_median_ms": med, "per_cut_min_ms": mn,
            "vs_best_median": sc["vs_best_median"], "vs_best_min": sc["vs_best_min"],
            "kappa_ms": kappa, "below_kappa": max(med, mn) < kappa,
            "contended": sc.get("contended")}


def _cheaper_kappa(own: dict | None, kappa: float, step: dict) -> float:
    """The price the later rounds and the final limit charge per cut: kappa, or the cheaper
    price this round's own cuts measured on the best single (its same-cuts twin), floored at 0.

    Why lower it: the limit is a bound only while no cut is charged more than cuts were seen to
    cost.  kappa averages earlier plans' excess over additivity; a twin that measured its cuts
    cheaper (EfficientNet-B0, 2026-11-27: a twin faster than the uncut best single) shows the
    path charged too much, and keeping kappa would have claimed "no room" on an overpriced path.
    A twin measured under contention prices nothing.

    Both statistics must be below kappa, and the price is the larger (what both measured at
    least): EfficientNet-B0's twin (2026-11-28) measured its two cuts -0.369 ms each by median
    (OpenVINO split faster than whole, the median of a moment the machine was fast) and +0.085
    by minimum; taking the smaller made every cut free from then on, and the final path, 34
    cuts never measured together, claimed 10.5% of room that none of the four measured plans
    had shown (all +0.4% to +16% slower by minimum).  One statistic going negative is the
    drift (`python -m provmap.bench.drift`), not a cut that saves time."""
    if not own or own.get("failed") or own.get("contended") or not own.get("below_kappa"):
        return kappa
    lower = max(own["per_cut_median_ms"], own["per_cut_min_ms"], 0.0)
    step["kappa_after_ms"] = lower
    return lower


def _price_own_cut(step: dict, choice: dict, units: list[list[str]], position: dict,
                   kappa: float, at: dict) -> None:
    """A one-cut plan whose same-cuts twin measured that cut above kappa: the later rounds
    and the final limit charge that position what it measured.  Why: MobileNet-v3
    (2026-11-27) kept returning to a one-cut plan whose cut its twin measured at 1.6-1.8 ms
    (kappa 0.135), ending the rounds on "a plan already measured" with 7.1% of room that
    plan had measured +24% slower.  Only a one-cut twin prices a position exactly (a several-cut
    twin gives their average, which may hide a cheaper one), and only upward of kappa, the
    price every other position keeps; a position priced so is one whose cut was seen to cost
    that, the same footing kappa stands on."""
    own = step.get("own_cuts")
    if not own or own.get("failed") or own.get("contended") or own.get("cuts") != 1:
        return
    price = min(own["per_cut_median_ms"], own["per_cut_min_ms"])
    if price <= kappa:
        return
    seq = in_run_order(units, position)
    for prev, u in zip(seq, seq[1:]):
        if choice.get(prev[0]) != choice.get(u[0]):  # the cut: before unit u
            head = min(u, key=lambda i: position.get(i, len(position)))
            at[head] = max(at.get(head, 0.0), price)
            step["cut_priced_ms"] = {"before": head, "ms": price}
            return


def _time_regions(art, bd: dict, costs: dict, best: str, kappa: float, scale: float
                  ) -> list[dict]:
    """Scale each moved partition's node costs to its measured time (see the module doc)."""
    nodes = {q["id"]: list(q.get("onnx_nodes", ())) for q in art.manifest["partitions"]}
    timed = []
    for part in bd.get("partitions", []):
        b = part["backend"]
        if b == best or part.get("measured_ms") is None or b not in costs:
            continue
        ids = nodes.get(part["id"], [])
        before = sum(costs[b].get(n, 0.0) for n in ids)
        after = max(part["measured_ms"] / scale - kappa, 0.0)
        if before > 0:
            for n in ids:
                if n in costs[b]:
                    costs[b][n] *= after / before
        timed.append({"backend": b, "nodes": len(ids), "profiled_ms": before,
                      "measured_ms": after})
    return timed
