"""A composed plan judged whole for accuracy: no further from the reference than the libraries
it mixes are alone.

Why a rule of its own: the accuracy guard judges each region on the reference's inputs, so a
plan of regions that each pass can still drift further end to end, each library's rounding
feeding the next.  On the YOLOv8n-shaped detector in QDQ the mixed plan Collage kept was 91
quantization steps from ONNX Runtime at the output, where OpenVINO alone was 86 (2026-11-29,
bench/out/user_latency).  A library alone is the user's own baseline however far it is (the
end-to-end check measures it: partition/collage.py), but a mix is provmap's making: it may be
as far as the furthest library in it, not further.

The distance is the accuracy guard's: a quantized output in its steps (the graph's scale, a
dynamic quantizer's envelope), else the max abs difference; a plan the guard's tolerances
accept is never refused.
"""

from __future__ import annotations

import math

from provmap.runtime_module.registry import parse_variant

from .accuracy import compare_outputs
from .dynamic_envelope import envelope_or_none, ort_run, with_envelope
from .quant_steps import DEFAULT_QUANT_STEPS, grid_steps

#: the guard's defaults (MeasuredEstimator): the same tolerance the search gave each region
ATOL, RTOL = 1e-4, 1e-3
REFERENCE = "onnxruntime"


def libraries(manifest: dict) -> frozenset:
    """The libraries a plan runs on (a variant, e.g. openvino[threads=1], is its library)."""
    return frozenset(parse_variant(p["backend"])[0] for p in manifest["partitions"])


def distances(built: dict, model, point: str = "opt") -> dict[str, dict]:
    """label -> {"distance", "steps" (bool), "ok" (the guard's tolerance), "err"}: each built
    artifact's outputs on the same seeded inputs against ONNX Runtime's on the whole model."""
    from provmap.runtime_module.module import ArtifactModule

    outs, feeds = {}, None
    for label, art in built.items():
        mod = ArtifactModule(art, trust=True)  # built by this process
        try:
            feeds = feeds if feeds is not None else mod.random_inputs(0, point)
            outs[label] = mod.run(feeds)
        finally:
            mod.close()
    ref_label = next((k for k, a in built.items()
                      if len(a.manifest["partitions"]) == 1
                      and a.manifest["partitions"][0]["backend"] == REFERENCE), None)
    ref = outs[ref_label] if ref_label else ort_run(model, feeds)
    steps = with_envelope(grid_steps(model), envelope_or_none(model, feeds))
    res = {}
    for label, got in outs.items():
        v = compare_outputs(got, ref, ATOL, RTOL, steps, DEFAULT_QUANT_STEPS)
        d = v.quant_worst if v.quant_worst is not None else v.err
        res[label] = {"distance": d, "steps": v.quant_worst is not None, "ok": not v.failure,
                      "err": v.err}
    return res


def to_json(dist: dict) -> dict:
    """The distances as a report keeps them: rounded, and a NaN or infinite one (an output
    missing, NaN where the reference has none) as None, which a manifest can hold."""
    def num(x):
        return round(float(x), 6) if math.isfinite(x) else None

    return {k: {**v, "distance": num(v["distance"]), "err": num(v["err"])}
            for k, v in dist.items()}


def further_than_alone(built: dict, dist: dict) -> dict[str, str]:
    """label -> why, for each plan mixing libraries that the guard's tolerance refuses and that
    sits further from the reference than every library it mixes does alone.  A library alone
    is the nearest of its whole-model plans built here (its variants included); the reference
    library alone is at distance 0.  A mix with a library not measured alone is not judged."""
    alone: dict[str, float] = {REFERENCE: 0.0}
    for label, art in built.items():
        libs = libraries(art.manifest)
        if len(art.manifest["partitions"]) == 1 and label in dist:
            (lib,) = libs
            alone[lib] = min(alone.get(lib, float("inf")), dist[label]["distance"])
    out = {}
    for label, art in built.items():
        libs, d = libraries(art.manifest), dist.get(label)
        if len(libs) < 2 or d is None or d["ok"] or not libs <= set(alone):
            continue
        bound = max(alone[lib] for lib in libs)
        if d["distance"] > bound:
            unit = " quantization steps" if d["steps"] else ""
            out[label] = (f"{d['distance']:.3g}{unit} from {REFERENCE} at the outputs, further "
                          f"than any library it mixes alone ({', '.join(sorted(libs))}: at most "
                          f"{bound:.3g})")
    return out
