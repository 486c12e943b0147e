"""Issue 36's twelfth new-user afternoon (its lows), through the real CLI."""

from __future__ import annotations

from cli_runner import provmap
from onnx import TensorProto, helper


def test_the_option_table_says_what_tvm_builds_for_without_mcpu():
    """It said "default: this CPU"; untuned partitions are built for generic x86-64."""
    r = provmap("backends", "--options")
    assert r.returncode == 0, r.stderr
    row = next(ln for ln in r.stdout.splitlines() if "mcpu" in ln and "LLVM" in ln)
    assert "generic x86-64 untuned" in row and "default: this CPU" not in row, row


def test_an_op_onnx_runtime_lacks_is_no_verdict_on_the_input_shapes():
    """A compile failing under --input-shape asks ONNX Runtime whether the model runs at those
    shapes; a model ORT cannot load at any shape (an op it lacks) said "cannot run at these
    input shapes" in place of the backend's own error.  A Reshape the shapes break is one."""
    from provmap.runtime_module.shape_check import ort_refuses

    def model(node, *extra):
        g = helper.make_graph([node], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              list(extra))
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("vendor.x", 1)],
                                 ir_version=8)

    lacking = model(helper.make_node("NoSuchOp", ["x"], ["y"], domain="vendor.x"))
    assert ort_refuses(lacking) is None
    shape = helper.make_tensor("s", TensorProto.INT64, [1], [5])
    broken = model(helper.make_node("Reshape", ["x", "s"], ["y"]), shape)
    assert ort_refuses(broken)
