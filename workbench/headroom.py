"""The limit of partitioning: the oracle over ONNX nodes and fused groups, and how much of the
headroom a plan captured.

Why: "no mixed plan won" means either that the search missed a win or that there was none to
find; nothing told the two apart (issue 28).  The oracle is the sum, over ONNX nodes, of the
fastest backend's time for that node, as `profile` attributes it (`provmap.workbench.profile`)
on each searched backend and variant running the whole model alone: a plan that could run
every node on its best backend with free boundaries.  Then

    headroom = best single - bound
    captured = (best single - kept) / (best single - bound)

1 means the kept plan reached the limit, 0 that it is the best single plan, below 0 that it is
slower.  The oracle ignores boundary copies, each library's per-call cost (the partition's
"outside kernels" time, which no node owns) and what fusion across a boundary loses; a kernel
that fuses several nodes gives its time to their contractions (workbench/profile.py).

A bound, by these rules (issue 35: ResNet-50's raw per-node sum came out above OpenVINO's
measured whole, so the "bound" was only the cap):

* calibrated shares.  A backend's profiled node times t_nb do not add up to its profiled whole
  W_b (`e2e_ms` of the same runs): profiler overhead, the library's per-call time, kernels its
  profiler did not report or name.  Each backend's node times are scaled by
  s_b = W_b / sum_n t_nb, which spreads its unattributed time over its nodes in proportion to
  what they take.  That is the right choice because it is the only per-node split that keeps
  each backend's whole exactly as measured while keeping the profile's ratios between nodes; it
  assumes additivity (a node costs the same inside any plan as in the single one) and free
  boundaries (no copy or per-call cost where backends meet), the oracle's assumptions anyway.
  A backend attributing less than `MIN_ATTRIBUTED` of its time is named (`unattributed`): most
  of its calibrated node times are then spread, not measured, a rougher bound;
* the oracle is sum_n min_b s_b t_nb.  Proof that it is at most every W_b: for any backend c,
  sum_n min_b s_b t_nb <= sum_n s_c t_nc = s_c sum_n t_nc = W_c.  Every backend that ran the
  whole model and attributed any time takes part; a node missing from its profile (folded away)
  costs it nothing, which only lowers the sum.  The raw sum of per-node minimums (uncalibrated)
  stays as `oracle_sum_ms` for comparison;
* the bound is the oracle, or the fastest measured single configuration's (or kept plan's)
  time where that is lower (the kept plan is not decomposed into node times, and a backend with
  no node times cannot be calibrated), and it says so (`bound_by`);
* best single, kept and the bound come from the same profiling runs, so the captured share
  has one source.  Each backend's calibrated node times are kept (`calibrated_nodes`) so the
  bound can be recomputed offline with `saved_oracle` (with the fused `units`).
"""

from __future__ import annotations

from provmap.partition.measure.contention import Window

#: Below this share of a backend's partition time reaching ONNX nodes, the limit names the
#: backend: the rest of its time (library per-call time, kernels its profiler did not report
#: or name as the kernel map does) counts as free in the oracle.
MIN_ATTRIBUTED = 0.9


#: Below this share of headroom over the best single configuration there is no room worth a
#: partitioned plan (issue 35's done-when: "under 5% headroom left").
NO_ROOM = 0.05


def verdict(share: float | None) -> str:
    """'no room (<5%)' or 'room N%' for a headroom share; '-' when none was measured."""
    if share is None:
        return "-"
    return "no room (<5%)" if share < NO_ROOM else f"room {share:.0%}"


def captured_share(best_single_ms: float | None, kept_ms: float | None,
                   oracle_ms: float | None) -> float | None:
    """(best - kept) / (best - oracle); None when there is no headroom to capture."""
    if None in (best_single_ms, kept_ms, oracle_ms) or best_single_ms - oracle_ms <= 0:
        return None
    return (best_single_ms - kept_ms) / (best_single_ms - oracle_ms)


def _profile(art, inputs, repeats: int, say) -> dict:
    from provmap.runtime_module.module import ArtifactModule

    from .profile import profile_artifact

    mod = art if hasattr(art, "partitions") else ArtifactModule(art, trust=True)
    try:
        prof = profile_artifact(mod, inputs, repeats=repeats, kernel_repeats=max(3, repeats // 2))
    finally:
        if mod is not art:
            mod.close()
    return {"e2e_ms": prof["e2e_ms"], "groups": kernel_groups(prof["onnx_nodes"]),
            "nodes": {r["id"]: r["ms"] for r in prof["onnx_nodes"]},
            "partitions_ms": sum(p["ms"] for p in prof["partitions"]),
            "kernel_times": sorted({p["kernel_times"] for p in prof["partitions"]})}


def oracle_from(per: dict) -> tuple[float | None, dict, dict]:
    """(the raw, uncalibrated per-node sum, kept as `oracle_sum_ms` for comparison with the
    calibrated bound; node -> fastest backend; backend -> attributed share where below
    `MIN_ATTRIBUTED`) from each backend's profile of the whole model
    ({backend: {"nodes": {id: ms}, "partitions_ms": ms}}); every backend takes part, and a node
    missing from a backend's profile costs that backend nothing.  None when no backend
    attributed any time at all."""
    low = {}
    for b, p in per.items():
        share = sum(p["nodes"].values()) / p["partitions_ms"] if p["partitions_ms"] > 0 else 0.0
        if share < MIN_ATTRIBUTED:
            low[b] = share
    ids = sorted({i for p in per.values() for i in p["nodes"]})
    if not ids:
        return None, {}, low
    fastest = {i: min(per, key=lambda b: per[b]["nodes"].get(i, 0.0)) for i in ids}
    oracle = sum(per[fastest[i]]["nodes"].get(i, 0.0) for i in ids)
    return oracle, fastest, low


def calibrate(per: dict) -> dict:
    """backend -> {"scale": s_b, "nodes": {id: s_b * t_nb}} from each backend's profile
    ({backend: {"nodes": {id: ms}, "e2e_ms": W_b}}), s_b = W_b / sum_n t_nb (module doc: the
    backend's unattributed time spread over its nodes in proportion).  A backend whose profile
    gives its nodes no time has nothing to scale and is left out."""
    out = {}
    for b, p in per.items():
        total = sum(p["nodes"].values())
        if total > 0 and p["e2e_ms"] > 0:
            s = p["e2e_ms"] / total
            out[b] = {"scale": s, "nodes": {i: ms * s for i, ms in p["nodes"].items()}}
    return out


def calibrated_oracle(nodes: dict) -> tuple[float | None, dict]:
    """(sum over nodes of the fastest backend's calibrated time, node -> that backend) from
    {backend: {node id: calibrated ms}}, as `calibrate` gives them or as results saved them
    (`calibrated_nodes`); a node missing from a backend costs it nothing.  None without nodes.
    At most each backend's own calibrated sum, its measured whole (module doc)."""
    ids = sorted({i for ns in nodes.values() for i in ns})
    if not ids:
        return None, {}
    fastest = {i: min(nodes, key=lambda b: nodes[b].get(i, 0.0)) for i in ids}
    oracle = sum(nodes[fastest[i]].get(i, 0.0) for i in ids)
    # equal to a backend's whole only up to float rounding; never above it
    return min(oracle, *(sum(ns.values()) for ns in nodes.values())), fastest


def compact_nodes(nodes: dict) -> dict:
    """{node id: ms rounded to 4 decimals}, nodes at zero left out (missing costs nothing)."""
    return {i: round(ms, 4) for i, ms in sorted(nodes.items()) if round(ms, 4) > 0}


def kernel_groups(onnx_nodes: list[dict]) -> list[list[str]]:
    """The ONNX node ids each kernel computes together, from a profile's `onnx_nodes` rows (each
    names its kernels; kernels of two or more nodes only): the fusions the oracle must not
    split, read from the attribution profile itself made."""
    by_kernel: dict = {}
    for row in onnx_nodes:
        for q in row["kernels"]:
            by_kernel.setdefault(q, set()).add(row["id"])
    return sorted(sorted(g) for g in by_kernel.values() if len(g) > 1)


def fused_units(groups: list[list[str]], ids) -> list[list[str]]:
    """The units the oracle places: nodes joined when any backend's kernel computes them
    together (union over every backend's `kernel_groups`), every other node alone.

    Why: a fused kernel gives its time to its contraction and nothing to its epilogue, so a
    per-node minimum took a Conv from the backend whose Conv was cheaper and the Sigmoid and
    Mul after it for free from the backend that fused them (EfficientNet-B0, 2026-11-26: 124
    nodes "free", a 25% headroom no plan could reach).  A plan that splits a fused group
    loses that fusion, so pricing whole groups is the finest placement the profiles describe."""
    parent: dict = {i: i for i in ids}

    def root(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for g in groups:
        g = [i for i in g if i in parent]
        for i in g[1:]:
            a, b = root(g[0]), root(i)
            if a != b:
                parent[b] = a
    units: dict = {}
    for i in parent:
        units.setdefault(root(i), []).append(i)
    return sorted((sorted(u) for u in units.values()), key=lambda u: u[0])


def unit_oracle(nodes: dict, units: list[list[str]]) -> tuple[float | None, dict]:
    """(sum over units of the fastest backend's calibrated time for the whole unit, node -> that
    backend) from {backend: {node id: calibrated ms}} and `fused_units`.  Choosing one backend
    for every unit gives that backend's whole, so the sum is at most every backend's measured
    whole, as the per-node oracle is; it is at least the per-node sum (a coarser choice)."""
    if not units or not nodes:
        return None, {}
    total, fastest = 0.0, {}
    for u in units:
        b = min(nodes, key=lambda b: sum(nodes[b].get(i, 0.0) for i in u))
        total += sum(nodes[b].get(i, 0.0) for i in u)
        fastest.update({i: b for i in u})
    return min(total, *(sum(ns.values()) for ns in nodes.values())), fastest


def saved_oracle(nodes: dict, units: list[list[str]]) -> float | None:
    """The bound recomputed from saved results: `calibrated_nodes` and `units` (the fused
    groups of two or more nodes; every other node is a unit alone)."""
    ids = sorted({i for ns in nodes.values() for i in ns})
    return unit_oracle(nodes, fused_units(units, ids))[0]


def bound_from(oracle: float | None, singles_ms: dict) -> tuple[float | None, str | None]:
    """(the bound, why it is not the oracle or None): the oracle, never above the fastest
    measured plan (`singles_ms`: each single configuration, and the kept plan if measured ->
    its measured ms)."""
    if not singles_ms:
        return oracle, None
    best = min(singles_ms, key=singles_ms.get)
    if oracle is None:
        return singles_ms[best], (f"no profile attributes time to ONNX nodes: the bound is "
                                  f"{best}'s measured time")
    if oracle > singles_ms[best]:
        return singles_ms[best], (f"the calibrated per-node sum {oracle:.3f} ms is above "
                                  f"{best}'s measured {singles_ms[best]:.3f} ms (attribution "
                                  f"gaps: a plan no calibrated node times describe, or nodes "
                                  f"that cost less together than apart): the bound is "
                                  f"{best}'s time")
    return oracle, None


def node_oracle(view, backends: dict, kept=None, inputs=None, repeats: int = 10,
                progress=None, kept_is: str | None = None, wholes: dict | None = None,
                kept_whole: float | None = None) -> dict:
    """Profile the whole model alone on each of `backends` ({name: Backend}, variants
    included) and, if given, the `kept` plan (an ArtifactModule or Artifact); see the module
    doc.  Returns the oracle, the best single plan, the kept plan's time and the share.
    `kept_is` names the one of `backends` whose single plan the kept plan is: its profile is the
    kept plan's, since profiling one plan twice would report the machine's noise as a captured
    share (ViT-B/16, 2026-11-26: the same ORT plan profiled at 258.7 and 290.1 ms, "-207%").

    `wholes` ({backend: ms}, every one of `backends`) and `kept_whole`: each configuration's
    and the kept plan's time from a steadier measurement of record (bench's interleaved latency
    run).  The profile then gives only the shares: node times are calibrated to add up to these
    wholes, and best single, kept and the bound come from that one run.  Profiled alone, ten
    runs each, GPT-2 small's OpenVINO took 87.7 ms against 78.4 in the latency run (2026-11-27),
    so the limit's "best single" was ONNX Runtime while the table's was OpenVINO, and the
    oracle's plans were measured against the slower library."""
    from provmap.provenance.bundled import zoo
    from provmap.runtime_module.artifact_build import build_artifact
    from provmap.runtime_module.plan import PartitionSpec, Plan

    say = progress or (lambda m: None)
    feeds = inputs if inputs is not None else zoo.random_inputs(view.model, seed=0)
    per, failed = {}, {}
    win = Window()
    for name, be in backends.items():
        say(f"headroom: profiling single:{name}")
        try:
            art = build_artifact(view, Plan(f"single:{name}", [PartitionSpec(
                name, list(view.op_nodes), why="per-node oracle")]), {name: be})
            per[name] = _profile(art, feeds, repeats, say)
        except Exception as e:  # a backend that cannot run the whole model has no node times
            failed[name] = f"{type(e).__name__}: {e}".splitlines()[0]
    if not per:
        raise ValueError("headroom: no backend ran the whole model: "
                         + "; ".join(f"{k}: {v}" for k, v in failed.items()))
    profiled = {b: p["e2e_ms"] for b, p in per.items()}
    source = "profiled runs"
    if wholes and all(wholes.get(b) for b in per):
        for b, p in per.items():
            p["e2e_ms"] = float(wholes[b])
        source = "measured wholes"
    raw, _fastest_raw, low = oracle_from(per)
    cal = calibrate(per)
    cal_nodes = {b: c["nodes"] for b, c in cal.items()}
    per_node, _ = calibrated_oracle(cal_nodes)
    ids = sorted({i for ns in cal_nodes.values() for i in ns})
    units = fused_units([g for p in per.values() for g in p.get("groups", [])], ids)
    oracle, fastest = unit_oracle(cal_nodes, units)
    if oracle is not None:  # the scaled times add up to each whole only up to float rounding
        oracle = min(oracle, *(per[b]["e2e_ms"] for b in cal))
    best = min(per, key=lambda b: per[b]["e2e_ms"])
    measured = {f"single:{b}": p["e2e_ms"] for b, p in per.items()}
    kept_ms = None
    if kept_is is not None and kept_is in per:
        kept_ms = per[kept_is]["e2e_ms"]
    elif kept_whole is not None and source == "measured wholes":
        kept_ms = float(kept_whole)
        measured["the kept plan"] = kept_ms
    elif kept is not None:
        say("headroom: profiling the kept plan")
        kept_ms = _profile(kept, feeds, repeats, say)["e2e_ms"]
        measured["the kept plan"] = kept_ms  # a plan too: the limit is not above it either
    bound, bound_by = bound_from(oracle, measured)
    best_ms = per[best]["e2e_ms"]
    wins = {}
    for i, b in fastest.items():
        # a node some backend runs at no cost (folded away, or an epilogue fused into a
        # contraction) is fastest nowhere in particular
        b = b if cal[b]["nodes"].get(i, 0.0) > 0 else "free"
        wins[b] = wins.get(b, 0) + 1
    return {"oracle_ms": bound, "calibrated_ms": oracle, "oracle_sum_ms": raw,
            "per_node_ms": per_node,
            "units": [u for u in units if len(u) > 1],
            "bound_by": bound_by,
            "best_single": f"single:{best}", "best_single_ms": best_ms,
            "kept_ms": kept_ms, "headroom_ms": best_ms - bound,
            "headroom_share": (best_ms - bound) / best_ms if best_ms > 0 else None,
            "unattributed": {b: f"{sh:.0%} of its time attributed to ONNX nodes; the rest "
                                f"is spread over them in proportion (a rougher bound)"
                             for b, sh in low.items()},
            "captured": captured_share(best_ms, kept_ms, bound),
            "wholes_from": source,
            "per_backend": {b: {"e2e_ms": p["e2e_ms"], "profiled_ms": profiled[b],
                                "nodes_ms": sum(p["nodes"].values()),
                                "attributed_share": (sum(p["nodes"].values()) / p["partitions_ms"]
                                                     if p["partitions_ms"] > 0 else None),
                                "kernel_times": p["kernel_times"],
                                "scale": cal[b]["scale"] if b in cal else None,
                                "calibrated_nodes": compact_nodes(cal[b]["nodes"]) if b in cal
                                else {}} for b, p in per.items()},
            "nodes_fastest_on": wins, "failed": failed, "nodes": len(fastest),
            "conditions": win.stop().to_dict()}


def format_headroom(h: dict) -> list[str]:
    """The lines `provmap explain --headroom` prints."""
    share = h.get("captured")
    if h["oracle_ms"] is None:
        lines = [f"limit: not measured (no backend's profile attributes its time to ONNX nodes);"
                 f" best single {h['best_single']} {h['best_single_ms']:.3f} ms"]
    else:
        lines = [f"limit (oracle: each ONNX node, or group a kernel fuses, on its fastest "
                 f"backend, node times calibrated to each backend's whole, boundaries free): "
                 f"{h['oracle_ms']:.3f} ms"
                 + (f" (per node, fusions split: {h['per_node_ms']:.3f}; raw per-node sum "
                    f"{h['oracle_sum_ms']:.3f})" if h.get("per_node_ms") is not None
                    and h.get("oracle_sum_ms") is not None else
                    f" (raw per-node sum {h['oracle_sum_ms']:.3f})"
                    if h.get("oracle_sum_ms") is not None else "")
                 + f"; best single {h['best_single']} {h['best_single_ms']:.3f} ms; headroom "
                 f"{h['headroom_ms']:.3f} ms" + (f" ({verdict(h.get('headroom_share'))})"
                                                 if h.get("headroom_share") is not None else "")]
    if h.get("bound_by"):
        lines.append(f"  bound: {h['bound_by']}")
    if h.get("kept_ms") is not None:
        best = h.get("best_single_ms")
        vs = (f" ({h['kept_ms'] / best - 1:+.1%} against the best single)"
              if best else "")
        if share is not None and h.get("headroom_share") is not None \
                and h["headroom_share"] < NO_ROOM:
            # a share of a near-zero headroom is a huge meaningless number (-53049%: issue
            # 36's sixth afternoon): the kept plan against the best single says it
            lines.append(f"  kept plan {h['kept_ms']:.3f} ms{vs}: no headroom to capture")
        elif share is not None and share < 0:
            # slower than the best single: a share of -1046% says nothing (eleventh afternoon)
            lines.append(f"  kept plan {h['kept_ms']:.3f} ms{vs}: slower than the best single "
                         "configuration, none of the headroom captured")
        else:
            lines.append(f"  kept plan {h['kept_ms']:.3f} ms{vs}: captured "
                         + (f"{share:.0%} of the headroom" if share is not None
                            else "- (no headroom measured)"))
    per = ", ".join(
        f"{b} {p['e2e_ms']:.3f} / {p['nodes_ms']:.3f}"
        + (f" x{p['scale']:.2f}" if p.get("scale") is not None else "")
        + (f" ({p['attributed_share']:.0%} attributed)"
           if p.get("attributed_share") is not None else "")
        for b, p in h["per_backend"].items())
    lines.append("  per backend (end to end / sum of its node times, ms; x calibration scale): "
                 + per + "; nodes fastest on: "
                 + ", ".join(f"{b} {n}" for b, n in sorted(h["nodes_fastest_on"].items())))
    for b, why in (h.get("failed") or {}).items():
        lines.append(f"  {b}: could not run the whole model ({why})")
    for b, why in (h.get("unattributed") or {}).items():
        lines.append(f"  {b}: {why}")
    cond = h.get("conditions") or {}
    if cond.get("contended"):
        lines.append(f"  measured under contention: {'; '.join(cond.get('reasons') or [])}")
    return lines
