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

from .accuracy import ATOL, RTOL, compare_outputs
from .dynamic_envelope import envelope_or_none, ort_run, with_envelope
from .quant_steps import DEFAULT_QUANT_STEPS, grid_steps

REFERENCE = "onnxruntime"


def libraries(manifest: dict) -> frozenset:
    """The libraries a plan runs on (a variant, e.g. openvino[threads=1], is its library)."""
    return frozenset(parse_variant(p["backend"])[0] for p in manifest["partitions"])


def outputs(art, point: str, feeds=None):
    """(outputs, feeds) of a built artifact on seeded inputs (its own, unless given)."""
    from provmap.runtime_module.module import ArtifactModule

    mod = ArtifactModule(art, trust=True)  # built by this process
    try:
        feeds = feeds if feeds is not None else mod.random_inputs(0, point)
        return mod.run(feeds), feeds
    finally:
        mod.close()


class PlanAccuracy:
    """The reference's outputs on one set of seeded inputs, and each library's distance alone:
    what judges every plan measured whole, the end-to-end check's (partition/end_to_end.py)
    and the second level's proposals (partition/refine.py) alike."""

    def __init__(self, built: dict, model, point: str = "opt"):
        self.point, self.model = point, model
        outs, feeds = {}, None
        for label, art in built.items():
            outs[label], feeds = outputs(art, point, feeds)
        self.feeds = feeds
        ref_label = next((k for k, a in built.items() if _alone(a.manifest) == REFERENCE), None)
        self.ref = outs[ref_label] if ref_label else ort_run(model, feeds)
        self.steps = with_envelope(grid_steps(model), envelope_or_none(model, feeds))
        self.distances = {k: self._distance(o) for k, o in outs.items()}
        self.alone: dict[str, float] = {REFERENCE: 0.0}  # a library's nearest whole model
        for label, art in built.items():
            lib = _alone(art.manifest)
            if lib is not None:
                self.alone[lib] = min(self.alone.get(lib, math.inf),
                                      self.distances[label]["distance"])

    def _distance(self, got: dict) -> dict:
        v = compare_outputs(got, self.ref, ATOL, RTOL, self.steps, DEFAULT_QUANT_STEPS)
        d = v.quant_worst if v.quant_worst is not None else v.err
        return {"distance": d, "steps": v.quant_worst is not None, "ok": not v.failure,
                "err": v.err}

    def refusal(self, art, dist: dict | None = None) -> str | None:
        """Why the plan of `art` is refused (`further_than_alone`), or None; its outputs are
        computed only for a mix this judge can bound."""
        libs = libraries(art.manifest)
        if len(libs) < 2 or not libs <= set(self.alone):
            return None
        return further_than_alone(libs, dist or self._distance(
            outputs(art, self.point, self.feeds)[0]), self.alone)

    def refusals(self, built: dict) -> dict[str, str]:
        """label -> why, over the plans this judge was made from."""
        out = {}
        for label, art in built.items():
            why = self.refusal(art, self.distances[label])
            if why:
                out[label] = why
        return out

    def to_json(self, refused: dict) -> dict:
        """What the report keeps: rounded, and a NaN or infinite distance (an output missing,
        NaN where the reference has none) as None, which a manifest can hold."""
        def num(x):
            return round(float(x), 6) if math.isfinite(x) else None

        return {"reference": REFERENCE, "refused": refused,
                "distances": {k: {**v, "distance": num(v["distance"]), "err": num(v["err"])}
                              for k, v in self.distances.items()}}


def further_than_alone(libs: frozenset, d: dict, alone: dict) -> str | None:
    """The rule: a plan on `libs` at distance `d` is refused when it mixes libraries, the
    guard's tolerance refuses its outputs, and it is further from the reference than every
    library it mixes is alone (`alone`: library -> its distance).  A mix with a library not
    measured alone is not judged."""
    if len(libs) < 2 or d["ok"] or not libs <= set(alone):
        return None
    bound = max(alone[lib] for lib in libs)
    if d["distance"] <= bound:
        return None
    unit = " quantization steps" if d["steps"] else ""
    return (f"{d['distance']:.3g}{unit} from {REFERENCE} at the outputs, further than any "
            f"library it mixes alone ({', '.join(sorted(libs))}: at most {bound:.3g})")


def _alone(manifest: dict) -> str | None:
    """The library of a one-library plan, else None."""
    libs = libraries(manifest)
    return next(iter(libs)) if len(libs) == 1 else None
