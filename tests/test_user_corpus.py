"""bench/user_corpus.py without torch: the transforms that stand for users' tools make what those
tools make, ONNX Runtime runs the results, and the step runner takes one model through the real
`provmap` CLI (map, compile, run, compare, annotate) and records each step."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import small_models as sm

from provmap.bench import user_models as um
from provmap.bench.torch_corpus import ort_outputs
from provmap.bench.user_corpus import Runner, markdown, run_model


def _feeds(seed):
    return {"x": np.random.default_rng(seed).standard_normal((2, 3, 8, 8)).astype(np.float32)}


CALIBRATION = [_feeds(100 + i) for i in range(4)]


@pytest.mark.parametrize("transform,ops", [
    ("quant:dynamic", {"ConvInteger", "MatMulInteger", "DynamicQuantizeLinear"}),
    ("quant:qdq", {"QuantizeLinear", "DequantizeLinear", "Conv", "Gemm"}),
    ("quant:qoperator", {"QLinearConv", "QGemm"}),
    ("fp16", {"Cast", "Conv", "Gemm"}),
])
def test_quantizers_and_fp16_make_their_ops_and_ort_runs_them(tmp_path, transform, ops):
    base = sm.dynamic_batch_flatten()
    m = um.apply(transform, base, CALIBRATION)
    assert ops <= {n.op_type for n in m.graph.node}
    assert m.ir_version <= um.MAX_IR
    onnx.save(m, tmp_path / "m.onnx")
    onnx.save(base, tmp_path / "base.onnx")
    got = ort_outputs(tmp_path / "m.onnx", _feeds(0))["y"]
    want = ort_outputs(tmp_path / "base.onnx", _feeds(0))["y"]
    # Close to the float model, within what 8 or 16 bits allow: the transform kept the network.
    assert np.max(np.abs(got - want)) < 0.1 * np.max(np.abs(want))
    if transform == "fp16":  # what the converter does that onnx.checker refuses and ORT accepts
        with pytest.raises(onnx.checker.ValidationError, match="topologically sorted"):
            onnx.checker.check_model(m)


def test_declared_shape_defects(tmp_path):
    base = sm.dynamic_batch_flatten()
    wrong = um.wrong_output_shape(base, 0, (1, "seqlen", 7))
    dims = wrong.graph.output[0].type.tensor_type.shape.dim
    assert [d.dim_value or d.dim_param for d in dims] == [1, "seqlen", 7]
    m1 = um.minus_one_dims(base)
    assert m1.graph.input[0].type.tensor_type.shape.dim[0].dim_value == -1
    assert m1.graph.output[0].type.tensor_type.shape.dim[0].dim_value == -1
    for name, m in (("wrong", wrong), ("m1", m1)):
        onnx.save(m, tmp_path / f"{name}.onnx")
        assert ort_outputs(tmp_path / f"{name}.onnx", _feeds(0))["y"].shape == (2, 10)


def test_runner_takes_a_quantized_model_through_the_cli(tmp_path):
    m = um.apply("quant:dynamic", sm.dynamic_batch_flatten(), [])
    onnx.save(m, tmp_path / "q.onnx")
    runner = Runner(tmp_path, timeout=600)
    steps = ["map", "single:onnxruntime", "compare", "annotate"]
    rec = run_model("q", tmp_path / "q.onnx", _feeds(0), precision="int8",
                    input_shapes={"x": [2, 3, 8, 8]}, steps=steps, runner=runner)
    assert rec["ort"]["ok"] and list(rec["steps"]) == steps
    for step, r in rec["steps"].items():
        assert r["ok"], (step, r)
    assert rec["steps"]["map"]["coverage"]["onnx_nodes_total"] == len(m.graph.node)
    assert rec["steps"]["single:onnxruntime"]["max_abs_diff"] <= rec["atol"]
    assert rec["steps"]["annotate"]["annotate"]["nodes"] == len(m.graph.node)
    assert rec["steps"]["compare"]["artifact"] == "single:onnxruntime"
    table = markdown([dict(rec, build={"ok": True, "nodes": len(m.graph.node)})], steps,
                     {"date": "d", "host": "h", "versions": "v"})
    assert f"| q | int8 | {len(m.graph.node)} | ok" in table and "Failures" not in table


def test_runner_records_a_refusal_as_one_line(tmp_path):
    """ORT refuses a model whose Conv weight has the wrong rank: recorded, nothing else runs;
    a provmap step that fails is its error's first line, not a traceback."""
    bad = sm.dynamic_batch_flatten()
    bad.graph.initializer[0].dims[:] = [4, 27]
    onnx.save(bad, tmp_path / "bad.onnx")
    runner = Runner(tmp_path, timeout=600)
    rec = run_model("bad", tmp_path / "bad.onnx", _feeds(0), runner=runner)
    assert not rec["ort"]["ok"] and rec["steps"] == {}
    fp16 = um.to_fp16(sm.dynamic_batch_flatten())
    onnx.save(fp16, tmp_path / "h.onnx")
    rec = run_model("h", tmp_path / "h.onnx", _feeds(0), precision="fp16",
                    input_shapes={"x": [2, 3, 8, 8]}, steps=["map"], runner=runner)
    r = rec["steps"]["map"]
    assert r["ok"] or ("\n" not in r["error"] and "Traceback" not in r["error"]), r
