"""Interleaved latency measurement: blocks, passes, rooms, samples of many calls (the decision
taken on it: tests/test_decision.py)."""

import time

import pytest

from provmap.partition.measure.interleave import Latency, measure_interleaved


def test_measure_interleaved_blocks_and_caps_slow():
    calls = {"fast": 0, "slow": 0}

    def fast():
        calls["fast"] += 1
        time.sleep(0.001)

    def slow():
        calls["slow"] += 1
        time.sleep(0.03)

    lat = measure_interleaved({"fast": fast, "slow": slow}, repeats=10, passes=2,
                              settle_s=0.0, min_block_s=0.02, slow_budget_s=0.1)
    assert not lat["fast"].capped and lat["slow"].capped
    assert len(lat["fast"].pass_medians_s) == 2 and len(lat["fast"].samples_s) >= 10
    assert 3 <= len(lat["slow"].samples_s) <= 10
    s = lat["fast"].summary()
    assert s["min_ms"] <= s["median_ms"] <= s["p90_ms"]
    assert s["median_ms"] == pytest.approx(1.0, abs=2.0)
    assert lat["slow"].summary()["median_ms"] > 10 * s["median_ms"] / 2


def test_sub_millisecond_alternatives_are_sampled_as_means_of_many_calls():
    """Below a millisecond a sample is the mean of enough calls to last min_sample_s; a slower
    alternative keeps one call per sample."""
    calls = {"tiny": 0, "big": 0}

    def spin(name, s):
        def f():
            calls[name] += 1
            end = time.perf_counter() + s
            while time.perf_counter() < end:
                pass
        return f

    lat = measure_interleaved({"tiny": spin("tiny", 1e-4), "big": spin("big", 3e-3)},
                              repeats=6, passes=2, warmup=2, settle_s=0.0, min_block_s=0.0,
                              min_sample_s=2e-3, slow_factor=1000.0)
    tiny, big = lat["tiny"], lat["big"]
    assert big.calls_per_sample == 1 and len(big.samples_s) == 6
    assert 2 <= tiny.calls_per_sample <= 20 and len(tiny.samples_s) == 6
    # 1 first call + 2 warm-up + per pass: 1 re-warm + 3 samples of calls_per_sample calls
    assert calls["tiny"] == 3 + 2 * (1 + 3 * tiny.calls_per_sample)
    assert calls["big"] == 3 + 2 * (1 + 3)
    assert tiny.summary()["calls_per_sample"] == tiny.calls_per_sample
    assert 0.09 <= tiny.summary()["min_ms"] <= tiny.summary()["median_ms"]


def test_rooms_keep_one_alternative_loaded_at_a_time():
    """With rooms, every call of an alternative happens while it alone is open: nothing else's
    sessions or pools live beside it (a user runs one artifact per process)."""
    open_now: set = set()
    seen: list = []
    opened = {"a": 0, "b": 0, "c": 0}

    def room(k):
        def enter():
            opened[k] += 1
            open_now.add(k)

        return enter, (lambda: open_now.discard(k))

    def call(k):
        def f():
            seen.append(frozenset(open_now))
            assert open_now == {k}, (k, open_now)
            if k == "c":
                time.sleep(0.02)  # far slower than a and b: capped, measured in one room
        return f

    keys = ("a", "b", "c")
    lat = measure_interleaved({k: call(k) for k in keys}, repeats=4, passes=2, warmup=2,
                              settle_s=0.0, min_block_s=0.0, slow_budget_s=0.05,
                              rooms={k: room(k) for k in keys})
    assert not open_now and seen and all(len(s) == 1 for s in seen)
    assert lat["c"].capped and not lat["a"].capped
    # warm-up room + one room per pass; the capped one: warm-up room + its own room
    assert opened == {"a": 3, "b": 3, "c": 2}
    assert len(lat["a"].pass_medians_s) == 2


def test_search_alternatives_with_native_code_run_without_a_trust_entry(tmp_path, monkeypatch):
    """The end-to-end check and the second level time artifacts this process just built; a TVM
    partition (native code) among them must run although no trust list knows them yet (a
    tuned TVM plan once failed the search at this point)."""
    import numpy as np
    from onnx import TensorProto, helper

    from provmap.partition.compile import compile_model
    from provmap.partition.measure.in_context import measure_partitions
    from provmap.partition.measure.interleave import measure_artifacts

    monkeypatch.setenv("PROVMAP_TRUST", str(tmp_path / "empty-trust-list"))
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    art = compile_model(m, "single:tvm")  # in memory, never saved: not on any trust list
    lat = measure_artifacts({"tvm": art}, repeats=3, min_block_s=0.0)
    assert lat["tvm"].samples_s and np.isfinite(lat["tvm"].samples_s).all()
    assert set(measure_partitions(art, runs=3, warmup=1)) == {p["id"] for p in
                                                              art.manifest["partitions"]}


def test_in_context_times_record_the_runs_actually_taken(tmp_path, monkeypatch):
    """The window runs until it is long enough to judge for contention, so a 0.01 ms plan makes
    far more than the 20 runs asked for: the cache says how many medians it holds."""
    from onnx import TensorProto, helper

    from provmap.partition.measure.cache import CostCache
    from provmap.partition.compile import compile_model
    from provmap.partition.measure.in_context import MIN_S, feed_back
    from provmap.runtime_module.registry import get_backend

    monkeypatch.setenv("PROVMAP_CONTENTION", "ignore")
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    art = compile_model(m, "single:onnxruntime")
    be = get_backend("onnxruntime")
    cache = CostCache(tmp_path / "c.sqlite")
    rows = feed_back(art, cache, {"onnxruntime": be}, "single:onnxruntime", runs=20)
    (p,) = art.manifest["partitions"]
    seconds, runs, _plan = cache.get_in_context(p["key"], be)
    assert rows[0]["in_context_ms"] == seconds * 1e3
    assert runs > 20 and runs * seconds < MIN_S  # a call is far under MIN_S / 20


def test_alternate_flips_the_order_every_other_pass():
    """A B, B A, A B: with a machine that drifts steadily within a pass, the pair's per-pass
    ratio alternates around the truth instead of leaning one way (the container check)."""
    opened = []
    rooms = {k: (lambda k=k: opened.append(k), lambda: None) for k in "ab"}
    measure_interleaved({"a": lambda: None, "b": lambda: None}, repeats=3, passes=3, warmup=1,
                        settle_s=0, min_block_s=0, min_sample_s=0, rooms=rooms, alternate=True,
                        never_cap=("a", "b"))  # two no-ops: one may warm up 10x "slower"
    assert opened == ["a", "b", "a", "b", "b", "a", "a", "b"], opened  # warm-ups, then passes


