"""Small ONNX models the CLI tests write to disk and hand to `provmap` (each writer saves a file
and returns its path), and ONNX Runtime's outputs for one, the reference they are judged by.

Opset 17, IR version 8 unless a writer says otherwise.  `saved_model`, `model_file` and
`float_model` take the graph's nodes and (name, dtype, shape) or (name, shape) triples, so a test
shows the whole model it is about in its own body."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def relu_add_model(path):
    """Relu -> Add on a [1, 8] input: enough for a backend to build, quick to compile."""
    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Add", ["y", "y"], ["z"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [1, 8])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 8])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def relu_file(tmp_path):
    """Relu on a [1, 8] input, saved as relu.onnx in `tmp_path`."""
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
    path = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              path)
    return path


def external_data_model(path, n: int = 16):
    """MatMul + Relu whose [n, n] weight lives in `path`.data, as large exports are saved (from
    n = 512 the weight is 1 MB: provmap leaves it in its file, provenance.weights)."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((n, n))
                                .astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
             helper.make_node("Relu", ["y"], ["z"], name="relu")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [1, n])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, n])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save_model(m, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location=path.name + ".data", size_threshold=0)
    return path


def saved_model(tmp_path, nodes, inputs, outputs, value_info=(), initializer=(), ir=8):
    """A one-graph model saved as m.onnx in `tmp_path`: inputs/outputs/value_info are
    (name, TensorProto dtype, shape) triples."""
    def info(triples):
        return [helper.make_tensor_value_info(*t) for t in triples]

    g = helper.make_graph(nodes, "g", info(inputs), info(outputs), list(initializer),
                          value_info=info(value_info))
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=ir),
              path)
    return path


def model_file(path, nodes, inputs, outputs, initializer=(), functions=(), opsets=()):
    """A one-graph model saved at `path`, with model-local `functions` and the extra `opsets`
    their domains need; inputs/outputs are (name, TensorProto dtype, shape) triples."""
    def info(triples):
        return [helper.make_tensor_value_info(*t) for t in triples]

    g = helper.make_graph(nodes, "g", info(inputs), info(outputs), list(initializer))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), *opsets],
                          ir_version=8, functions=list(functions))
    onnx.save(m, path)
    return path


def float_model(tmp_path, nodes, inputs, outputs, name="m.onnx"):
    """A float32 model saved as `name` in `tmp_path`: inputs/outputs are (name, shape) pairs."""
    g = helper.make_graph(nodes, "g",
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                           for n, s in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                           for n, s in outputs])
    path = tmp_path / name
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              path)
    return path


def int_model(path, dtype=TensorProto.INT64):
    """y = x + 1 and c = concat(x, x): arithmetic and pure data movement, both narrowed by
    OpenVINO's CPU plugin, which computes int64 in 32 bits."""
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "one"], ["y"], name="add"),
         helper.make_node("Concat", ["x", "x"], ["c"], axis=0, name="cat")], "g",
        [helper.make_tensor_value_info("x", dtype, [4])],
        [helper.make_tensor_value_info("y", dtype, [4]),
         helper.make_tensor_value_info("c", dtype, [8])],
        [helper.make_tensor("one", dtype, [1], [1])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              path)
    return path


def qdq_cnn(d):
    """Conv/Relu/MaxPool/Conv/Relu/GAP/MatMul/Softmax through quantize_static (QDQ, per
    channel), saved as cnn_qdq.onnx in `d`.  On the host it was found on, ONNX Runtime's fused
    int8 kernels and its unfused graph gave Softmax outputs one step (1/255) apart."""
    import warnings

    from onnx import numpy_helper as nh
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)

    rng = np.random.default_rng(0)
    w = {n: nh.from_array((rng.standard_normal(s) * k).astype(np.float32), n)
         for n, s, k in (("W1", (8, 3, 3, 3), 0.3), ("B1", (8,), 0.1), ("W2", (16, 8, 3, 3), 0.2),
                         ("B2", (16,), 0.1), ("Wf", (16, 10), 0.3))}
    mk = helper.make_node
    g = helper.make_graph([
        mk("Conv", ["img", "W1", "B1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        mk("Relu", ["c1"], ["r1"], name="relu1"),
        mk("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2], name="pool1"),
        mk("Conv", ["p1", "W2", "B2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        mk("Relu", ["c2"], ["r2"], name="relu2"),
        mk("GlobalAveragePool", ["r2"], ["gap"], name="gap"),
        mk("Flatten", ["gap"], ["fl"], name="flat"),
        mk("MatMul", ["fl", "Wf"], ["logits"], name="fc"),
        mk("Softmax", ["logits"], ["prob"], axis=-1, name="sm")], "smallcnn",
        [helper.make_tensor_value_info("img", TensorProto.FLOAT, ["N", 3, 32, 32])],
        [helper.make_tensor_value_info("prob", TensorProto.FLOAT, ["N", 10])], list(w.values()))
    src, dst = d / "cnn.onnx", d / "cnn_qdq.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              src)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{"img": np.random.default_rng(i).standard_normal((1, 3, 32, 32))
                                  .astype(np.float32)} for i in range(4)])

        def get_next(self):
            return next(self.batches, None)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ,
                        per_channel=True, activation_type=QuantType.QUInt8,
                        weight_type=QuantType.QInt8)
    return dst


def ort_outputs(model, feeds):
    """ONNX Runtime's outputs for the model file `model`, by output name."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def qdq_pool_chain(path, doubled: bool = False):
    """QuantizeLinear/DequantizeLinear -> Conv -> Q/DQ -> MaxPool -> Q/DQ -> Conv -> Q/DQ, 16
    channels of 16x16, int8 weights within +-64 (no int16 pair saturates on any x86 kernel, so
    the integer sums are exact everywhere).  For the pinned versions on the host it was found on,
    OpenVINO requantizes one value of the first Conv one step (0.05) from ONNX Runtime's; it
    passes through the MaxPool, moves the second Conv's float output by 0.0096 (a tenth of its
    quantizer's step) and ends 1.0000038 steps (of 0.1) off at the output (issue 52).
    `doubled`: z + z requantized at 0.1 (two steps off there, every kernel right), then at 0.4
    (half a step), the output `w`."""
    mk = helper.make_node
    rng = np.random.default_rng(3)
    w1 = rng.integers(-64, 65, (16, 16, 3, 3)).astype(np.int8)
    w2 = np.random.default_rng(103).integers(-64, 65, (16, 16, 3, 3)).astype(np.int8)
    inits = [numpy_helper.from_array(v, n) for n, v in (
        ("xs", np.array(0.02, np.float32)), ("zp", np.array(128, np.uint8)),
        ("w1", w1), ("w2", w2), ("ws", np.array(0.003, np.float32)), ("wz", np.array(0, np.int8)),
        ("s1", np.array(0.05, np.float32)), ("s2", np.array(0.1, np.float32)))]
    nodes = [mk("QuantizeLinear", ["x", "xs", "zp"], ["xq"], name="xq"),
             mk("DequantizeLinear", ["xq", "xs", "zp"], ["xd"], name="xdq"),
             mk("DequantizeLinear", ["w1", "ws", "wz"], ["wd1"], name="wdq1"),
             mk("Conv", ["xd", "wd1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             mk("QuantizeLinear", ["c1", "s1", "zp"], ["c1q"], name="c1q"),
             mk("DequantizeLinear", ["c1q", "s1", "zp"], ["c1d"], name="c1dq"),
             mk("MaxPool", ["c1d"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
             mk("QuantizeLinear", ["p", "s1", "zp"], ["pq"], name="pq"),
             mk("DequantizeLinear", ["pq", "s1", "zp"], ["pd"], name="pdq"),
             mk("DequantizeLinear", ["w2", "ws", "wz"], ["wd2"], name="wdq2"),
             mk("Conv", ["pd", "wd2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
             mk("QuantizeLinear", ["c2", "s2", "zp"], ["c2q"], name="c2q"),
             mk("DequantizeLinear", ["c2q", "s2", "zp"], ["z"], name="c2dq")]
    if doubled:
        inits.append(numpy_helper.from_array(np.array(0.4, np.float32), "s3"))
        nodes += [mk("Add", ["z", "z"], ["a"], name="add"),
                  mk("QuantizeLinear", ["a", "s2", "zp"], ["aq"], name="aq"),
                  mk("DequantizeLinear", ["aq", "s2", "zp"], ["ad"], name="adq"),
                  mk("QuantizeLinear", ["ad", "s3", "zp"], ["wq"], name="wq"),
                  mk("DequantizeLinear", ["wq", "s3", "zp"], ["w"], name="wdq")]
    g = helper.make_graph(nodes, "qdq_pool_chain",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 16, 16])],
                          [helper.make_tensor_value_info("w" if doubled else "z",
                                                         TensorProto.FLOAT, [1, 16, 8, 8])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, path)
    return path
