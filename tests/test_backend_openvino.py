"""What only the OpenVINO backend does: its options and precisions, its fusions, what it refuses
(MaxUnpool, float64) and how greedy uses it.  The checks every backend passes on real models
(whole, split, reloaded, reused; f32 throughout) are in test_backends.py."""

from __future__ import annotations

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
