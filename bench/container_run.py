"""The container's overhead alone, without a search: `python -m provmap.bench.container_run`.

Why a step of its own: issue 35 asks for a single-partition artifact within 2% of the plain
library on every model over 1 ms, and the full bench measures that only after a search and a
latency run of every strategy, an hour on the user-sized models.  This builds `single:<b>` for
ONNX Runtime and OpenVINO (library defaults), opens the same library on the same model the
fastest way it offers (bench/suite.py's `_Direct`), and measures the pair in adjacent blocks
(`paired_overhead`): the median of per-pass ratios and the ratio of minimums, with the load
of the window.

    python -m provmap.bench.container_run --user-models resnet50,bert_base -o DIR
    python -m provmap.bench.container_run model.onnx -o DIR

DIR gets container.json and container.md.
"""

from __future__ import annotations

import os
import sys
import tempfile

BACKENDS = ("onnxruntime", "openvino")
WITHIN = 0.02  # the done-when's bound on the container's overhead


def container_rows(specs: list[str], repeats: int, passes: int, say) -> list[dict]:
    """One row per (model, backend): single:<b> against <b> called directly."""
    from provmap.partition.compile import compile_model, load_view
    from provmap.runtime_module.artifact import read_artifact
    from provmap.runtime_module.module import ArtifactModule

    from .limits import measured_with_load
    from .suite import _direct, _load_model, paired_overhead

    rows = []
    for spec in specs:
        model, name = _load_model(spec, False)
        view = load_view(model, name)
        with tempfile.TemporaryDirectory(prefix="provmap-container-") as tmp:
            for b in BACKENDS:
                log = lambda m, n=name, b=b: say(f"[{n} {b}] {m}")  # noqa: E731
                path = os.path.join(tmp, f"single_{b}.provmap")
                compile_model(view, f"single:{b}", out=path)
                mod = ArtifactModule(read_artifact(path), path)
                feeds = mod.random_inputs(0)
                direct = _direct(b, model)
                fns = {"artifact": lambda: mod.run(feeds), "direct": lambda: direct.call(feeds)}
                rooms = {"artifact": (mod.load_runners, mod.close),
                         "direct": (direct.open, direct.close)}
                log(f"paired blocks, {passes} passes")
                res, window = measured_with_load(
                    lambda: paired_overhead(fns, rooms, repeats, passes=passes), log)
                rows.append({"model": name, "backend": b, **res,
                             "load1": round(window.load1, 2), "contended": window.contended,
                             "contended_why": "; ".join(window.reasons)})
                mod.close()
                log(f"overhead {res['paired_overhead']:+.1%} by median of passes, "
                    f"{res['paired_overhead_min']:+.1%} by minimum")
    return rows


def _ms(row: dict) -> str:
    return f"{row['library_min_ms']:.2f}" if row.get("library_min_ms") is not None else "-"


def markdown(res: dict) -> str:
    from .report import _f, _table

    h = res["host"]
    lines = [f"# The container's overhead, {res['date']}", "",
             f"Host: {h.get('cpu_model')} ({h.get('machine')}, {h.get('cpus')} CPUs), load at "
             f"start {res['load_at_start']}, at end {res['load_at_end']}; "
             f"`python -m provmap.bench.container_run`; "
             + ", ".join(f"{k} {v}" for k, v in res["versions"].items()) + ".", ""]
    lines += _table(
        f"single:<b> (provmap's artifact, library defaults) against the library called directly "
        f"on the same model, {res['passes']} adjacent paired blocks: the median of per-pass "
        f"ratios, and the ratio of minimums. Bound: within {WITHIN:.0%} on models over 1 ms.",
        ["model", "backend", "library min ms", "overhead (median of passes)",
         "overhead (by minimum)", "within 2%", "load", "contended"],
        [[r["model"], r["backend"], _ms(r), _f(r.get("paired_overhead"), "{:+.1%}"),
          _f(r.get("paired_overhead_min"), "{:+.1%}"), within(r), r.get("load1"),
          r.get("contended_why") or "no"] for r in res["rows"]])
    return "\n".join(lines) + "\n"


def within(row: dict) -> str:
    """yes/no on the bound, "n/a" under 1 ms (the done-when covers models over 1 ms)."""
    if row.get("library_min_ms") is not None and row["library_min_ms"] < 1.0:
        return "n/a (<1 ms)"
    if row.get("contended"):
        return "not judged (contended)"
    med, mn = row.get("paired_overhead"), row.get("paired_overhead_min")
    if med is None or mn is None:
        return "-"
    return "yes" if med <= WITHIN and mn <= WITHIN else "no"


def main(argv=None) -> int:
    from provmap.provenance.util.errors import ProvmapError

    from .step_run import run_step, step_parser

    ap = step_parser("container_run", __doc__, "directory for container.json/.md")
    ap.add_argument("--repeats", type=int, default=30, help="timed runs per side")
    ap.add_argument("--passes", type=int, default=8, help="paired blocks")
    a = ap.parse_args(argv)

    def check(a):
        if a.repeats < 1 or a.passes < 1:
            raise ProvmapError("--repeats and --passes must be at least 1")

    def measure(specs, say):
        return container_rows(specs, a.repeats, a.passes, say)

    return run_step("container_run", a, "rows", measure, markdown, "container", check,
                    extra={"passes": a.passes})


if __name__ == "__main__":
    sys.exit(main())
