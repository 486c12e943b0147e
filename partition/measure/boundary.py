"""The price of a partition boundary on this host (calibrated, never assumed).

A split plan pays for every hand-over between backends: one call's entry overhead and at most
one copy of the tensor.  `calibrate_boundary` measures both on this machine; `crossing_s`
prices one boundary tensor from the calibration.

It also pays for the switch itself, which candidates measured alone never see (issue 35):
the library that ran last leaves its pool threads spinning or its caches full, and the next one
wakes its own sleeping threads.  On 2 cores, OpenVINO right after an ONNX Runtime call took
7.3 ms instead of 4.7 on SqueezeNet, and every mixed plan the first level proposed measured
slower whole than its estimate.  `calibrate_switches` measures that per ordered pair of
backends, each with the options a mixed plan gives it (ORT's spinning off, runtime_module/
spinning.py), against the same work run back to back by one library as a single-library plan
runs it; `switch_s` is what the search adds once for every change of backend on a path."""

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


def _conv_model(channels: int = 32, size: int = 56):
    """A 3x3 convolution + Relu of about 0.5-2 ms on 2 cores: long enough for a library's
    threads to go to sleep or keep spinning as they do between real partitions, short enough
    that the calibration of every pair takes about a second."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(2).standard_normal((channels, channels, 3, 3)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"], name="relu")], "calibrate-switch",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, size, size])],
        [numpy_helper.from_array(w * 0.05, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(m)
    return m


def _median_call_s(runner, args, before=None, n: int = 10, min_time_s: float = 0.02) -> float:
    """Median seconds of `runner(args)`, each call right after `before(...)` (untimed) when
    given: the cost of the call as the position in a plan makes it."""
    for _ in range(3):
        if before is not None:
            before[0](before[1])
        runner(args)
    samples, start = [], time.perf_counter()
    while len(samples) < n or time.perf_counter() - start < min_time_s:
        if before is not None:
            before[0](before[1])
        t0 = time.perf_counter()
        runner(args)
        samples.append(time.perf_counter() - t0)
        if len(samples) >= 2000:
            break
    return statistics.median(samples)


def switch_key(from_backend: str, to_backend: str) -> str:
    return f"{from_backend}->{to_backend}"


def calibrate_switches(backends: Mapping[str, Backend], n: int = 10, rounds: int = 5,
                       min_time_s: float = 0.02) -> dict:
    """Seconds a call on backend b costs more right after a call on backend a (both with the
    options a mixed plan gives them) than after a call on b itself with b's own options (as a
    single-library plan runs it), for every ordered pair of different backends.

    Measured in `rounds` interleaved blocks, each timing b back to back and then b after a:
    the difference is taken per block and the median over blocks kept, so a burst of load from
    elsewhere hits both sides of one difference rather than one side of the result.
    Clamped at 0: a switch that measures cheaper than back-to-back calls is noise here, and a
    shortest path must not see negative edges.  `raw_s` keeps the unclamped medians, for the
    report.  Runs in this process; each backend builds one small convolution, twice when a mixed
    plan gives it other options than its own (ORT's spinning)."""
    from provmap.runtime_module.spinning import as_in_a_mixed_plan

    from ..model_source import load_view

    names = list(backends)
    if len(names) < 2:
        return {"switch_s": {}, "raw_s": {}, "alone_s": {}}
    view = load_view(_conv_model(), "calibrate-switch")
    sub = Subgraph(view, view.op_nodes)
    x = np.random.default_rng(3).standard_normal((1, 32, 56, 56)).astype(np.float32)
    alone, mixed, opened = {}, {}, []
    try:
        for name in names:
            own, in_mix = backends[name], as_in_a_mixed_plan(backends[name])
            r = own.load(own.build(sub))
            opened.append(r)
            alone[name] = (r, [x for _ in r.input_names])
            if in_mix is own or (in_mix.name == own.name
                                 and in_mix.options() == own.options()):
                # a mixed plan runs it as it is (OpenVINO: nothing spins): one runner serves
                # both sides, and a second build would only cost compile time
                mixed[name] = alone[name]
                continue
            r = in_mix.load(in_mix.build(sub))
            opened.append(r)
            mixed[name] = (r, [x for _ in r.input_names])
        raw, alone_t = {}, {b: [] for b in names}
        for a in names:
            for b in names:
                if a == b:
                    continue
                diffs = []
                for _ in range(rounds):
                    by_itself = _median_call_s(*alone[b], n=n, min_time_s=min_time_s)
                    after = _median_call_s(*mixed[b], before=mixed[a], n=n, min_time_s=min_time_s)
                    diffs.append(after - by_itself)
                    alone_t[b].append(by_itself)
                raw[switch_key(a, b)] = statistics.median(diffs)
    finally:
        for r in opened:
            try:
                r.close()
            except Exception:
                pass
    return {"switch_s": {k: max(v, 0.0) for k, v in raw.items()}, "raw_s": raw,
            "alone_s": {b: statistics.median(t) for b, t in alone_t.items()}}


def switch_s(calib: dict, from_backend: str, to_backend: str) -> float:
    """What the search adds once for a change from `from_backend` to `to_backend` on a path."""
    if from_backend == to_backend:
        return 0.0
    return calib.get("switch_s", {}).get(switch_key(from_backend, to_backend), 0.0)


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
