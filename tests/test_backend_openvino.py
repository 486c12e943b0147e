"""What only the OpenVINO backend does: its options and precisions, its fusions, what it refuses
(MaxUnpool, float64) and how greedy uses it.  The checks every backend passes on real models
(whole, split, reloaded, reused; f32 throughout) are in test_backends.py."""

from __future__ import annotations

import os

import openvino as ov
import pytest

from provmap.provenance.bundled import zoo
from provmap.provenance.importer import import_onnx
from provmap.runtime_module.backend import BackendError
from provmap.runtime_module.backends.openvino import OpenVINOBackend
from provmap.runtime_module.registry import get_backend
from provmap.runtime_module.graph_view import GraphView
from backend_cases import bundled_model, cpu_has
from unsupported_models import MAXUNPOOL_NODE, erf_double_model, maxunpool_model
from provmap.runtime_module.subgraph import Subgraph


@pytest.fixture(scope="module")
def backend():
    return OpenVINOBackend()


def test_registry_and_options():
    b = get_backend("openvino")
    assert isinstance(b, OpenVINOBackend)
    assert b.version() == ov.get_version()
    assert b.config()["INFERENCE_PRECISION_HINT"] == "f32"
    with pytest.raises(BackendError, match="precision"):
        OpenVINOBackend(precision="fp32")
    with pytest.raises((ValueError, BackendError), match="unknown option"):
        OpenVINOBackend(device="GPU")


def test_kernels_follow_fusion():
    """The FullyConnected layer OpenVINO makes of MatMul+Add carries both ONNX nodes (it is
    named after the Add only; the MatMul reaches it through the consumer fallback)."""
    view = GraphView(import_onnx(bundled_model("transformer")))
    sub = Subgraph(view, view.op_nodes)
    blob = OpenVINOBackend().build(sub)
    names = [view.nodes[i].name for i in sub.closure]
    mm = names.index("attn/q_proj/MatMul")
    add = names.index("attn/q_proj/Add")
    owners = [k for k in blob.kernels if mm in k.nodes]
    assert owners and all(add in k.nodes for k in owners)
    assert max(len(k.nodes) for k in blob.kernels) < len(sub.closure) // 2


def test_explicit_bf16_is_recorded_or_refused_where_the_cpu_lacks_it():
    """On a CPU without bf16 the plugin would run f32 under a bf16 label (issue 36): refused up
    front, naming the option and the CPU's capabilities; elsewhere built and recorded."""
    view = GraphView(import_onnx(bundled_model("transformer")))
    if not cpu_has("BF16"):
        with pytest.raises(BackendError, match=r"precision=bf16: this CPU cannot run bf16 "
                                               r"\(OpenVINO CPU capabilities: FP32"):
            OpenVINOBackend(precision="bf16")
        return
    blob = OpenVINOBackend(precision="bf16").build(Subgraph(view, view.op_nodes[:4]))
    assert blob.meta["precision"] == "bf16"
    assert blob.meta["config"]["INFERENCE_PRECISION_HINT"] == "bf16"
    assert blob.meta["inference_precision"] == "bf16"
    # loading with a default (f32) backend still compiles it as it was built
    runner = OpenVINOBackend().load(blob)
    assert runner.compiled.get_property("INFERENCE_PRECISION_HINT") == ov.Type.bf16


def test_supports_rejects_maxunpool(backend):
    view = GraphView(import_onnx(maxunpool_model()))
    verdicts = backend.supports(view)
    bad = {view.nodes[i].name: v.reason for i, v in verdicts.items() if not v.ok}
    assert list(bad) == [MAXUNPOOL_NODE]
    assert "MaxUnpool" in bad[MAXUNPOOL_NODE]
    with pytest.raises(BackendError, match="MaxUnpool"):
        backend.build(Subgraph(view, view.op_nodes))
    # the supported part before it builds and runs
    head = [i for i in view.op_nodes if view.nodes[i].name in ("relu_in", "pool")]
    runner = backend.load(backend.build(Subgraph(view, head)))
    x = zoo.random_inputs(view.model, seed=0)["x"]
    (pooled,) = runner([x])
    assert pooled.shape == (1, 2, 2, 2)


def test_supports_refuses_float64(backend):
    """The CPU plugin would run float64 nodes in float32; the backend says so instead."""
    view = GraphView(import_onnx(erf_double_model()))
    verdicts = backend.supports(view)
    bad = {view.nodes[i].name: v.reason for i, v in verdicts.items() if not v.ok}
    assert sorted(bad) == ["erf64", "to_double", "to_float"]
    assert all("float64" in r for r in bad.values())


def test_openvino_first_greedy_takes_squeezenet_whole():
    """OpenVINO runs every SqueezeNet node, Concat included; a support query that asked about
    Concat alone once declined it and split the model into 17 partitions (issue 15)."""
    from provmap.partition.compile import compile_model

    art = compile_model("bundled:squeezenet", "greedy:openvino,onnxruntime")
    assert [p["backend"] for p in art.manifest["partitions"]] == ["openvino"]


def _chain() -> "onnx.ModelProto":
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    three = numpy_helper.from_array(np.full((1, 4), 3.0, np.float32), "three")
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Mul", ["r", "three"], ["m"], name="mul"),
             helper.make_node("Sigmoid", ["m"], ["s"], name="sig"),
             helper.make_node("Add", ["s", "three"], ["y"], name="add")]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [three])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_a_query_model_that_throws_is_charged_to_its_node_not_to_the_whole_model(monkeypatch):
    """The fourteenth afternoon's QDQ CNN: a CPU transformation threw inside query_model on the
    final Mul, every node was marked unsupported (blamed on node #0), and greedy and collage ran
    it all on ONNX Runtime.  Here query_model throws whenever the Mul is in the model asked."""
    import numpy as np
    import onnxruntime as ort

    from provmap.partition.compile import compile_model
    from provmap.partition.model_source import load_view
    from provmap.runtime_module.backends import openvino as ov_mod
    from provmap.runtime_module.module import ArtifactModule

    real = ov_mod._get_core()

    class Throws:
        def __getattr__(self, name):
            return getattr(real, name)

        def query_model(self, model, *a, **kw):
            if any(op.get_type_name() == "Multiply" for op in model.get_ordered_ops()):
                raise RuntimeError("[MultiplyPartialTransformation] END: node: Multiply mul")
            return real.query_model(model, *a, **kw)

    monkeypatch.setattr(ov_mod, "_get_core", lambda: Throws())
    view = load_view(_chain(), "chain")
    verdicts = OpenVINOBackend().supports(view)
    by_name = {view.nodes[i].name: v for i, v in verdicts.items()}
    assert [k for k, v in by_name.items() if not v.ok] == ["mul"], by_name
    assert "region ending at" in by_name["mul"].reason and "'mul'" in by_name["mul"].reason
    assert "MultiplyPartialTransformation" in by_name["mul"].reason
    art = compile_model(_chain(), "greedy:openvino,onnxruntime")
    assert [p["backend"] for p in art.manifest["partitions"]] == [
        "openvino", "onnxruntime", "openvino"]
    x = np.random.default_rng(0).standard_normal((1, 4)).astype(np.float32)
    want = ort.InferenceSession(_chain().SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    mod = ArtifactModule(art, trust=True)
    try:
        np.testing.assert_allclose(mod.run({"x": x})["y"], want, rtol=1e-6, atol=1e-6)
    finally:
        mod.close()


def test_a_measurement_scope_reloads_from_its_own_compile_cache_and_removes_it(monkeypatch):
    """Inside compile_cache.scratch a load compiles through OpenVINO's model cache in a
    directory of provmap's own (a decision reloads each plan for every block); the outputs are
    the same as without it, nothing is cached outside a scope, and the directory goes with it."""
    import numpy as np

    from provmap.runtime_module import compile_cache

    view = GraphView(import_onnx(bundled_model("squeezenet")))
    b = OpenVINOBackend(threads=1)
    blob = b.build(Subgraph(view, view.op_nodes))
    feeds = list(zoo.random_inputs(view.model, seed=1).values())
    seen = []
    real = ov.Core.compile_model
    monkeypatch.setattr(ov.Core, "compile_model",
                        lambda self, m, d, cfg=None: seen.append(dict(cfg or {})) or
                        real(self, m, d, cfg or {}))
    plain = b.load(blob)(feeds)
    assert "CACHE_DIR" not in seen[-1] and compile_cache.current() is None
    with compile_cache.scratch() as d:
        outs = [b.load(blob)(feeds) for _ in range(2)]
        assert seen[-1]["CACHE_DIR"] == d and os.listdir(d)  # the first load wrote it
    assert not os.path.exists(d) and compile_cache.current() is None
    for out in outs:
        for got, want in zip(out, plain, strict=True):
            np.testing.assert_array_equal(got, want)
