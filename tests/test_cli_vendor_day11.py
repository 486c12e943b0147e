"""Issue 36's eleventh new-user afternoon, through the real CLI."""

from __future__ import annotations

import onnx
from cli_runner import provmap, refused
from onnx import TensorProto, helper


def _relu(tmp_path):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
    path = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              path)
    return path


def test_tuning_options_without_tuning_are_refused(tmp_path):
    """tvm.trials, tune_budget, tuning_db and --tuning-db without tune=metaschedule did
    nothing, exit 0, and the artifact's label read `tvm[trials=5;tune_budget=3]` as if tuned."""
    model, out = _relu(tmp_path), tmp_path / "a.provmap"
    why = "acts only with tune=metaschedule: nothing is tuned"
    for extra in (("--backend-option", "tvm.trials=5"), ("--backend-option", "tvm.tune_budget=5"),
                  ("--backend-option", f"tvm.tuning_db={tmp_path / 'db'}"),
                  ("--tuning-db", tmp_path / "db")):
        refused(provmap("compile", model, "-o", out, "--strategy", "single:tvm", *extra), why)
    refused(provmap("compile", model, "-o", out, "--strategy", "single:tvm[trials=5;tune_budget=3]"),
            "option trials " + why)
    assert not out.exists() and not (tmp_path / "db").exists()
