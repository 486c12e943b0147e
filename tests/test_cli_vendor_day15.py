"""Issue 36's fifteenth new-user afternoon, through the real CLI."""

from __future__ import annotations

import os

import onnx
from cli_runner import provmap, refused
from onnx import TensorProto, helper


def test_an_output_listed_twice_compiles_into_an_artifact_that_opens(tmp_path):
    """M1: ONNX Runtime runs a graph that lists one output twice; provmap compiled it (exit 0)
    into an artifact every reader refused ("model.outputs[2]: 'p' is listed twice")."""
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["p"], name="relu"),
                           helper.make_node("Neg", ["x"], ["q"], name="neg")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4])
                           for n in ("p", "q", "p")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              tmp_path / "m.onnx")
    for backend in ("onnxruntime", "openvino", "tvm"):
        art = tmp_path / f"{backend}.provmap"
        r = provmap("compile", tmp_path / "m.onnx", "-o", art, "--strategy", f"single:{backend}")
        assert r.returncode == 0, r.stderr
        assert provmap("inspect", art).returncode == 0
        r = provmap("run", art, "--random")
        assert r.returncode == 0, r.stderr
        assert [ln.split(":")[0] for ln in r.stdout.splitlines()[:2]] == ["p", "q"], r.stdout
        r = provmap("compare", art, "--model", tmp_path / "m.onnx")
        assert r.returncode == 0 and r.stdout.strip().endswith("match"), r.stdout + r.stderr


def test_threads_far_past_the_machine_are_refused_at_compile(tmp_path):
    """M3: onnxruntime.threads=4096 passed (within the table's typo guard) and a 17-node model
    then took 38.8 s a call on 2 CPUs."""
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              tmp_path / "m.onnx")
    out, many = tmp_path / "a.provmap", 8 * (os.cpu_count() or 1) + 1
    for argv in (("--strategy", "single:onnxruntime", "--backend-option",
                  f"onnxruntime.threads={many}"),
                 ("--strategy", f"single:openvino[threads={many}]")):
        refused(provmap("compile", tmp_path / "m.onnx", "-o", out, *argv), f"threads={many}",
                "CPU(s)")
    assert not out.exists()
    r = provmap("compile", tmp_path / "m.onnx", "-o", out, "--strategy", "single:onnxruntime",
                "--backend-option", f"onnxruntime.threads={many - 1}")
    assert r.returncode == 0, r.stderr


def _save(tmp_path, nodes, inputs, outputs, name="m.onnx"):
    g = helper.make_graph(nodes, "g",
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                           for n, s in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                           for n, s in outputs])
    path = tmp_path / name
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              path)
    return path


def test_an_op_list_naming_only_folded_ops_says_it_changes_nothing(tmp_path):
    """L4: exclude_ops=Shape where every Shape is folded before import compiled the same plan
    without a word."""
    model = _save(tmp_path, [helper.make_node("Shape", ["x"], ["sh"], name="shape"),
                             helper.make_node("Relu", ["x"], ["r"], name="relu"),
                             helper.make_node("Reshape", ["r", "sh"], ["y"], name="reshape")],
                  [("x", [1, 4])], [("y", [1, 4])])
    r = provmap("compile", model, "-o", tmp_path / "a.provmap", "--strategy",
                "greedy:openvino,onnxruntime", "--backend-option", "openvino.exclude_ops=Shape")
    assert r.returncode == 0, r.stderr
    assert "openvino.exclude_ops: no node left to run has op type Shape" in r.stderr


def test_a_kernel_with_no_onnx_node_says_so(tmp_path):
    """L3: OpenVINO's copy layer for an Identity's output maps to no ONNX node, and
    `lookup --kernel` printed only a header."""
    model = _save(tmp_path, [helper.make_node("Relu", ["x"], ["r"], name="relu"),
                             helper.make_node("Identity", ["r"], ["r2"], name="ident")],
                  [("x", [1, 4])], [("r", [1, 4]), ("r2", [1, 4])])
    art = tmp_path / "a.provmap"
    assert provmap("compile", model, "-o", art, "--strategy", "single:openvino").returncode == 0
    r = provmap("lookup", art, "--kernel", "p0:r2")
    assert r.returncode == 0, r.stderr
    assert "maps to no ONNX node" in r.stdout
