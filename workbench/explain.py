"""Why each partition is where it is, from what the Collage search recorded in the manifest.

For every partition of the searched plan: what the search paid for it (the sum of the chosen
candidates inside it), the same region priced as one partition on each backend, and the backend
greedy would have used; then the end-to-end check that may have replaced the searched plan by a
single-backend or greedy plan (isolated costs do not add up), with its measured latencies;
then the second level's trail: every change it proposed to that plan, measured end to end, and
whether it was kept; and the schedule the artifact runs under (serial, or stages of partitions
run at once), with the concurrent schedules the second level measured.  Offline: everything comes
from the artifact.
"""

from __future__ import annotations

from provmap.partition.collage_report import CollageReport, predicted_vs_measured
from provmap.runtime_module.schedule import asap_stages, describe


def _op_nodes(n: int) -> str:
    """As inspect says it ("(1 ops)": the seventeenth afternoon)."""
    return f"{n} op node{'s' if n != 1 else ''}"


def level_words(level) -> str:
    """The search level that found the kept plan, as a sentence says it (a summary that ended
    "found by: first" told the user nothing: issue 36)."""
    if level == "first":
        return "the first level (the shortest path over measured candidates)"
    if level == "second":
        return "the second level (end-to-end measured changes to the first level's plan)"
    return f"the {level}" if level else "(not recorded)"


def explain_schedule(manifest: dict) -> dict:
    """The schedule the artifact runs under, whether its partitions could run at once at all,
    and what the second level measured for concurrent schedules (kept or rejected, with the
    medians and minimums of both sides)."""
    parts = manifest.get("partitions") or []
    sched = manifest.get("schedule")
    search = ((manifest.get("plan_info") or {}).get("collage") or {}).get("schedule_search")
    return {"schedule": sched, "text": describe(sched),
            "independent_stages": [s for s in asap_stages(parts) if len(s) > 1] if parts else [],
            "search": search}


def format_schedule(s: dict) -> list[str]:
    lines = [f"schedule: {s['text']}"]
    if s["schedule"] and s["schedule"].get("why"):
        lines.append(f"  {s['schedule']['why']}")
    if not s["independent_stages"] and not s["schedule"]:
        lines.append("  no two partitions are independent: nothing can run at once")
    found = s.get("search")
    if found and found.get("trail"):
        lines.append(f"concurrent schedules measured end to end against {found['start']}: "
                     f"{len(found['trail'])} proposal(s), {found['kept']} kept")
        for t in found["trail"]:
            if t.get("proposal") and t.get("incumbent"):
                p, i = t["proposal"], t["incumbent"]
                verdict = ("kept because" if t["status"] == "kept" else "rejected:")
                lines.append(f"  [{t['status']}] {t['change']}: {verdict} {p['median_ms']:.3f} "
                             f"vs {i['median_ms']:.3f} ms median, {p['min_ms']:.3f} vs "
                             f"{i['min_ms']:.3f} ms min")
            else:
                lines.append(f"  [{t['status']}] {t['change']}")
            if t.get("reason"):
                lines.append(f"      {t['reason']}")
    elif found is None and s["independent_stages"] and not s["schedule"]:
        lines.append("  independent partitions: " + "; ".join("+".join(x) for x in
                                                              s["independent_stages"])
                     + " (no concurrent schedule was measured)")
    return lines


def explain_artifact(manifest: dict) -> dict:
    info = (manifest.get("plan_info") or {}).get("collage")
    strategy = manifest["strategy"]
    parts_by_ops = {frozenset(p["ops"]): p for p in manifest["partitions"]}
    if not info:
        plan_info = manifest.get("plan_info") or {}
        decisions = plan_info.get("decisions") or []
        by_node = {d["node"]: d for d in decisions}
        order = plan_info.get("order")
        note = "no search: partitions were assigned by rule"
        if order:
            note += (f" (greedy: each node goes to the first of {', '.join(order)} that supports "
                     f"it; {len(decisions)} node(s) did not get {order[0]})")
        return {"strategy": strategy, "searched": False, "note": note,
                "schedule": explain_schedule(manifest),
                "partitions": [{"partition": p["id"], "backend": p["backend"], "ops": len(p["ops"]),
                                "why": p.get("why", ""),
                                "nodes_declined_elsewhere": [by_node[n] for n in p["ops"]
                                                             if n in by_node]}
                               for p in manifest["partitions"]]}
    rep = CollageReport.from_json(info)
    rows = []
    flags = rep.constraint_flags or []
    for e in rep.explain or []:
        art_p = parts_by_ops.get(frozenset(e["op_ids"]))
        mine_ids = set(e["op_ids"])
        given = sorted({f["flag"] for f in flags if f["node"] in mine_ids})
        alts = {b: a.get("ms") for b, a in e["alternatives"].items()}
        priced = {b: v for b, v in alts.items() if v is not None}
        best_other = min((v for b, v in priced.items() if b != e["backend"]), default=None)
        mine = priced.get(e["backend"])
        if mine is not None and best_other is not None:
            verdict = (f"{e['backend']} is {best_other / mine:.2f}x cheaper than the next backend "
                       "for this region" if mine <= best_other else
                       f"as one partition {e['backend']} costs more than another backend "
                       f"({mine:.3f} vs {best_other:.3f} ms); it wins through its boundaries "
                       "(crossing costs) or as the sum of smaller candidates")
        elif mine is not None:
            verdict = f"the only backend that can run this region ({e['backend']})"
        else:
            verdict = "chosen as a sum of smaller candidates; the whole region was not priced"
        pins = sorted({f["flag"] for f in flags if f["node"] in mine_ids and f["kind"] == "pin"})
        if pins and not (mine is not None and best_other is not None and mine <= best_other):
            # the user's pin, not the prices, put it here: no guessing at boundaries
            verdict = (f"placed on {e['backend']} by {', '.join(pins)}"
                       + (f" ({mine:.3f} ms here vs {best_other:.3f} on the next backend)"
                          if mine is not None and best_other is not None else ""))
        rows.append({"constraints": given,"partition": art_p["id"] if art_p else None, "backend": e["backend"],
                     "ops": e["ops"], "first": e["first"], "searched_ms": e["searched_ms"],
                     "alternatives_ms": alts,
                     "reasons": {b: a.get("reason") for b, a in e["alternatives"].items()
                                 if a.get("ms") is None},
                     "greedy_backend": e.get("greedy_backend"),
                     "from_candidates": e.get("from_candidates"), "verdict": verdict,
                     "in_artifact": art_p is not None})
    e2e = rep.e2e or {}
    return {"strategy": strategy, "searched": True, "backends": rep.backends,
            "profile_points": (manifest.get("plan_info") or {}).get("profile_points"),
            "estimated_ms": rep.estimated_ms, "crossing_ms": rep.crossing_ms,
            "partitions": rows,
            "end_to_end": {"winner": e2e.get("winner"), "why": e2e.get("why"),
                           "note": e2e.get("note"),
                           "measured_ms": {k: v.get("median_ms")
                                           for k, v in (e2e.get("measured") or {}).items()},
                           "measured_min_ms": {k: v.get("min_ms")
                                               for k, v in (e2e.get("measured") or {}).items()},
                           "same_as_collage": rep.e2e_same_as_collage,
                           "decision": e2e.get("decision"), "accuracy": rep.e2e_accuracy},
            "second_level": rep.refine,
            "in_context": rep.in_context,
            "measured_on": rep.measured_on,
            "e2e_skipped": rep.e2e_skipped,
            "level": rep.level,
            "predicted_vs_measured": predicted_vs_measured(info, strategy),
            "schedule": explain_schedule(manifest),
            "conditions": rep.conditions,
            "plan_cache_refused": rep.plan_cache_refused,
            "kept": strategy}


def format_explain(x: dict) -> str:
    """explain_lines as text, as the artifact's names are: a caller printing to a terminal
    escapes each line (the CLI does), since a name may hold a newline."""
    return "".join(ln + "\n" for ln in explain_lines(x))


def explain_lines(x: dict) -> list[str]:
    """The report one line per entry; a line break inside an entry is a name's own, so a
    printer escapes it rather than split on it (a node name forged an output line: the
    twelfth afternoon)."""
    lines = [f"strategy: {x['strategy']}"]
    if x.get("schedule"):
        lines.extend(format_schedule(x["schedule"]))
    if not x["searched"]:
        lines.append(x["note"])
        for p in x["partitions"]:
            lines.append(f"  {p['partition']} {p['backend']} ({_op_nodes(p['ops'])}): {p['why']}")
            for d in p.get("nodes_declined_elsewhere") or []:
                why = "; ".join(f"{b}: {r}" for b, r in d["declined_by"].items())
                lines.append(f"      {d['node_desc']} -> {d['backend']} because {why}")
        return lines + _measuring_section(x)
    if x.get("profile_points"):
        from provmap.partition.profile_plan import describe_points

        lines.append("shape profile: searched at opt; the kept plan and each library's default "
                     "plan measured interleaved at each point (median):")
        lines.extend(f"  {ln}" for ln in describe_points(x["profile_points"]))
    est = x.get("estimated_ms") or {}
    lines.append("search estimates (ms): " + ", ".join(
        f"{k} {v:.3f}" if v is not None else f"{k} invalid" for k, v in est.items()))
    lines.append("searched plan, per partition (region priced as one partition on each backend):")
    for r in x["partitions"]:
        alts = ", ".join(f"{b} {v:.3f}" if v is not None else f"{b} -"
                         for b, v in r["alternatives_ms"].items())
        pid = r["partition"] or "(not in the artifact)"
        lines.append(f"  {pid} {r['backend']}: {r['ops']} ops from {r['first']}; searched "
                     f"{r['searched_ms']:.3f} ms; as one partition: {alts}; greedy would use "
                     f"{r['greedy_backend']}")
        lines.append(f"      {r['verdict']}")
        if r.get("constraints"):
            lines.append(f"      your constraints on its nodes: {'; '.join(r['constraints'])}")
        for b, why in r["reasons"].items():
            lines.append(f"      {b}: {why}")
    e = x["end_to_end"]
    if e["measured_ms"]:
        mins = e.get("measured_min_ms") or {}
        lines.append("end-to-end check (measured, ms, median / min): " + ", ".join(
            f"{k} {v:.3f} / {mins[k]:.3f}" if mins.get(k) is not None else f"{k} {v:.3f}"
            for k, v in e["measured_ms"].items()))
        dec = e.get("decision") or {}
        if dec.get("passes"):  # the one comparison procedure's record (partition/decision.py)
            lines.append(f"  {dec['passes']} paired passes, judged by the {dec['statistic']}; "
                         + ("decided" if dec.get("decided") else
                            "undecided (the simpler plan stays)"))
            for k, why in (dec.get("left") or {}).items():
                lines.append(f"  {k} left: {why}")
        lines.append(f"  kept {e['winner']}: {e['why']}")
        if e.get("note"):
            lines.append(f"  {e['note']}")
        lines += _accuracy_lines(e.get("accuracy"))
    r2 = x.get("second_level")
    if r2:
        lines.append(f"second level (end-to-end measured changes to {r2['start']}): "
                     f"{r2['proposals']} proposal(s), {r2['kept']} kept, {r2['seconds']} s, "
                     f"{r2['stopped']}")
        for t in r2["trail"]:
            m = ""
            if t.get("proposal") and t.get("incumbent"):
                m = (f": {t['proposal']['median_ms']:.3f} vs {t['incumbent']['median_ms']:.3f} ms "
                     f"median, {t['proposal']['min_ms']:.3f} vs {t['incumbent']['min_ms']:.3f} min")
            lines.append(f"  [{t['status']}] {t['change']}{m}")
            if t.get("reason"):
                lines.append(f"      {t['reason']}")
    if x.get("in_context"):
        lines.append("partition times inside the kept plan (fed back to the cost cache) vs "
                     "isolated price:")
        for r in x["in_context"]:
            iso = f"{r['isolated_ms']:.3f}" if r.get("isolated_ms") is not None else "-"
            lines.append(f"  {r['partition']} {r['backend']} ({_op_nodes(r['ops'])}): "
                         f"{r['in_context_ms']:.3f} ms in context, {iso} ms isolated"
                         + (" (not stored: measured under contention)"
                            if r.get("not_stored") else ""))
    on = x.get("measured_on")
    if on:
        dev = on.get("device") or {}
        lines.append(f"prices measured on: {on.get('where')} (device {dev.get('host')})")
    if x.get("e2e_skipped"):
        lines.append(f"  {x['e2e_skipped']}")
    if x.get("level"):
        lines.append(f"kept plan found by: {level_words(x['level'])}")
    pm = x.get("predicted_vs_measured")
    if pm and pm.get("label"):
        lines.append(_predicted_line(pm))
    return lines + _measuring_section(x)


def _accuracy_lines(acc: dict | None) -> list[str]:
    """How far each plan measured whole was from the reference (partition/measure/
    plan_accuracy.py), and the mixes refused for being further than their libraries alone."""
    if not acc:
        return []
    if acc.get("skipped"):
        return [f"  outputs not compared end to end: {acc['skipped']}"]

    def far(d):
        if d["distance"] is None:
            return "no comparable output"
        return f"{d['distance']:.3g} step(s)" if d["steps"] else f"max abs {d['distance']:.3g}"

    lines = [f"  outputs against {acc['reference']} on the check's inputs: " + ", ".join(
        f"{k} {far(d)}" for k, d in acc["distances"].items())]
    lines += [f"  {k} refused: {why}" for k, why in (acc.get("refused") or {}).items()]
    return lines


def _predicted_line(pm: dict) -> str:
    """The kept plan's predicted vs measured time in one line (bench's column reads the same)."""
    p, m = pm.get("predicted_ms"), pm.get("measured_ms")
    pred = (f"predicted {p:.3f} ms (first level's estimate)" if p is not None else
            "no prediction (the first level did not price this plan)")
    meas = (f"measured {m:.3f} ms (end-to-end median)" if m is not None else
            "not measured end to end")
    ratio = f"; predicted / measured {pm['ratio']:.2f}" if pm.get("ratio") is not None else ""
    return f"kept plan {pm['label']}: {pred} vs {meas}{ratio}"


def _measuring_section(x: dict) -> list[str]:
    """The conditions the search measured under (partition/measure/hygiene.py), and the limit when
    `explain --headroom` measured it (workbench/headroom.py)."""
    from .headroom import format_headroom

    lines = []
    cond = x.get("conditions")
    if cond:
        lines.append("measuring conditions: " + (
            f"contended ({cond['reason']})" if cond.get("contended") else "no contention")
            + ("; so the kept plan was not stored in the plan cache"
               if x.get("plan_cache_refused") else ""))
    if x.get("headroom"):
        lines += format_headroom(x["headroom"])
        if x["headroom"].get("oracle_plans") is not None:
            from .oracle_plan import format_oracle_plans

            lines += format_oracle_plans(x["headroom"]["oracle_plans"])
    return lines
