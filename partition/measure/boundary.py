"""The price of a partition boundary on this host (calibrated, never assumed).

A split plan pays for every hand-over between backends: one call's entry overhead and at most
one copy of the tensor.  `calibrate_boundary` measures both on this machine; `crossing_s`
prices one boundary tensor from the calibration."""

from __future__ import annotations

import statistics
import time
from typing import Mapping

import numpy as np

from provmap.runtime_module.backend import Backend
from provmap.runtime_module.subgraph import Subgraph


def _relu_model(shape):
    import onnx
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "calibrate",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(m)
    return m


def calibrate_boundary(backends: Mapping[str, Backend] | list, min_time_s: float = 0.2) -> dict:
    """Price of a partition boundary on this host.

    Model: crossing(tensor, a, b) = fixed_s[b] + tensor.nbytes * per_byte_s when a != b, else 0
    (`crossing_s`).  fixed_s[b] is the median wall time of one call of b's runner on a 1-op
    model (Relu on [1,16] f32): the per-call overhead of entering backend b.  per_byte_s is the
    mean of np.copyto's per-byte time for an 800 KB and an 8 MB float32 tensor: an executor
    hand-over costs at most one copy of the tensor (the runners share numpy memory zero-copy
    where the layout allows).  Note that a measured candidate's time already includes one call
    overhead of its own backend, so fixed_s double-counts if a search also adds it for every
    partition; it is meant for comparing a split against a merged candidate that was not
    measured.  Runs in this process (it builds only a Relu per backend).
    """
    from ..model_source import load_view

    if not isinstance(backends, Mapping):
        backends = {b.name: b for b in backends}
    view = load_view(_relu_model((1, 16)), "calibrate-relu")
    sub = Subgraph(view, view.op_nodes)
    x = np.random.default_rng(0).standard_normal((1, 16)).astype(np.float32)
    fixed = {}
    for name, b in backends.items():
        r = b.load(b.build(sub))
        try:
            args = [x for _ in r.input_names]
            fixed[name] = b.time(r, args, warmup=20, repeats=200, min_time_s=min_time_s).median_s
        finally:
            r.close()
    copy = {}
    rates = []
    for label, nbytes in (("800KB", 800_000), ("8MB", 8_000_000)):
        src = np.random.default_rng(1).standard_normal(nbytes // 4).astype(np.float32)
        dst = np.empty_like(src)
        for _ in range(3):
            np.copyto(dst, src)
        samples = []
        start = time.perf_counter()
        while len(samples) < 20 or time.perf_counter() - start < min_time_s / 2:
            t0 = time.perf_counter()
            np.copyto(dst, src)
            samples.append(time.perf_counter() - t0)
        copy[label] = statistics.median(samples)
        rates.append(copy[label] / src.nbytes)
    return {"fixed_s": fixed, "per_byte_s": float(np.mean(rates)), "copy_s": copy}


def crossing_s(calib: dict, nbytes: int, from_backend: str, to_backend: str) -> float:
    """Cost of handing a tensor of `nbytes` from a partition on `from_backend` to one on
    `to_backend`, by the model of `calibrate_boundary`."""
    if from_backend == to_backend:
        return 0.0
    return calib["fixed_s"].get(to_backend, 0.0) + nbytes * calib["per_byte_s"]
