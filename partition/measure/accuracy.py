"""The accuracy guard: deterministic inputs for a region and the check of its outputs.

A candidate that is fast and wrong must never be picked, so every measured candidate is first
run on the same inputs as the reference backend and compared with the runner's rule
(|out - ref| <= atol + rtol * |ref|, NaN equals NaN).  Inputs derive from the region's key alone,
so the same key always sees the same inputs and a cached verdict stays true."""

from __future__ import annotations

import hashlib
from collections import OrderedDict

import numpy as np


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


def compare_outputs(outs: dict, refs: dict, atol: float, rtol: float) -> tuple[float, str]:
    """(max abs err over all outputs, "" or the first failure's description)."""
    worst = 0.0
    failure = ""
    for name, r in refs.items():
        if name not in outs:
            return float("inf"), f"output '{name}' missing"
        a = np.asarray(outs[name])
        r = np.asarray(r)
        if a.shape != r.shape:
            return float("inf"), f"output '{name}' has shape {a.shape}, reference {r.shape}"
        if a.size == 0:
            continue
        if a.dtype.kind in "fc" or r.dtype.kind in "fc":
            af = a.astype(np.float64)
            rf = r.astype(np.float64)
            nan_a, nan_r = np.isnan(af), np.isnan(rf)
            if (nan_a != nan_r).any():
                return float("inf"), f"output '{name}' has NaN where the reference has none " \
                                     "(or the reverse)"
            ok_mask = nan_a | (af == rf)  # equal infs, NaN pairs
            diff = np.where(ok_mask, 0.0, np.abs(af - rf))
            diff = np.where(np.isnan(diff), np.inf, diff)
            err = float(diff.max())
            bad = (diff > atol + rtol * np.abs(np.where(ok_mask, 0.0, rf))).any()
        else:
            diff = np.abs(a.astype(np.int64) - r.astype(np.int64)) if a.dtype != bool \
                else (a != r).astype(np.int64)
            err = float(diff.max())
            bad = err > 0
        if bad and not failure:
            failure = f"output '{name}'"
        worst = max(worst, err)
    return worst, failure


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
