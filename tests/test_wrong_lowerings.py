"""Settings a library computes otherwise than ONNX, found by the corpus step (issue 32), are
refused on that library with the reason, and greedy runs them elsewhere with ONNX Runtime's
numbers: never run wrong (runtime_module/backends/ov_refusals.py,
provenance/converters.wrong_lowering)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

from provmap.partition.compile import compile_model
from provmap.provenance.util.errors import ProvmapError
from provmap.runtime_module.module import load


# Builds record their digest in the trust list and their prices in the cache: this test's own.
pytestmark = pytest.mark.usefixtures("own_config")


def _model(node, x_shape, y_shapes, inits=(), x_type=TP.FLOAT):
    outs = [helper.make_tensor_value_info(o, t, s) for o, (t, s) in zip(node.output, y_shapes)]
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", x_type, x_shape)],
                          outs, list(inits))
    opset = 28 if node.op_type == "SpaceToDepth" else 19  # its mode attribute is opset 28's
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def topk_ties():
    k = numpy_helper.from_array(np.array([3], np.int64), "k")
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], name="topk")
    return _model(node, [2, 4], [(TP.FLOAT, [2, 3]), (TP.INT64, [2, 3])], [k]), \
        {"x": np.array([[1, 1, 1, 0], [2, 2, 3, 3]], np.float32)}


def space_to_depth_crd():
    node = helper.make_node("SpaceToDepth", ["x"], ["y"], name="s2d", blocksize=2, mode="CRD")
    return _model(node, [1, 2, 4, 4], [(TP.FLOAT, [1, 8, 2, 2])]), \
        {"x": np.arange(32, dtype=np.float32).reshape(1, 2, 4, 4)}


def isinf_positive():
    node = helper.make_node("IsInf", ["x"], ["y"], name="isinf", detect_negative=0)
    return _model(node, [4], [(TP.BOOL, [4])]), \
        {"x": np.array([1.0, np.inf, -np.inf, np.nan], np.float32)}


def _ort(model, feeds):
    try:
        s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as e:  # an opset this ORT has no kernel for
        pytest.skip(f"ONNX Runtime cannot run it: {e}")
    return s.run(None, feeds)


@pytest.mark.parametrize("make,backend,words", [
    (topk_ties, "openvino", "breaks TopK ties"),
    (space_to_depth_crd, "openvino", "DCR whatever the mode"),
    (space_to_depth_crd, "tvm", "DCR whatever the mode"),
    (isinf_positive, "tvm", "ignores detect_positive/detect_negative"),
])
def test_refused_with_the_reason_and_run_elsewhere(make, backend, words, tmp_path):
    model, feeds = make()
    with pytest.raises(ProvmapError, match=words):
        compile_model(model, f"single:{backend}")
    want = _ort(model, feeds)  # SpaceToDepth's mode is opset 28's: ORT 1.32 has no kernel yet
    compile_model(model, f"greedy:{backend},onnxruntime").save(tmp_path / "a.provmap")
    mod = load(tmp_path / "a.provmap")
    assert {p["backend"] for p in mod.manifest["partitions"]} == {"onnxruntime"}
    got = mod.run(feeds)
    for name, w in zip([o.name for o in model.graph.output], want):
        np.testing.assert_array_equal(got[name], w)


# onnx's own cases of 4-bit and 8-bit-float tensors: TVM crashed its VM on the first (under
# `map`, counted crashed) and returned other numbers on the second; both are now refused at
# import with the reason, on single:tvm and map alike.
NARROW_CASES = {"test_cast_FLOAT_to_INT4": "int4", "test_castlike_UINT4_to_FLOAT_expanded": "uint4",
                "test_cast_FLOAT_to_FLOAT8E5M2": "float8e5m2",
                "test_castlike_FLOAT8E4M3FN_to_FLOAT_expanded": "float8e4m3fn"}


@pytest.mark.parametrize("pipeline", ["provmap-tvm", "provmap-map"])
@pytest.mark.parametrize("case", sorted(NARROW_CASES))
def test_narrow_types_are_refused_on_tvm(case, pipeline):
    from provmap.bench import conformance as conf

    res = conf.run_case(case, pipeline)
    assert res["status"] == "error", res
    assert f"does not compute {NARROW_CASES[case]} tensors" in res["message"], res


def test_a_float8_round_trip_runs_on_onnxruntime_under_greedy(tmp_path):
    """What TVM declines goes to the next backend, with ONNX Runtime's numbers."""
    g = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["q"], to=TP.FLOAT8E5M2),
         helper.make_node("Cast", ["q"], ["y"], to=TP.FLOAT)], "g",
        [helper.make_tensor_value_info("x", TP.FLOAT, [6])],
        [helper.make_tensor_value_info("y", TP.FLOAT, [6])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)], ir_version=10)
    feeds = {"x": np.array([0.3, 1e6, -1e6, np.inf, np.nan, 1e-7], np.float32)}
    compile_model(model, "greedy:tvm,onnxruntime").save(tmp_path / "a.provmap")
    mod = load(tmp_path / "a.provmap")
    assert {p["backend"] for p in mod.manifest["partitions"]} == {"onnxruntime"}
    np.testing.assert_array_equal(mod.run(feeds)["y"], _ort(model, feeds)[0])


# onnx's Attention cases OpenVINO computed wrong (plain OpenVINO too): refused on it with the
# reason (runtime_module/backends/ov_attention.py), and run right where greedy puts them.
OV_ATTENTION = {"test_attention_local_window_ext_cache_rank2_mask": "ignores left_window_size",
                "test_attention_4d_with_past_and_present_qk_matmul_bias_4d_mask_causal":
                    "past key cache and an attention mask",
                "test_attention_4d_causal_padded_kv_bf16": "bfloat16 causal Attention",
                "test_attention_23_boolmask_fullymasked_row_nan_robustness_expanded":
                    "ReduceMax of infinities"}


@pytest.mark.parametrize("case", sorted(OV_ATTENTION))
def test_openvino_attention_settings_are_refused(case):
    from provmap.bench import conformance as conf

    res = conf.run_case(case, "provmap-openvino")
    assert res["status"] == "error" and OV_ATTENTION[case] in res["message"], res


def test_a_fully_masked_row_runs_right_under_greedy(tmp_path):
    from provmap.bench import conformance as conf

    import onnx

    model_bytes, sets, rtol, atol = conf._cases()[
        "test_attention_23_boolmask_fullymasked_row_nan_robustness_expanded"]
    model = onnx.ModelProto.FromString(model_bytes)
    compile_model(model, "greedy:openvino,onnxruntime").save(tmp_path / "a.provmap")
    mod = load(tmp_path / "a.provmap")
    backends = {p["backend"] for p in mod.manifest["partitions"]}
    assert "onnxruntime" in backends
    ins, outs = sets[0]
    got = mod.run({i.name: x for i, x in zip(model.graph.input, ins)})
    conf.compare(outs, [got[o.name] for o in model.graph.output], rtol, atol)


@pytest.mark.parametrize("pipeline", ["provmap-openvino", "provmap-tvm", "provmap-map"])
@pytest.mark.parametrize("case", ["test_bitshift_left_int32_shift_ge_width",
                                  "test_bitshift_right_int8_negative_shift"])
def test_a_shift_by_a_run_time_amount_is_refused(case, pipeline):
    from provmap.bench import conformance as conf

    res = conf.run_case(case, pipeline)
    assert res["status"] == "error" and "BitShift by an amount" in res["message"], res


def test_a_constant_shift_within_range_still_runs_on_both(tmp_path):
    amount = numpy_helper.from_array(np.array([3], np.uint8), "s")
    node = helper.make_node("BitShift", ["x", "s"], ["y"], name="shl", direction="LEFT")
    model = _model(node, [4], [(TP.UINT8, [4])], [amount], x_type=TP.UINT8)
    feeds = {"x": np.array([1, 2, 3, 31], np.uint8)}
    for backend in ("openvino", "tvm"):
        compile_model(model, f"single:{backend}").save(tmp_path / f"{backend}.provmap")
        got = load(tmp_path / f"{backend}.provmap", trust=True).run(feeds)["y"]
        np.testing.assert_array_equal(got, feeds["x"] << 3)
