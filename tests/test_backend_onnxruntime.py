"""What only the onnxruntime backend does: its options, its fusions, what it refuses and how it
runs ops it has no kernel for.  The checks every backend passes on real models (whole, split,
reloaded, reused) are in test_backends.py."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from provmap.provenance.importer import import_onnx
from provmap.runtime_module.backend import BackendError
from provmap.runtime_module.backends.onnxruntime import OnnxRuntimeBackend
from provmap.runtime_module.registry import get_backend
from provmap.runtime_module.graph_view import GraphView
from backend_cases import assert_covered, bundled_model
from small_models import tied_weight_model
from unsupported_models import ERF_DOUBLE_NODE, erf_double_model, maxunpool_model
from provmap.runtime_module.subgraph import Subgraph


@pytest.fixture(scope="module")
def backend():
    return OnnxRuntimeBackend()


def test_registry_and_version():
    b = get_backend("onnxruntime")
    assert isinstance(b, OnnxRuntimeBackend)
    assert b.version() == ort.__version__
    assert OnnxRuntimeBackend(threads=1).options() == {"threads": 1}
    b1 = OnnxRuntimeBackend(threads=1, allow_spinning=False)
    assert b1._session_options().intra_op_num_threads == 1
    with pytest.raises((ValueError, BackendError), match="unknown option"):
        OnnxRuntimeBackend(precision="f16")


def test_kernels_follow_fusion():
    """Conv+Relu is one ORT kernel (FusedConv, or an NCHWc Conv with activation)."""
    model = bundled_model("squeezenet")
    view = GraphView(import_onnx(model))
    sub = Subgraph(view, view.op_nodes)
    blob = OnnxRuntimeBackend().build(sub)
    nodes = [view.nodes[i] for i in sub.closure]
    conv = next(p for p, n in enumerate(nodes) if n.op_type == "Conv")
    relu = next(p for p, n in enumerate(nodes)
                if n.op_type == "Relu" and n.input[0] == nodes[conv].output[0])
    owners = [k for k in blob.kernels if conv in k.nodes]
    assert owners and all(relu in k.nodes for k in owners)
    # no kernel claims the whole network (the NCHWc renaming must not smear coverage)
    assert max(len(k.nodes) for k in blob.kernels) <= 4


def test_supports_rejects_erf_on_double(backend):
    view = GraphView(import_onnx(erf_double_model()))
    verdicts = backend.supports(view)
    bad = {view.nodes[i].name: v.reason for i, v in verdicts.items() if not v.ok}
    assert list(bad) == [ERF_DOUBLE_NODE]
    assert "no CPU kernel for Erf" in bad[ERF_DOUBLE_NODE] and "double" in bad[ERF_DOUBLE_NODE]
    # and building it fails with ORT's own reason
    with pytest.raises(BackendError, match="Erf"):
        backend.build(Subgraph(view, view.op_nodes))
    # without the Erf the rest builds and runs
    ok = [i for i in view.op_nodes if view.nodes[i].name != ERF_DOUBLE_NODE]
    head = Subgraph(view, ok[:2])
    backend.load(backend.build(head))


def test_supports_maxunpool(backend):
    view = GraphView(import_onnx(maxunpool_model()))
    assert all(v.ok for v in backend.supports(view).values())


def test_supports_function_ops_via_their_body(backend):
    """HardSwish has no ORT CPU kernel at opset 17, but ORT inlines its ONNX function body."""
    from onnx import TensorProto, helper

    t = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 8]) for n in ("x", "y")]
    g = helper.make_graph([helper.make_node("HardSwish", ["x"], ["y"], name="hs")], "g",
                          t[:1], t[1:])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    view = GraphView(import_onnx(model))
    (verdict,) = backend.supports(view).values()
    assert verdict.ok and "function" in verdict.reason
    x = np.linspace(-4, 4, 16, dtype=np.float32).reshape(2, 8)
    sub = Subgraph(view, view.op_nodes)
    blob = backend.build(sub)
    (y,) = backend.load(blob)([x])
    np.testing.assert_allclose(y, x * np.clip(x / 6 + 0.5, 0, 1), rtol=1e-6, atol=1e-6)
    assert_covered(sub, blob, "ort-node")


def test_disable_quant_qdq_is_suggested_where_a_constant_is_dequantized_and_folds_it():
    """A model that dequantizes a constant (through a Transpose) gets ORT's
    disable_quant_qdq=1 suggested as a whole-model variant, for Collage's end-to-end check and
    bench's baseline alike; a float model does not.  With it the DequantizeLinear is folded at
    load (a plain MatMul on constant weights runs; without it ORT 1.32 keeps the Dequantize or
    fuses it into MatMulNBits, by shape, which may quantize the activations too: 0.2% off
    here) and the outputs are the float computation's."""
    from onnx import numpy_helper as nh

    from provmap.bench.baseline import config_strategies
    from provmap.partition.variants import default_specs, e2e_variants

    model = tied_weight_model()
    view = GraphView(import_onnx(model))
    plain = GraphView(import_onnx(tied_weight_model(quantized=False)))
    assert OnnxRuntimeBackend.model_variants(view) == ["disable_quant_qdq=1"]
    assert OnnxRuntimeBackend.model_variants(plain) == []
    searched = {"onnxruntime": get_backend("onnxruntime"), "openvino": get_backend("openvino")}
    specs = default_specs(searched, view)
    assert specs == ("threads=1", "disable_quant_qdq=1")
    assert "onnxruntime[disable_quant_qdq=1]" in e2e_variants(searched, specs)
    assert "openvino[disable_quant_qdq=1]" not in e2e_variants(searched, specs)
    assert default_specs(searched, plain) == ("threads=1",)
    assert "single:onnxruntime[disable_quant_qdq=1]" in config_strategies(
        ["onnxruntime", "openvino"], view=view)
    assert not any("disable_quant_qdq" in s for s in config_strategies(
        ["onnxruntime"], view=plain))

    sub = Subgraph(view, view.op_nodes)
    x = np.random.default_rng(1).standard_normal((1, 8, 4)).astype(np.float32)
    be = get_backend("onnxruntime[disable_quant_qdq=1]")
    blob = be.build(sub)
    assert {k.op for k in blob.kernels} == {"MatMul"}, blob.kernels
    w = nh.to_array(next(t for t in model.graph.initializer if t.name == "wte"))
    np.testing.assert_allclose(be.load(blob)([x])[0], x @ (w.T.astype(np.float32) * 0.05),
                               rtol=1e-5, atol=1e-5)
