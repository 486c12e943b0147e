"""Zero-size dimensions (issue 32): legal ONNX, run by ONNX Runtime, accepted by provmap wherever
the backend computes them right, and declined per backend, with the reason, where it does not
(runtime_module/backends/empty_tensors.py)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from cli_runner import one_error, provmap as cli
from onnx import TensorProto as T, helper as h, numpy_helper as nh

import provmap
from provmap.provenance.util.errors import ProvmapError


def empty_cache_model() -> onnx.ModelProto:
    """A decoder step's shape: the cache `past` [1, P, 4] (P = 0 on the first step) is
    concatenated with the new tokens `x` [1, 2, 4] along the sequence, then MatMul and Relu
    (`y`); `z` adds the cache's sum over the sequence (zeros when it is empty) to `x`, and `e`
    is the cache itself through Relu (empty when it is)."""
    w = nh.from_array(np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32), "w")
    g = h.make_graph(
        [h.make_node("Concat", ["past", "x"], ["cat"], axis=1, name="concat"),
         h.make_node("MatMul", ["cat", "w"], ["mm"], name="matmul"),
         h.make_node("Relu", ["mm"], ["y"], name="relu"),
         h.make_node("ReduceSum", ["past", "axes"], ["ps"], keepdims=1, name="sum_past"),
         h.make_node("Add", ["ps", "x"], ["z"], name="add"),
         h.make_node("Relu", ["past"], ["e"], name="relu_past")],
        "empty_cache",
        [h.make_tensor_value_info("past", T.FLOAT, [1, "P", 4]),
         h.make_tensor_value_info("x", T.FLOAT, [1, 2, 4])],
        [h.make_tensor_value_info("y", T.FLOAT, [1, None, 3]),
         h.make_tensor_value_info("z", T.FLOAT, [1, 2, 4]),
         h.make_tensor_value_info("e", T.FLOAT, [1, "P", 4])],
        [w, nh.from_array(np.array([1], np.int64), "axes")])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


FEEDS = {"past": np.zeros((1, 0, 4), np.float32),
         "x": np.random.default_rng(1).standard_normal((1, 2, 4)).astype(np.float32)}


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("zero") / "empty_cache.onnx"
    onnx.save(empty_cache_model(), path)
    return path


@pytest.fixture(scope="module")
def want(model_path):
    sess = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    out = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, FEEDS)))
    assert out["e"].shape == (1, 0, 4) and np.array_equal(out["z"], FEEDS["x"])
    return out


def _check(got, want):
    assert set(got) == set(want)
    for k in want:
        assert got[k].shape == want[k].shape, k
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("strategy", ["single:onnxruntime", "greedy:tvm,onnxruntime",
                                      "greedy:openvino,onnxruntime"])
def test_an_empty_cache_runs_with_orts_numbers(model_path, want, tmp_path, strategy):
    out = tmp_path / "a.provmap"
    art = provmap.compile(str(model_path), strategy, out=out, input_shapes={"past": (1, 0, 4)})
    assert art.manifest["model"]["inputs"][0]["shape"] == [1, 0, 4]
    on = {p["backend"] for p in art.manifest["partitions"]}
    if strategy != "single:onnxruntime":  # the reduction over nothing went to ORT, not all
        assert len(on) == 2
    _check(provmap.load(out).run(FEEDS), want)


@pytest.mark.parametrize("backend,name", [("openvino", "OpenVINO"), ("tvm", "TVM")])
def test_openvino_and_tvm_decline_a_reduction_over_nothing(model_path, backend, name):
    with pytest.raises(ProvmapError) as e:
        provmap.compile(str(model_path), f"single:{backend}", input_shapes={"past": (1, 0, 4)})
    msg = str(e.value)
    assert "'sum_past' (ReduceSum)" in msg and "zero-size tensor 'past' [1, 0, 4]" in msg \
        and name in msg and "\n" not in msg


def _aligned_empty(shape) -> np.ndarray:
    """An empty float32 array on a 64-byte boundary (numpy's zero strides and all): the one
    TVM's zero-copy path used to take and its VM then refused ("Mismatched a.strides")."""
    kept = []
    for _ in range(10_000):
        a = np.zeros(shape, np.float32)
        if a.ctypes.data % 64 == 0:
            return a
        kept.append(a)  # held, so the next allocation lands elsewhere
    pytest.skip("numpy never put an empty array on a 64-byte boundary here")


@pytest.mark.parametrize("backend", ["openvino", "tvm"])
def test_an_empty_result_from_an_empty_input_runs_everywhere(tmp_path, backend):
    """Relu, Mul, Softmax over a zero batch: nothing to compute, every backend returns the
    empty array (TVM used to fail on it in some runs: numpy's zero strides)."""
    g = h.make_graph(
        [h.make_node("Relu", ["a"], ["r"]), h.make_node("Mul", ["r", "r"], ["m"]),
         h.make_node("Softmax", ["m"], ["y"], axis=-1),
         h.make_node("Concat", ["a", "b"], ["c"], axis=0)],
        "g", [h.make_tensor_value_info("a", T.FLOAT, ["N", 5]),
              h.make_tensor_value_info("b", T.FLOAT, [2, 5])],
        [h.make_tensor_value_info("y", T.FLOAT, ["N", 5]),
         h.make_tensor_value_info("c", T.FLOAT, [None, 5])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)
    out = tmp_path / "a.provmap"
    provmap.compile(m, f"single:{backend}", out=out, input_shapes={"a": (0, 5)})
    mod = provmap.load(out)
    # The failure depended on where numpy put the empty array: both kinds, every time.
    for a in (_aligned_empty((0, 5)), np.zeros((0, 5), np.float32)[:, :]):
        feeds = {"a": a, "b": np.ones((2, 5), np.float32)}
        got = mod.run(feeds)
        assert got["y"].shape == (0, 5)
        np.testing.assert_array_equal(got["c"], feeds["b"])


def test_cli_takes_a_zero_dimension(model_path, want, tmp_path):
    art = tmp_path / "a.provmap"
    r = cli("compile", model_path, "-o", art, "--input-shape", "past=1x0x4",
            "--strategy", "greedy:openvino,onnxruntime")
    assert r.returncode == 0, r.stderr
    np.savez(tmp_path / "in.npz", **FEEDS)
    r = cli("run", art, "--inputs", tmp_path / "in.npz", "-o", tmp_path / "out.npz")
    assert r.returncode == 0, r.stderr
    got = np.load(tmp_path / "out.npz")
    _check({k: got[k] for k in got.files}, want)
    r = cli("run", art)  # random inputs keep the zero
    assert r.returncode == 0 and "e: float32[1, 0, 4]" in r.stdout, r.stderr
    r = cli("compile", model_path, "-o", tmp_path / "b.provmap", "--input-shape", "past=1x0x4",
            "--strategy", "single:tvm")
    one_error(r, "'sum_past' (ReduceSum)", "is not supported by tvm", "zero-size tensor 'past'")
