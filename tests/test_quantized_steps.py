"""A DequantizeLinear's float output lies on its scale's grid: compare and bisect judge it in
steps of that scale, as they judge int8 tensors (issue 36's fifth afternoon: a uint8 QDQ model
one step off, 1/255 = 0.00392, failed compare at atol 1e-4 while bisect said it matched)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from provmap.workbench.compare import Tolerance, dequantized_steps, metrics


def _qdq():
    scale = numpy_helper.from_array(np.array(1 / 255, np.float32), "s")
    zp = numpy_helper.from_array(np.array(0, np.uint8), "z")
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q"),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dq")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
                          [scale, zp])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_the_step_of_a_dequantized_tensor_is_its_scale():
    assert dequantized_steps(_qdq()) == {"y": np.float32(1 / 255).item()}


def test_one_step_apart_matches_two_do_not_and_quant_steps_0_is_exact():
    ref = np.array([0.0, 10, 20, 30], np.float32) / 255
    one = ref + np.float32(1 / 255)
    step = dequantized_steps(_qdq())["y"]
    assert metrics(one, ref, Tolerance(), step)["ok"]
    assert not metrics(one, ref, Tolerance())["ok"]          # without the grid: atol 1e-4
    assert not metrics(ref + np.float32(2 / 255), ref, Tolerance(), step)["ok"]
    assert not metrics(one, ref, Tolerance(quant_steps=0), step)["ok"]


def test_a_dropout_in_training_mode_is_said_to_be_random():
    """compare named a train-mode Dropout as the first divergent partition, with no word that
    its values are random by design."""
    from provmap.workbench.compare import random_outputs

    ratio = numpy_helper.from_array(np.array(0.5, np.float32), "r")
    train = numpy_helper.from_array(np.array(True), "t")
    nodes = [helper.make_node("Dropout", ["x", "r", "t"], ["y", "mask"], name="drop")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
                          [ratio, train])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    notes = random_outputs(m)
    assert set(notes) == {"y", "mask"} and "training mode" in notes["y"]
    train.CopyFrom(numpy_helper.from_array(np.array(False), "t"))
    m.graph.initializer[1].CopyFrom(train)
    assert random_outputs(m) == {}


def _graph(nodes, *extra_outputs):
    from onnx import numpy_helper as nh

    inits = [nh.from_array(np.array(v, np.float32), n) for n, v in (("s", 0.05), ("t", 0.1))]
    inits.append(nh.from_array(np.array(128, np.uint8), "z"))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [1, 1, 4, 4])],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
                           for o in ("y", *extra_outputs)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_values_selected_from_a_grid_stay_on_it_and_a_quantizer_input_is_judged_in_its_steps():
    """Issue 52: bisect judged a QDQ ResNet-18's MaxPool output (values of the Relu's grid) and
    a Conv output only a QuantizeLinear reads by atol, and blamed each for a step (or a tenth
    of one) that compare passes on the model's outputs."""
    from provmap.partition.measure.quant_steps import grid_steps

    mk = helper.make_node
    m = _graph([mk("QuantizeLinear", ["x", "s", "z"], ["q"]),
                mk("DequantizeLinear", ["q", "s", "z"], ["d"]),
                mk("MaxPool", ["d"], ["p", "idx"], kernel_shape=[2, 2]),
                mk("Flatten", ["p"], ["f"]),
                mk("Concat", ["d", "d"], ["same"], axis=1),
                mk("Concat", ["d", "x"], ["mixed"], axis=1),
                mk("Add", ["f", "f"], ["a"]),
                mk("QuantizeLinear", ["a", "t", "z"], ["aq"]),
                mk("DequantizeLinear", ["aq", "t", "z"], ["y"]),
                mk("Sigmoid", ["d"], ["sig"]),
                mk("QuantizeLinear", ["sig", "t", "z"], ["sq"]),
                mk("QuantizeLinear", ["sig", "s", "z"], ["sq2"]),
                mk("Tanh", ["d"], ["out"]),
                mk("QuantizeLinear", ["out", "t", "z"], ["oq"])], "mixed", "same", "out")
    steps = grid_steps(m)
    s, t = np.float32(0.05).item(), np.float32(0.1).item()
    assert steps["p"] == steps["f"] == steps["same"] == s
    assert "idx" not in steps    # MaxPool's indices are not values of the grid
    assert "mixed" not in steps  # one input off the grid: the result is not on it
    assert steps["a"] == t       # only a quantizer reads it: judged in that quantizer's steps
    assert "sig" not in steps    # quantizers of two scales read it
    assert "out" not in steps    # a model output: the user reads it as it is
