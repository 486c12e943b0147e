"""Issue 36's ninth new-user afternoon, through the real CLI."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from cli_runner import provmap


def test_two_sizes_for_one_named_dimension_are_said_before_a_backend_is_blamed(tmp_path):
    """x[N, 4] and m[N, 4] given batch 2 and 3: the first node joining them failed on TVM or
    ONNX Runtime, which took the blame ("Where is not supported by tvm")."""
    g = helper.make_graph([helper.make_node("Add", ["x", "m"], ["y"], name="add")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4]),
                           helper.make_tensor_value_info("m", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              model)
    r = provmap("compile", model, "-o", tmp_path / "a.provmap", "--strategy", "single:tvm",
                "--input-shape", "x=2x4", "--input-shape", "m=3x4")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    warning = "dimension 'N' is 2 for input 'x' but 3 for input 'm'; the model names them alike"
    lines = r.stderr.splitlines()
    at = next(k for k, ln in enumerate(lines) if warning in ln)
    assert at < next(k for k, ln in enumerate(lines) if ln.startswith("provmap: error:"))
    assert not (tmp_path / "a.provmap").exists()
    r = provmap("compile", model, "-o", tmp_path / "b.provmap", "--strategy", "single:tvm",
                "--input-shape", "x=2x4", "--input-shape", "m=2x4")
    assert r.returncode == 0 and "names them alike" not in r.stderr, r.stderr


def test_a_tvm_only_search_skips_the_default_one_thread_variant(tmp_path):
    """`compile --backends tvm` failed on the default variant threads=1, which TVM does not
    take (docs/collage.md says it is skipped), suggesting 'trials'."""
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["a"], name="relu"),
                           helper.make_node("Sigmoid", ["a"], ["y"], name="sig")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              model)
    r = provmap("compile", model, "-o", tmp_path / "a.provmap", "--backends", "tvm",
                "--search-budget", "3", "--refine-budget", "0")
    assert r.returncode == 0, r.stderr
    r = provmap("compile", model, "-o", tmp_path / "b.provmap", "--backends", "tvm",
                "--search-budget", "3", "--variant", "thred=1")
    assert r.returncode == 2 and "variant 'thred=1': no searched backend takes option 'thred'" \
        in r.stderr, r.stderr  # a typo is still one
