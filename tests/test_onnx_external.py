"""A large model reaches OpenVINO as a file with external weights (runtime_module/onnx_external.py):
the file holds the very same model, the caller's proto keeps its weights, and the backend's
support query and build on such a model give the same numbers as ONNX Runtime."""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from provmap.runtime_module.backends import openvino as ov_backend
from provmap.runtime_module.backends.openvino import OpenVINOBackend
from provmap.provenance.importer import import_onnx
from provmap.runtime_module.graph_view import GraphView
from provmap.runtime_module.onnx_external import external_data_file, weight_bytes
from provmap.runtime_module.subgraph import Subgraph


def _big_model() -> onnx.ModelProto:
    """MatMul by a 1024x5120 f32 weight (20 MB: past the backend's external-data threshold),
    a 20 KB bias (also external: past onnx's 1 KB threshold) and a float_data scalar (stays
    inside the proto)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((1024, 5120)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal((5120,)).astype(np.float32), "b")
    s = helper.make_tensor("s", TensorProto.FLOAT, [1], [0.5])  # float_data, not raw_data
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["mm"], name="mm"),
         helper.make_node("Add", ["mm", "b"], ["add"], name="add"),
         helper.make_node("Mul", ["add", "s"], ["y"], name="mul")],
        "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 1024])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5120])], [w, b, s])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_external_file_is_the_same_model_and_the_callers_proto_is_untouched(tmp_path):
    m = _big_model()
    before = m.SerializeToString()
    assert weight_bytes(m) == 1024 * 5120 * 4 + 5120 * 4 + 4
    with external_data_file(m) as path:
        back = onnx.load(path)  # loads the external data too
        raw = onnx.load(path, load_external_data=False)
        locations = {t.name: t.data_location for t in raw.graph.initializer}
    assert locations == {"w": TensorProto.EXTERNAL, "b": TensorProto.EXTERNAL,
                         "s": TensorProto.DEFAULT}
    assert m.SerializeToString() == before
    assert [n.name for n in back.graph.node] == ["mm", "add", "mul"]
    for t in m.graph.initializer:
        (u,) = [x for x in back.graph.initializer if x.name == t.name]
        np.testing.assert_array_equal(numpy_helper.to_array(u), numpy_helper.to_array(t))
    assert not os.path.exists(path)  # removed after the block


def test_openvino_support_and_build_of_a_model_past_the_threshold():
    m = _big_model()
    assert weight_bytes(m) >= ov_backend._EXTERNAL_MIN_BYTES
    view = GraphView(import_onnx(m))
    be = OpenVINOBackend()
    verdicts = be.supports(view)
    assert all(verdicts[i].ok for i in view.op_nodes)
    r = be.load(be.build(Subgraph(view, view.op_nodes)))
    x = np.random.default_rng(1).standard_normal((2, 1024)).astype(np.float32)
    try:
        (got,) = r([x])
    finally:
        r.close()
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(got, sess.run(None, {"x": x})[0], rtol=1e-3, atol=1e-3)
