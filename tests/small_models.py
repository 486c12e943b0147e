"""Tiny hand-built ONNX models whose complete provenance map is known in advance."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    onnx.checker.check_model(m, full_check=True)
    return m


def _t(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def conv_relu() -> onnx.ModelProto:
    """Conv (with bias) -> Relu: FuseOps makes one kernel carrying both nodes."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    return _model(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"], name="relu")],
        [_t("x", [1, 3, 8, 8])], [_t("y", [1, 4, 8, 8])], [w, b])


def twin_branches() -> onnx.ModelProto:
    """Two structurally identical Add->Relu branches: one deduplicated kernel, two call sites."""
    c = numpy_helper.from_array(np.full((1, 8), 0.5, np.float32), "c")
    return _model(
        [helper.make_node("Add", ["x", "c"], ["a1"], name="add_a"),
         helper.make_node("Relu", ["a1"], ["r1"], name="relu_a"),
         helper.make_node("Add", ["y", "c"], ["a2"], name="add_b"),
         helper.make_node("Relu", ["a2"], ["r2"], name="relu_b")],
        [_t("x", [1, 8]), _t("y", [1, 8])], [_t("r1", [1, 8]), _t("r2", [1, 8])], [c])


def folded_and_aliases() -> onnx.ModelProto:
    """Identity and shape arithmetic that produce no binding, feeding a Reshape that does."""
    return _model(
        [helper.make_node("Identity", ["x"], ["xi"], name="ident"),
         helper.make_node("Shape", ["xi"], ["s"], name="shape"),
         helper.make_node("Constant", [], ["idx"], name="const_idx",
                          value=numpy_helper.from_array(np.array(0, np.int64))),
         helper.make_node("Gather", ["s", "idx"], ["s0s"], name="gather", axis=0),
         helper.make_node("Constant", [], ["axes"], name="const_axes",
                          value=numpy_helper.from_array(np.array([0], np.int64))),
         helper.make_node("Unsqueeze", ["s0s", "axes"], ["s0"], name="unsqueeze"),
         helper.make_node("Constant", [], ["minus1"], name="const_m1",
                          value=numpy_helper.from_array(np.array([-1], np.int64))),
         helper.make_node("Concat", ["s0", "minus1"], ["shape2"], name="concat", axis=0),
         helper.make_node("Reshape", ["xi", "shape2"], ["r"], name="reshape"),
         helper.make_node("Exp", ["r"], ["y"], name="exp")],
        [_t("x", [2, 3, 4])], [_t("y", [2, 12])])


def unsupported_op() -> onnx.ModelProto:
    """A valid model with an operator the Relax importer does not implement."""
    return _model(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("DFT", ["r"], ["y"], name="my_dft", onesided=0)],
        [_t("x", [1, 8, 1])], [_t("y", [1, 8, 2])])


def dynamic_batch_flatten() -> onnx.ModelProto:
    """What the TorchScript exporter writes for `x.view(x.size(0), -1)` under a dynamic batch
    axis: Conv -> Relu, then Shape -> Gather -> Unsqueeze -> Concat -> Reshape, then a Gemm.
    With --input-shape the shape chain folds to a constant, so provmap compiles a derived copy
    (static input, Constant nodes in place of the chain)."""
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3, "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32) * 0.1, "b")
    fw = numpy_helper.from_array(rng.standard_normal((256, 10)).astype(np.float32) * 0.06, "fw")
    fb = numpy_helper.from_array(rng.standard_normal(10).astype(np.float32) * 0.1, "fb")
    idx = numpy_helper.from_array(np.array(0, np.int64), "idx")
    axes = numpy_helper.from_array(np.array([0], np.int64), "axes")
    m1 = numpy_helper.from_array(np.array([-1], np.int64), "m1")
    return _model(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="/conv/Conv", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"], name="/relu/Relu"),
         helper.make_node("Shape", ["r"], ["s"], name="/Shape"),
         helper.make_node("Gather", ["s", "idx"], ["n"], name="/Gather", axis=0),
         helper.make_node("Unsqueeze", ["n", "axes"], ["n1"], name="/Unsqueeze"),
         helper.make_node("Concat", ["n1", "m1"], ["shape"], name="/Concat", axis=0),
         helper.make_node("Reshape", ["r", "shape"], ["flat"], name="/Reshape"),
         helper.make_node("Gemm", ["flat", "fw", "fb"], ["y"], name="/fc/Gemm")],
        [_t("x", ["N", 3, 8, 8])], [_t("y", ["N", 10])], [w, b, fw, fb, idx, axes, m1])


def conv_dropout(read_mask: bool) -> onnx.ModelProto:
    """Conv -> Dropout (opset 9, as SqueezeNet's) -> Relu, with the Dropout's mask output unread
    or, with `read_mask`, cast and added to the result.  Backends disagree on that mask (ONNX
    Runtime: float zeros; OpenVINO: boolean ones) and agree on everything else."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Dropout", ["c"], ["d", "mask"], name="drop"),
             helper.make_node("Relu", ["d"], ["r" if read_mask else "y"], name="relu")]
    if read_mask:
        nodes += [helper.make_node("Cast", ["mask"], ["m"], name="cast", to=TensorProto.FLOAT),
                  helper.make_node("Add", ["r", "m"], ["y"], name="add")]
    return _model(nodes, [_t("x", [1, 3, 8, 8])], [_t("y", [1, 4, 8, 8])], [w], opset=9)


def resize_to_computed_sizes() -> onnx.ModelProto:
    """Resize to sizes computed at run time from the Shape of a symbolic input, then Relu.

    The Relax frontend cannot convert the Resize (opaque, its output shape unknown); TVM then
    fails to build the Relu ("emit_te now only supports Tensor that has ShapeExpr shape", raised
    in FoldConstant), as on CRNN, Swin-T and YOLOv8 exports mapped without shapes."""
    return _model(
        [helper.make_node("Shape", ["x"], ["s"], name="shape"),
         helper.make_node("Mul", ["s", "two"], ["sizes"], name="double"),
         helper.make_node("Resize", ["x", "", "", "sizes"], ["up"], name="resize", mode="nearest"),
         helper.make_node("Relu", ["up"], ["y"], name="relu"),
         helper.make_node("Neg", ["x"], ["z"], name="neg")],
        [_t("x", [1, 3, "H", "W"])], [_t("y", [1, 3, "H2", "W2"]), _t("z", [1, 3, "H", "W"])],
        [numpy_helper.from_array(np.array([1, 1, 2, 2], np.int64), "two")])


def int_pow() -> onnx.ModelProto:
    """An integer Pow between float ops: TVM imports it, then fails to legalize it ("power only
    applies to float"); ONNX Runtime runs it."""
    i32 = lambda name: helper.make_tensor_value_info(name, TensorProto.INT32, [3])
    return _model(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("Pow", ["a", "b"], ["p"], name="int_pow"),
         helper.make_node("Cast", ["p"], ["pf"], name="cast", to=TensorProto.FLOAT),
         helper.make_node("Add", ["r", "pf"], ["y"], name="add")],
        [_t("x", [3]), i32("a"), i32("b")], [_t("y", [3])])


def cast_to_float4() -> onnx.ModelProto:
    """A round trip through FLOAT4E2M1 between float ops: TVM legalizes it and then fails in
    code generation, after every pass of the Relax pipeline."""
    return _model(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("Cast", ["r"], ["q"], name="to_fp4", to=TensorProto.FLOAT4E2M1),
         helper.make_node("Cast", ["q"], ["d"], name="from_fp4", to=TensorProto.FLOAT),
         helper.make_node("Neg", ["d"], ["y"], name="neg")],
        [_t("x", [4])], [_t("y", [4])], opset=23)


def pad_to_window_multiple() -> onnx.ModelProto:
    """Swin-T's F.pad as the TorchScript exporter writes it: the width padded up to a multiple of
    7, the amount computed at run time from the Shape of a symbolic input, then Relu.

    Gather of the symbolic Shape gives the frontend's TIR variable W itself (no binding); the
    Pad cannot be converted (opaque, its output shape unknown), and TVM then fails to build the
    Relu."""
    c = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)
    return _model(
        [helper.make_node("Shape", ["x"], ["s"], name="shape"),
         helper.make_node("Gather", ["s", "i3"], ["w"], name="gather", axis=0),
         helper.make_node("Mod", ["w", "seven"], ["r"], name="mod"),
         helper.make_node("Sub", ["seven", "r"], ["p0"], name="sub"),
         helper.make_node("Mod", ["p0", "seven"], ["p"], name="mod2"),
         helper.make_node("Unsqueeze", ["p", "ax0"], ["pu"], name="unsqueeze"),
         helper.make_node("Concat", ["zeros6", "pu", "zero1"], ["pads"], name="concat", axis=0),
         helper.make_node("Pad", ["x", "pads"], ["padded"], name="pad"),
         helper.make_node("Relu", ["padded"], ["y"], name="relu"),
         helper.make_node("Neg", ["x"], ["z"], name="neg")],
        [_t("x", [1, 3, 8, "W"])], [_t("y", [1, 3, 8, "W7"]), _t("z", [1, 3, 8, "W"])],
        [c("i3", 3), c("seven", 7), c("ax0", [0]), c("zeros6", [0] * 6), c("zero1", [0])])


def shape_of_filled() -> onnx.ModelProto:
    """Shape of a ConstantOfShape result: the Relax converter returns the shape the fill already
    bound (an earlier binding), as Swin-T's attention-mask arithmetic does.  The Slice and the
    fill between them must keep their own bindings."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape_x"),
        helper.make_node("Add", ["s", "one"], ["t"], name="add_one"),
        helper.make_node("ConstantOfShape", ["t"], ["y"], name="fill",
                         value=numpy_helper.from_array(np.array([1.0], np.float32))),
        helper.make_node("Slice", ["y", "st", "en", "ax"], ["z"], name="slice_y"),
        helper.make_node("Shape", ["y"], ["s2"], name="shape_y"),
        helper.make_node("Cast", ["s2"], ["w"], name="cast_s2", to=TensorProto.FLOAT),
        helper.make_node("Neg", ["z"], ["out"], name="neg_z"),
    ]
    inits = [numpy_helper.from_array(np.array(v, np.int64), n)
             for n, v in (("one", [1, 1]), ("st", [0]), ("en", [-1]), ("ax", [0]))]
    return _model(nodes, [_t("x", ["N", "M"])],
                  [_t("out", ["A", "B"]), _t("w", [2])], inits)


def branches() -> onnx.ModelProto:
    """Two independent branches joined by an Add (MatMul -> Relu, Tanh -> Sigmoid), the second
    also a graph output: with Tanh and Sigmoid kept off ONNX Runtime, greedy makes the branches
    two partitions on two backends that can run at once."""
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((16, 16)).astype(np.float32), "w")
    return _model(
        [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm_a"),
         helper.make_node("Relu", ["m"], ["r"], name="relu_a"),
         helper.make_node("Tanh", ["x"], ["t"], name="tanh_b"),
         helper.make_node("Sigmoid", ["t"], ["s"], name="sigmoid_b"),
         helper.make_node("Add", ["r", "s"], ["y"], name="join")],
        [_t("x", [4, 16])], [_t("y", [4, 16]), _t("s", [4, 16])], [w])


def inception_like(channels: int = 64, size: int = 28) -> onnx.ModelProto:
    """One Inception module (1x1; 1x1 -> 3x3; 1x1 -> 5x5; 3x3 max pool -> 1x1; each conv with a
    Relu; Concat; GlobalAveragePool), nodes named b1_... to b4_... by branch: docs/collage.md
    measures concurrent schedules on it with the branches pinned to two backends."""
    rng = np.random.default_rng(7)
    inits, nodes = [], []

    def conv(name, src, cin, cout, k):
        w = (rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k)))
        inits.append(numpy_helper.from_array(w.astype(np.float32), f"{name}_w"))
        inits.append(numpy_helper.from_array(np.zeros(cout, np.float32), f"{name}_b"))
        nodes.append(helper.make_node("Conv", [src, f"{name}_w", f"{name}_b"], [f"{name}_c"],
                                      name=f"{name}_conv", pads=[k // 2] * 4))
        nodes.append(helper.make_node("Relu", [f"{name}_c"], [f"{name}_r"], name=f"{name}_relu"))
        return f"{name}_r"

    c = channels
    b1 = conv("b1", "x", c, c, 1)
    b2 = conv("b2b", conv("b2a", "x", c, 3 * c // 4, 1), 3 * c // 4, c, 3)
    b3 = conv("b3b", conv("b3a", "x", c, c // 4, 1), c // 4, c // 2, 5)
    nodes.append(helper.make_node("MaxPool", ["x"], ["b4_p"], name="b4_pool", kernel_shape=[3, 3],
                                  pads=[1, 1, 1, 1]))
    b4 = conv("b4", "b4_p", c, c // 2, 1)
    nodes.append(helper.make_node("Concat", [b1, b2, b3, b4], ["cat"], name="join", axis=1))
    nodes.append(helper.make_node("GlobalAveragePool", ["cat"], ["y"], name="gap"))
    return _model(nodes, [_t("x", [1, c, size, size])], [_t("y", [1, 3 * c, 1, 1])], inits)


def two_inputs(tmp_path):
    """input_ids and attention_mask both [B, S], joined by one node, as a BERT export has them:
    saved as tmp_path/two.onnx, its path returned."""
    g = helper.make_graph(
        [helper.make_node("Mul", ["input_ids", "attention_mask"], ["y"], name="mul")], "g",
        [helper.make_tensor_value_info("input_ids", TensorProto.FLOAT, ["B", "S"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.FLOAT, ["B", "S"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "S"])])
    path = tmp_path / "two.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              path)
    return path


def fpn_dynamic() -> onnx.ModelProto:
    """A feature pyramid's top-down step with an open image size, as detectors export it: the
    upsampled map (Resize by scales) and its skip connection hold one size computed two ways,
    which Relax cannot prove equal (the Concat, then a broadcast Add, both read them)."""
    rng = np.random.default_rng(0)
    w = lambda n, *s: numpy_helper.from_array(  # noqa: E731
        (rng.standard_normal(s) * 0.2).astype(np.float32), n)
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    return _model(
        [helper.make_node("Conv", ["x", "w1"], ["c1"], name="down1", strides=[2, 2],
                          pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c1"], ["r1"], name="act1"),
         helper.make_node("Conv", ["r1", "w2"], ["c2"], name="down2", strides=[2, 2],
                          pads=[1, 1, 1, 1]),
         helper.make_node("Resize", ["c2", "", "scales"], ["up"], name="up", mode="nearest"),
         helper.make_node("Concat", ["up", "r1"], ["cat"], name="cat", axis=1),
         helper.make_node("Conv", ["cat", "w3"], ["y0"], name="mix"),
         helper.make_node("Add", ["y0", "r1"], ["y"], name="skip")],
        [_t("x", ["batch", 3, "height", "width"])], [_t("y", ["batch", 8, "h2", "w2"])],
        [w("w1", 8, 3, 3, 3), w("w2", 8, 8, 3, 3), w("w3", 8, 16, 1, 1), scales])


def se_gate_dynamic() -> onnx.ModelProto:
    """A squeeze-and-excitation gate read first (`Mul(gate[b, c, 1, 1], x[b, c, h, w])`, as
    MobileNetV3 and EfficientNet exports write it) with an open image size: the broadcast's
    result is the feature map's size, not the gate's."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) * 0.2).astype(np.float32), "w")
    return _model(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1],
                          strides=[2, 2]),
         helper.make_node("GlobalAveragePool", ["c"], ["g"], name="squeeze"),
         helper.make_node("Sigmoid", ["g"], ["s"], name="gate"),
         helper.make_node("Mul", ["s", "c"], ["y"], name="excite")],
        [_t("x", ["batch", 3, "height", "width"])], [_t("y", ["batch", 4, "h", "w"])], [w])


def tied_weight_model(quantized: bool = True):
    """GPT-2's LM head after quantize_dynamic, small: the embedding table is int8 (shared with a
    Gather), and the head dequantizes its Transpose, a constant subexpression."""
    nh = numpy_helper
    rng = np.random.default_rng(0)
    w = rng.integers(-100, 100, (6, 4)).astype(np.int8)
    inits = [nh.from_array(w if quantized else w.astype(np.float32), "wte"),
             nh.from_array(np.array(0.05, np.float32), "scale"),
             nh.from_array(np.array(0, np.int8), "zp")]
    nodes = [helper.make_node("Transpose", ["wte"], ["wte_t"], perm=[1, 0])]
    if quantized:
        nodes.append(helper.make_node("DequantizeLinear", ["wte_t", "scale", "zp"], ["head"]))
    else:
        nodes.append(helper.make_node("Identity", ["wte_t"], ["head"]))
    nodes.append(helper.make_node("MatMul", ["x", "head"], ["y"]))
    g = helper.make_graph(nodes, "tied", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 8, 4])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 8, 6])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
