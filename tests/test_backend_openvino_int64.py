"""OpenVINO's CPU plugin computes int64 in 32 bits (plain OpenVINO wraps, exit 0): compile names
the int64 arithmetic it places there, an input value outside 32 bits is refused at run time
(values inside run and are right), a constant outside 32 bits keeps its node off OpenVINO, and
an int64 tensor ONNX Runtime hands to an OpenVINO partition runs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from cli_models import int_model, model_file, ort_outputs
from cli_runner import one_error, provmap
from onnx import TensorProto, helper, numpy_helper


def test_openvino_int64_arithmetic_is_named_at_compile(int64_artifact):
    _d, _art, stderr = int64_artifact
    assert ("note: p0 (openvino): OpenVINO's CPU plugin computes int64 in 32 bits: Add 'add': "
            "results past 2**31 wrap") in stderr, stderr
    assert "Concat" not in stderr  # moving data cannot leave the range its inputs are in


@pytest.mark.parametrize("dtype, big, narrow", [(np.int64, 2 ** 40, "int32"),
                                                (np.int64, -(2 ** 35), "int32"),
                                                (np.uint64, 2 ** 40 + 1, "uint32")])
def test_an_input_openvino_would_narrow_is_refused_not_wrapped(tmp_path, dtype, big, narrow):
    """x + 1 on 2**40 came back 1 and Concat gave 0 for it, exit 0 (plain OpenVINO does the
    same); values inside 32 bits run and are right."""
    tp = TensorProto.INT64 if dtype is np.int64 else TensorProto.UINT64
    art = tmp_path / "a.provmap"
    assert provmap("compile", int_model(tmp_path / "m.onnx", tp), "-o", art, "--strategy",
                   "single:openvino").returncode == 0
    np.savez(tmp_path / "big.npz", x=np.array([1, 2, big, 3], dtype))
    r = provmap("run", art, "--inputs", tmp_path / "big.npz", "-o", tmp_path / "out.npz")
    one_error(r, "partition p0 (openvino)", f"input 'x' holds {big}, outside {narrow}",
              "in 32 bits")
    assert not (tmp_path / "out.npz").exists()
    x = np.array([1, 2, 2 ** 31 - 2, 3], dtype)
    np.savez(tmp_path / "ok.npz", x=x)
    r = provmap("run", art, "--inputs", tmp_path / "ok.npz", "-o", tmp_path / "out.npz")
    assert r.returncode == 0, r.stderr
    out = np.load(tmp_path / "out.npz")
    np.testing.assert_array_equal(out["y"], x + 1)
    np.testing.assert_array_equal(out["c"], np.concatenate([x, x]))


def test_an_int64_constant_outside_32_bits_stays_off_openvino(tmp_path):
    """Concat(x, [2**40 + 5, -2**35]) on OpenVINO gave [.., 2147483647, -2147483648], exit 0,
    with no note: a constant is known at compile time."""
    model = model_file(tmp_path / "m.onnx", [helper.make_node("Concat", ["x", "C"], ["z"], axis=0,
                                                              name="cat")],
                       [("x", TensorProto.INT64, [2])], [("z", TensorProto.INT64, [4])],
                       [helper.make_tensor("C", TensorProto.INT64, [2], [2 ** 40 + 5, -2 ** 35])])
    one_error(provmap("compile", model, "-o", tmp_path / "ov.provmap", "--strategy",
                      "single:openvino"),
              "'cat' (Concat) is not supported by openvino", "the constant 'C' holds",
              "outside int32")
    art = tmp_path / "g.provmap"
    r = provmap("compile", model, "-o", art, "--strategy", "greedy:openvino,onnxruntime")
    assert r.returncode == 0 and "p0:onnxruntime(1)" in r.stdout, (r.stdout, r.stderr)
    x = np.array([3, 4], np.int64)
    np.savez(tmp_path / "in.npz", x=x)
    assert provmap("run", art, "--inputs", tmp_path / "in.npz", "-o",
                   tmp_path / "out.npz").returncode == 0
    np.testing.assert_array_equal(np.load(tmp_path / "out.npz")["z"],
                                  ort_outputs(model, {"x": x})["z"])


def test_an_int64_tensor_from_onnx_runtime_runs_on_openvino(tmp_path):
    """M1: TopK (on ONNX Runtime: OpenVINO declines it for its tie order) hands its int64
    indices to an OpenVINO Cast; ONNX Runtime returns them as C long long, which OpenVINO's
    numpy bridge rejected: compile exit 0, every run and compare failed with a cut-off
    "Check 'ov_type_it != dtype_map.end()' failed"."""
    g = helper.make_graph(
        [helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1, name="topk"),
         helper.make_node("Cast", ["i"], ["ci"], to=TensorProto.INT32, name="cast")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("ci", TensorProto.INT32, [2, 2])],
        [numpy_helper.from_array(np.array([2], np.int64), "k")])
    model = tmp_path / "topk_cast.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              model)
    art = tmp_path / "a.provmap"
    r = provmap("compile", model, "-o", art, "--strategy", "greedy:openvino,onnxruntime")
    assert r.returncode == 0, r.stderr
    assert "p0:onnxruntime(1), p1:openvino(1)" in r.stdout + r.stderr
    r = provmap("run", art, "--random")
    assert r.returncode == 0, r.stderr
    r = provmap("compare", art, "--model", model, "--random")
    assert r.returncode == 0 and "match" in r.stdout, r.stdout + r.stderr
