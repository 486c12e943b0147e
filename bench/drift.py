"""How the ratio between two libraries moves over minutes on this machine (issue 35).

    provmap bench drift MODEL.onnx --minutes 7 [-o OUT]

One moment = a short interleaved A/B of `single:onnxruntime` and `single:openvino` (2 passes of
1 s blocks, each library loaded for its own blocks, as the search's end-to-end check measures);
moments follow one another for `--minutes`.  Why: a kept one-library plan is decided between
libraries a few percent apart, and on this 2-core guest their *ratio* drifts, not only their
speed; this says by how much (bench/out/drift/amd-epyc-avx512-2cpu.json: MobileNet-v3, p10-p90
1.045-1.193 over 105 moments), which is why a decision between them spreads its paired passes
over time (partition/decision.py).  Its record: OUT/drift/<host>.json and .md (records.py).
"""

from __future__ import annotations

import json
import statistics
import time


def _spread(xs: list[float]) -> dict:
    from provmap.runtime_module.backend import percentile

    return {"min": min(xs), "p10": percentile(xs, .1), "median": statistics.median(xs),
            "p90": percentile(xs, .9), "max": max(xs)}


def drift(model: str, minutes: float, say=print) -> dict:
    import provmap
    from provmap.partition.measure.interleave import measure_artifacts
    from provmap.partition.measure.parallelism import Gauge

    arts = {s: provmap.compile(model, strategy=s)
            for s in ("single:onnxruntime", "single:openvino")}
    rows, t0 = [], time.time()
    while not rows or time.time() - t0 < minutes * 60:  # at least one moment
        gauge = Gauge()  # one probe per block: did a CPU run slow through this moment?
        lat = measure_artifacts(arts, repeats=8, passes=2, min_block_s=1.0, never_cap=tuple(arts),
                                between=gauge.probe)
        o, v = (statistics.median(lat[k].samples_s) * 1e3 for k in arts)
        mo, mv = (min(lat[k].samples_s) * 1e3 for k in arts)
        rows.append({"t_s": round(time.time() - t0, 1), "ort_median": o, "ov_median": v,
                     "ort_min": mo, "ov_min": mv, "ratio_median": o / v, "ratio_min": mo / mv,
                     "uneven_probes": gauge.uneven(), "probes": len(gauge.ratios)})
        say(f"{time.strftime('%H:%M:%S')} ort {o:.3f}/{mo:.3f} ov {v:.3f}/{mv:.3f} ms "
            f"ort/ov median {o / v:.3f} min {mo / mv:.3f}")
    rm, rn = [r["ratio_median"] for r in rows], [r["ratio_min"] for r in rows]
    return {"model": model, "moments": len(rows), "ratio_median": _spread(rm),
            "ratio_min": _spread(rn), "ort_ahead_by_median": sum(r < 1 for r in rm),
            "ort_ahead_by_min": sum(r < 1 for r in rn), "rows": rows}


def markdown(res: dict) -> str:
    """The spread of the two ratios (ORT over OpenVINO; under 1: ONNX Runtime ahead)."""
    lines = [f"# How the ONNX Runtime / OpenVINO ratio drifts: {res['model']}", "",
             f"{res['moments']} moments, one after another (`provmap bench drift`).", "",
             "| ratio | min | p10 | median | p90 | max | ONNX Runtime ahead |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for by in ("median", "min"):
        q = res[f"ratio_{by}"]
        lines.append(f"| by {by} | " + " | ".join(f"{q[k]:.3f}" for k in
                                                 ("min", "p10", "median", "p90", "max"))
                     + f" | {res[f'ort_ahead_by_{by}']} of {res['moments']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    from .records import write_record
    from .steps import parser

    ap = parser("drift", __doc__, raw=True)
    ap.add_argument("model")
    ap.add_argument("--minutes", type=float, default=7.0)
    a = ap.parse_args(argv)
    out = drift(a.model, a.minutes)
    write_record("drift", a.output, out, markdown(out))
    print(json.dumps({k: v for k, v in out.items() if k != "rows"}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
