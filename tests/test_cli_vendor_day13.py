"""Issue 36's thirteenth new-user afternoon, through the real CLI."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import onnx
from cli_runner import provmap, refused
from onnx import TensorProto, helper, numpy_helper
from test_cli_vendor_day11 import _relu
from small_models import two_inputs


def _options(artifact, backend):
    with zipfile.ZipFile(artifact) as z:
        return json.loads(z.read("manifest.json"))["backends"][backend]["options"]


def test_a_free_string_option_loses_its_surrounding_spaces(tmp_path):
    """`tvm.mcpu= native` passed the check, was recorded as " native", and LLVM, knowing no
    such CPU, built generic x86-64 code (no AVX at all) under a manifest that reads native."""
    out = tmp_path / "a.provmap"
    r = provmap("compile", _relu(tmp_path), "-o", out, "--strategy", "single:tvm",
                "--backend-option", "tvm.mcpu= native ")
    assert r.returncode == 0, r.stderr
    assert _options(out, "tvm")["mcpu"] == "native"


def test_an_empty_only_ops_is_refused(tmp_path):
    """`openvino.only_ops=` was stored as `only_ops: []` and ignored: every node ran on the
    backend the artifact says may run none."""
    model, out = _relu(tmp_path), tmp_path / "a.provmap"
    for argv in (("--strategy", "greedy:openvino,onnxruntime",
                  "--backend-option", "openvino.only_ops="),
                 ("--strategy", "greedy:openvino,onnxruntime",
                  "--backend-option", "openvino.only_ops=,"),
                 ("--strategy", "greedy:openvino[only_ops=],onnxruntime")):
        refused(provmap("compile", model, "-o", out, *argv), "only_ops",
                "at least one ONNX op type")
    assert not out.exists()
    # exclude_ops= means "exclude nothing", which is what it does
    r = provmap("compile", model, "-o", out, "--strategy", "greedy:openvino,onnxruntime",
                "--backend-option", "openvino.exclude_ops=")
    assert r.returncode == 0, r.stderr


def test_an_input_of_another_type_than_its_weights_is_blamed_on_the_node(tmp_path):
    """An input declared double beside float weights: the refusal blamed the graph output's
    declared type, and once that was "corrected", ONNX Runtime's missing double Conv kernel.
    ONNX Runtime names the Conv binding T to two types; so does provmap now."""
    w = numpy_helper.from_array(np.ones((2, 3, 1, 1), np.float32), "W")
    for out_type in (TensorProto.FLOAT, TensorProto.DOUBLE):
        g = helper.make_graph(
            [helper.make_node("Conv", ["img", "W"], ["c"], name="conv1"),
             helper.make_node("Relu", ["c"], ["y"], name="relu")], "g",
            [helper.make_tensor_value_info("img", TensorProto.DOUBLE, [1, 3, 4, 4])],
            [helper.make_tensor_value_info("y", out_type, [1, 2, 4, 4])], [w])
        path = tmp_path / f"bad{out_type}.onnx"
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                                    ir_version=8), path)
        line = refused(provmap("compile", path, "-o", tmp_path / "a.provmap", "--strategy",
                               "single:onnxruntime"),
                       "ONNX node 'conv1' (Conv) binds its type T to float64 (input 'img') and "
                       "to float32 (input 'W')")
        assert "declared type" not in line and "no CPU kernel" not in line, line


def test_bisect_takes_open_input_shapes_from_the_inputs_given(tmp_path):
    """bisect --inputs with 1x16 arrays still asked for --input-shape (suggesting 1x1)."""
    model = two_inputs(tmp_path)
    npz = tmp_path / "in.npz"
    np.savez(npz, input_ids=np.ones((1, 16), np.float32),
             attention_mask=np.full((1, 16), 2, np.float32))
    r = provmap("bisect", model, "--backend", "openvino", "--inputs", npz, "-o",
                tmp_path / "repro", "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["diverges"] is False and res["outputs"][0]["ok"] is True


def test_compile_progress_counts_the_op_nodes_inspect_counts(tmp_path):
    """L2: "building p0 on openvino (119 op nodes)" where the summary and inspect said 93 (a
    model with stale value_info: openvino folded shape arithmetic).  The line after the build
    says how many the kernels compute, the number the summary and inspect print."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Identity", ["r"], ["i"], name="alias"),
             helper.make_node("Add", ["i", "w"], ["y"], name="add")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [numpy_helper.from_array(np.ones((1, 4), np.float32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "alias.onnx")
    out = tmp_path / "a.provmap"
    r = provmap("compile", tmp_path / "alias.onnx", "-o", out, "--strategy", "single:openvino")
    assert r.returncode == 0, r.stderr
    assert "building p0 on openvino (3 op nodes)" in r.stderr
    assert "its kernels compute 2 of the 3 op nodes it was given; the other 1 was elided" \
        in r.stderr
    assert "p0:openvino(2)" in r.stdout
    assert "p0  openvino  2 op nodes" in provmap("inspect", out).stdout
