"""Collage with a shape profile: search at the opt shape, build for the whole range, and say how
the kept plan fares at every point.

A search times candidates on concrete tensors, so it runs on the model imported at the profile's
opt sizes (TensorRT times its tactics at the opt shape too).  The plan it keeps names ONNX nodes;
the artifact is built on the dynamic import of the same file, where the shape arithmetic a static
import folds (Shape -> Gather -> Concat chains) computes at run time: each such node joins the
partition that reads its value, so a boundary never gains a tensor the static plan did not cut.
Then the kept plan and each library's default plan are timed, interleaved, at the profile's min,
opt and max: a plan best at opt but slower elsewhere is reported (`plan_info.profile_points`,
which explain and bench print), not hidden."""

from __future__ import annotations

from provmap.provenance.util.errors import ProvmapError
from provmap.runtime_module.graph_view import GraphView
from provmap.runtime_module.plan import PartitionSpec, Plan


def opt_view(model, view: GraphView) -> GraphView:
    """`model` (as compile was given it; the view's own copy when it was a view) imported at the
    opt sizes of `view`'s profile."""
    from .model_source import load_view

    source = view.model if isinstance(model, GraphView) else model
    return load_view(source, label=view.imported.label,
                     input_shapes=view.imported.profile.shapes("opt"))


def transfer(plan: Plan, opt: GraphView, dyn: GraphView) -> Plan:
    """`plan` (over `opt`'s nodes) over `dyn`'s, nodes matched by their first output's name
    (unique in a graph, kept by every rewrite provmap makes); a node only the dynamic import
    computes goes with the first partition that reads it, else with one it reads."""
    at = {n.output[0]: j for j, n in enumerate(dyn.nodes) if n.output and n.output[0]}
    owner: dict[int, int] = {}
    for k, p in enumerate(plan.partitions):
        for i in p.ops:
            j = at.get(opt.nodes[i].output[0]) if opt.nodes[i].output else None
            if j is not None and dyn.is_op(j):
                owner[j] = k
    for j in reversed(dyn.op_nodes):  # readers first: a chain of shape nodes follows its end
        if j in owner:
            continue
        readers = [owner[s] for s in sorted(dyn.op_successors(j)) if s in owner]
        if readers:
            owner[j] = readers[0]
    for j in dyn.op_nodes:  # read by nothing placed (a graph output): with what it reads
        if j not in owner:
            feeds = [owner[dyn.producer[x]] for x in dyn.node_inputs[j]
                     if x in dyn.producer and dyn.producer[x] in owner]
            if not feeds and not plan.partitions:
                raise ProvmapError(f"{dyn.imported.label}: the search kept no partition")
            owner[j] = feeds[0] if feeds else 0
    parts = [PartitionSpec(p.backend, sorted(j for j, k in owner.items() if k == n), p.id, p.why)
             for n, p in enumerate(plan.partitions)]
    return Plan(plan.strategy, [p for p in parts if p.ops], dict(plan.info))


def points_report(kept, alternatives: dict, profile, repeats: int = 10,
                  steps: dict | None = None) -> list[dict]:
    """At each point of the profile: the kept artifact's and each alternative's median and
    minimum, measured interleaved on the same seeded inputs, the kept plan's ratio to the
    fastest alternative, and its outputs against each alternative's (the search checked them at
    opt only; `steps`: quantized outputs' steps, judged as the accuracy guard judges them).
    `alternatives`: label -> Artifact (the libraries' default plans)."""
    from .measure.interleave import measure_artifacts

    rows = []
    arts = {"kept": kept, **alternatives}
    for label, shapes in profile.points():
        agree = _agreement(arts, label, steps)
        lat = measure_artifacts(arts, point=label, repeats=repeats, passes=2)
        s = {k: v.summary() for k, v in lat.items()}
        best = min(alternatives, key=lambda k: s[k]["median_ms"]) if alternatives else None
        row = {"point": label, "shapes": {n: list(d) for n, d in shapes.items()},
               "median_ms": {k: round(v["median_ms"], 4) for k, v in s.items()},
               "min_ms": {k: round(v["min_ms"], 4) for k, v in s.items()}}
        if best is not None:
            row["best_single"] = best
            row["kept_vs_best"] = round(s["kept"]["median_ms"] / s[best]["median_ms"], 4)
        if agree:
            row["outputs_vs"] = agree
        rows.append(row)
    return rows


def _agreement(arts: dict, point: str, steps: dict | None) -> dict:
    """{alternative: {"err", "ok"}}: the kept artifact's outputs against each alternative's on
    the point's seeded inputs, by the accuracy guard's rule (its ATOL/RTOL, quantized outputs in
    steps)."""
    from .measure.accuracy import ATOL, RTOL, compare_outputs
    from .measure.plan_accuracy import outputs as run_outputs

    outs, feeds = {}, None
    for k, art in arts.items():
        outs[k], feeds = run_outputs(art, point, feeds)
    res = {}
    for k, ref in outs.items():
        if k != "kept":
            v = compare_outputs(outs["kept"], ref, ATOL, RTOL, steps)
            res[k] = {"err": v.err, "ok": not v.failure}
    return res


def describe_points(rows) -> list[str]:
    """One line per point, as explain prints them; a manifest's field is a stranger's text, so
    a row not as compile writes it is said to be, not a traceback."""
    try:
        return _describe(rows)
    except (KeyError, TypeError, ValueError, AttributeError):
        return ["(plan_info.profile_points is not as provmap writes it)"]


def _describe(rows) -> list[str]:
    out = []
    for r in rows:
        shapes = ", ".join(f"{n}={'x'.join(map(str, d))}" for n, d in r["shapes"].items())
        line = f"{r['point']} ({shapes}): kept {r['median_ms']['kept']:.3f} ms"
        if "best_single" in r:
            ratio = r["kept_vs_best"]
            verdict = "slower" if ratio > 1.02 else "faster" if ratio < 0.98 else "within 2%"
            line += (f", best single {r['best_single']} {r['median_ms'][r['best_single']]:.3f} ms"
                     f" (x{r['kept_vs_best']:.3f}, {verdict})")
        bad = [k for k, v in (r.get("outputs_vs") or {}).items() if not v["ok"]]
        if r.get("outputs_vs"):
            line += (f"; outputs DIFFER from {', '.join(bad)}" if bad else
                     f"; outputs match every library's (max err "
                     f"{max(v['err'] for v in r['outputs_vs'].values()):.1e})")
        out.append(line)
    return out
