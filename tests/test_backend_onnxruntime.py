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
