"""A large model reaches OpenVINO as a file with external weights (runtime_module/onnx_external.py):
the file holds the very same model, the caller's proto keeps its weights, and the backend's
support query and build on such a model give the same numbers as ONNX Runtime.  Weights still
in the user's file go by address (nothing written), their pages shed while OpenVINO copies
them; a model naming an address itself is refused."""

from __future__ import annotations

import os

import mmap
import time

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from cli_models import external_data_model
from provmap.provenance import weights
from provmap.runtime_module.backends import ov_core

from provmap.runtime_module.backends import openvino as ov_backend
from provmap.runtime_module.backends.openvino import OpenVINOBackend
from provmap.provenance.importer import import_onnx
from provmap.runtime_module.graph_view import GraphView
from provmap.runtime_module.onnx_external import (MEM_ADDR, external_data_file, point_at,
                                                   weight_bytes)
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


N_BIG = 2048  # a [2048, 2048] float32 weight: 16 MB, the OpenVINO backend's external threshold


@pytest.fixture(scope="module")
def user_file(tmp_path_factory):
    return external_data_model(tmp_path_factory.mktemp("user") / "mm.onnx", n=N_BIG)


@pytest.mark.parametrize("by_address", [True, False])
def test_weights_in_the_users_file_build_the_same_by_address_or_written(user_file, monkeypatch,
                                                                         by_address):
    """By address nothing is written; either way OpenVINO's build computes ONNX Runtime's
    numbers (the probe's answer decides the way: a release without it writes the file)."""
    m = weights.load(str(user_file))
    assert weights.has_lazy(m)
    with external_data_file(m, by_address=by_address) as path:
        written = os.path.getsize(os.path.join(os.path.dirname(path), "model.data"))
    assert (written == 0) == by_address
    monkeypatch.setattr(ov_core, "_BY_ADDRESS", by_address)
    view = GraphView(import_onnx(str(user_file)))
    be = OpenVINOBackend()
    assert all(v.ok for v in be.supports(view).values())
    r = be.load(be.build(Subgraph(view, view.op_nodes)))
    x = np.random.default_rng(2).standard_normal((1, N_BIG)).astype(np.float32)
    try:
        (got,) = r([x])
    finally:
        r.close()
    sess = ort.InferenceSession(str(user_file), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(got, sess.run(None, {"x": x})[0], rtol=1e-4, atol=1e-3)


def test_this_openvino_reads_by_address():
    """The installed OpenVINO (pinned) honours the convention: the probe says so."""
    assert ov_core._probe_addresses()


def test_a_model_naming_a_memory_address_is_refused():
    """OpenVINO's frontend would read any address a model names (CWE-822); only provmap may."""
    m = _big_model()
    point_at(m.graph.initializer[0], MEM_ADDR, 4096, 1024 * 5120 * 4)
    with pytest.raises(ValueError, match="initializer 'w'.*names memory"):
        with external_data_file(m):
            pass


def _resident(mm: mmap.mmap) -> int:
    """kB of `mm` resident in this process (its mapping's Rss in /proc/self/smaps)."""
    start = np.frombuffer(mm, np.uint8).ctypes.data
    with open("/proc/self/smaps") as f:
        lines = f.read().splitlines()
    for k, line in enumerate(lines):
        lo = line.split(" ", 1)[0]
        if "-" in lo and all(c in "0123456789abcdef-" for c in lo) \
                and int(lo.split("-")[0], 16) <= start < int(lo.split("-")[1], 16):
            for rest in lines[k + 1:]:
                if rest.startswith("Rss:"):
                    return int(rest.split()[1])
    raise AssertionError("mapping not found")


def test_shedding_drops_the_pages_a_reader_touched_and_keeps_the_values(user_file):
    with open(str(user_file) + ".data", "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    view = np.frombuffer(mm, np.float32)
    want = float(view.sum(dtype=np.float64))  # every page read: all resident
    assert _resident(mm) > 15_000
    with weights.shedding(mm, every=0.01):
        got = float(view.sum(dtype=np.float64))  # read again while being shed
        time.sleep(0.1)
        assert _resident(mm) < 2_000
    assert got == want
    assert _resident(mm) < 2_000
