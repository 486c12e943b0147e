"""Tiny ONNX models with one real op that a backend cannot take, for support and split tests.

Both import into TVM Relax (the op is in TVM's ONNX converter map), pass ``onnx.checker`` and
run on whichever backend does support them, so a partitioner can be tested on "this node must
go elsewhere".  Each docstring says which backend refuses the op and why (found by experiment
with onnxruntime 1.32.0 and OpenVINO 2026.4.1).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _model(nodes, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    onnx.checker.check_model(m, full_check=True)
    return m


def _t(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


#: ONNX node name of the op OpenVINO refuses in :func:`maxunpool_model`.
MAXUNPOOL_NODE = "unpool"
#: ONNX node name of the op onnxruntime refuses in :func:`erf_double_model`.
ERF_DOUBLE_NODE = "erf64"


def maxunpool_model() -> onnx.ModelProto:
    """``x -> Relu -> MaxPool(2x2) -> MaxUnpool -> Add(x) -> Relu -> y``, x/y float32 [1,2,4,4].

    **OpenVINO lacks MaxUnpool**: its ONNX frontend has no conversion rule for it
    (``read_model`` fails with "No conversion rule found for operations: MaxUnpool-17"), so the
    whole model does not convert and the backend must judge nodes one by one.  onnxruntime has a
    CPU kernel (float/int64) and TVM imports it.

    The unpool indices are a constant initializer (valid flat indices, one per pooling window),
    so the op node's only run-time input is the MaxPool output; every other node is supported by
    both backends.
    """
    idx = np.zeros((1, 2, 2, 2), np.int64)
    for c in range(2):
        for i in range(2):
            for j in range(2):
                # the top-left element of each 2x2 window, in the flattened [1,2,4,4] output
                idx[0, c, i, j] = c * 16 + (2 * i) * 4 + 2 * j
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu_in"),
        helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2],
                         strides=[2, 2]),
        helper.make_node("MaxUnpool", ["p", "idx"], ["u"], name=MAXUNPOOL_NODE,
                         kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Add", ["u", "x"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["y"], name="relu_out"),
    ]
    return _model(nodes, [_t("x", [1, 2, 4, 4])], [_t("y", [1, 2, 4, 4])],
                  [numpy_helper.from_array(idx, "idx")])


def erf_double_model() -> onnx.ModelProto:
    """``x -> Mul(2) -> Cast(double) -> Erf -> Cast(float) -> Add(x) -> y``, x/y float32 [2,8].

    **onnxruntime lacks Erf on float64**: its CPU kernel registry has Erf (opset 13+) for
    ``tensor(float)`` only, so session creation fails with "Could not find an implementation
    for Erf(13)" (ORT casts float16 nodes to float, but never doubles).

    OpenVINO's CPU plugin *runs* it, but has no float64 kernels and silently computes the
    double nodes (both Casts' double side and the Erf) in float32 (erf(1) comes back as
    0.84270066, the float32 value); the openvino backend therefore reports every node touching
    a float64 tensor (``to_double``, ``erf64``, ``to_float``) as unsupported, so only TVM takes
    them.  ``scale`` and ``add`` are supported everywhere.
    """
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    nodes = [
        helper.make_node("Mul", ["x", "two"], ["m"], name="scale"),
        helper.make_node("Cast", ["m"], ["m64"], name="to_double", to=TensorProto.DOUBLE),
        helper.make_node("Erf", ["m64"], ["e64"], name=ERF_DOUBLE_NODE),
        helper.make_node("Cast", ["e64"], ["e"], name="to_float", to=TensorProto.FLOAT),
        helper.make_node("Add", ["e", "x"], ["y"], name="add"),
    ]
    return _model(nodes, [_t("x", [2, 8])], [_t("y", [2, 8])], [two])
