"""The accuracy guard: deterministic inputs for a region and the check of its outputs.

A candidate that is fast and wrong must never be picked, so every measured candidate is first
run on the same inputs as the reference backend and compared with the runner's rule
(|out - ref| <= atol + rtol * |ref|, NaN equals NaN), except where a correct library may differ:
a quantized output is judged in its quantization steps, by the rule compare uses
(`quant_steps.py`: an int8 QuantizeLinear rounding one value the other way is agreement, not a
wrong kernel; issue 51), and other integer outputs (indices, shapes) must be equal.  Inputs
derive from the region's key alone, so the same key always sees the same inputs and a cached
verdict stays true."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import NamedTuple

import numpy as np

from .quant_steps import DEFAULT_QUANT_STEPS, in_steps, step_unit, steps_bound

#: the guard's float tolerances, the one home for every caller that judges outputs as the search
#: does (MeasuredEstimator's defaults, the plan judge, a profile's agreement, bench's err column):
#: onnx's runner uses rtol 1e-3 too; atol 1e-4 since a float32 sum over thousands of terms
#: legitimately differs at 1e-5 between libraries' reduction orders
ATOL, RTOL = 1e-4, 1e-3


def make_inputs(specs, key: str) -> dict[str, np.ndarray]:
    """Deterministic inputs for a region: standard normal floats, zero ints/bools, seeded by key."""
    seed = int(hashlib.blake2b(key.encode(), digest_size=8).hexdigest(), 16)
    rng = np.random.default_rng(seed)
    out = {}
    for t in specs:
        try:
            dt = np.dtype(t.dtype)
        except TypeError:
            import ml_dtypes  # noqa: F401  (registers bfloat16 & co with numpy)
            dt = np.dtype(t.dtype)
        if dt.kind in "fc" or dt.name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
            a = rng.standard_normal(t.shape).astype(dt)
        else:
            a = np.zeros(t.shape, dtype=dt)
        out[t.name] = np.ascontiguousarray(a)
    return out


class Verdict(NamedTuple):
    err: float                   # max abs err over all outputs
    failure: str                 # "" or the first failing output's description
    steps: float | None = None   # that output's worst difference in steps, if quantized
    quant_worst: float | None = None  # the worst in steps over every quantized output


def compare_outputs(outs: dict, refs: dict, atol: float, rtol: float, steps: dict | None = None,
                    quant_steps: int = DEFAULT_QUANT_STEPS) -> Verdict:
    """Every reference output against the candidate's.  `steps`: output -> its quantization
    step as the graph gives it (`quant_steps.grid_steps`); an 8-bit integer output is on a grid
    without it."""
    steps = steps or {}
    worst = 0.0
    failure, failed_steps, quant_worst = "", None, None
    for name, r in refs.items():
        if name not in outs:
            return Verdict(float("inf"), f"output '{name}' missing")
        a = np.asarray(outs[name])
        r = np.asarray(r)
        if a.shape != r.shape:
            return Verdict(float("inf"), f"output '{name}' has shape {a.shape}, reference "
                                         f"{r.shape}")
        if a.size == 0:
            continue
        unit = step_unit(r.dtype, steps.get(name))
        if a.dtype.kind in "fc" or r.dtype.kind in "fc":
            af = a.astype(np.float64)
            rf = r.astype(np.float64)
            nan_a, nan_r = np.isnan(af), np.isnan(rf)
            if (nan_a != nan_r).any():
                return Verdict(float("inf"), f"output '{name}' has NaN where the reference has "
                                             "none (or the reverse)")
            ok_mask = nan_a | (af == rf)  # equal infs, NaN pairs
            with np.errstate(invalid="ignore"):  # inf - inf: a NaN, made inf below
                diff = np.where(ok_mask, 0.0, np.abs(af - rf))
            diff = np.where(np.isnan(diff), np.inf, diff)
            bound = atol + rtol * np.abs(np.where(ok_mask, 0.0, rf))
            if unit:  # on a DequantizeLinear's grid: either rule passes, as in compare
                bound = np.maximum(bound, steps_bound(quant_steps, unit))
        else:
            diff = np.abs(a.astype(np.int64) - r.astype(np.int64)) if a.dtype != bool \
                else (a != r).astype(np.int64)
            bound = steps_bound(quant_steps, unit) if unit else 0
        err = float(diff.max())
        if unit:
            quant_worst = max(quant_worst or 0.0, in_steps(diff, unit))
        if (diff > bound).any() and not failure:
            failure = f"output '{name}'"
            failed_steps = in_steps(diff, unit) if unit else None
        worst = max(worst, err)
    return Verdict(worst, failure, failed_steps, quant_worst)


#: the kind of every accuracy refusal (`refusal`): what the rest of provmap tests for
REFUSAL_KIND = "accuracy guard:"


def is_accuracy_refusal(reason: str) -> bool:
    """A candidate refused because its outputs were too far from the reference's, not because
    it crashed or failed to build: such a library alone is still the user's own baseline
    (partition/collage.py), and such a cached verdict may be stale (`stale_refusal`)."""
    return reason.startswith(REFUSAL_KIND)


def refusal(v: Verdict, settings: dict, ref_name: str, quantized: bool) -> str:
    """Why a candidate is refused for accuracy, as explain and the search's counts read it
    (the text before the first ':' is the kind).  A quantized output says its worst difference
    in steps; a region with quantized outputs names quant-steps among the tolerances, so a
    verdict cached before issue 51 (which judged them by equality) is told apart
    (`stale_refusal`)."""
    n = settings.get("quant_steps", DEFAULT_QUANT_STEPS)
    if v.steps is not None:
        k = f"{v.steps:.3g}"
        return (f"{REFUSAL_KIND} {k} quantization step{'' if k == '1' else 's'} apart > "
                f"quant-steps {n} vs {ref_name} ({v.failure}; max abs err {v.err:.3g})")
    q = f"; quant-steps {n}" if quantized else ""
    return (f"{REFUSAL_KIND} max abs err {v.err:.3g} > tol (atol {settings['atol']:g}, rtol "
            f"{settings['rtol']:g}{q}) vs {ref_name} ({v.failure})")


def stale_refusal(reason: str, quantized: bool) -> bool:
    """A cached accuracy refusal of a region with quantized outputs, decided before they were
    judged in steps: measured again rather than trusted (it left OpenVINO out of a QDQ
    ResNet-50's search for good)."""
    return quantized and is_accuracy_refusal(reason) and "quant" not in reason


class RefCache:
    """Reference outputs by content hash, least recently used first out, bounded in bytes."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._d: OrderedDict[str, dict] = OrderedDict()
        self._bytes = 0

    def get(self, k: str):
        v = self._d.get(k)
        if v is not None:
            self._d.move_to_end(k)
        return v

    def put(self, k: str, v: dict) -> None:
        n = sum(a.nbytes for a in v.values())
        if n > self.max_bytes:
            return
        self._d[k] = v
        self._bytes += n
        while self._bytes > self.max_bytes:
            _, old = self._d.popitem(last=False)
            self._bytes -= sum(a.nbytes for a in old.values())
