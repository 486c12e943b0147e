"""The onnxruntime backend on real models, against a plain ORT session on the original model.

Tolerance: everything is float32 on the same library, and the whole-model subgraph is the very
same ONNX graph as the reference, so results agree to rounding; a split changes which fusions
ORT can do at the boundary (e.g. a Conv+Relu pair cut in two), which moves results by a few
ulps.  rtol = atol = 1e-4 leaves ample room for that and still catches any wrong wiring.
"""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest

from provmap.provenance.importer import import_onnx
from provmap.runtime_module.backend import BackendError, Blob, Runner
from provmap.runtime_module.backends.onnxruntime import OnnxRuntimeBackend
from provmap.runtime_module.registry import get_backend
from provmap.runtime_module.graph_view import GraphView
from backend_cases import bundled_model, load_case, run_parts
from unsupported_models import ERF_DOUBLE_NODE, erf_double_model, maxunpool_model
from provmap.runtime_module.subgraph import Subgraph

RTOL = ATOL = 1e-4


@pytest.fixture(scope="module", params=["squeezenet", "transformer"])
def case(request):
    return load_case(request.param)


@pytest.fixture(scope="module")
def backend():
    return OnnxRuntimeBackend()


def _assert_covered(sub, blob):
    positions = {p for k in blob.kernels for p in k.nodes}
    pos = {node: i for i, node in enumerate(sub.closure)}
    missing = [sub.view.describe(i) for i in sub.ops if pos[i] not in positions]
    assert not missing, f"op nodes in no kernel: {missing}"
    assert all(0 <= p < len(sub.closure) for p in positions)
    assert all(k.kind == "ort-node" and k.op for k in blob.kernels)
    assert len({k.name for k in blob.kernels}) == len(blob.kernels)


def test_registry_and_version():
    b = get_backend("onnxruntime")
    assert isinstance(b, OnnxRuntimeBackend)
    assert b.version() == ort.__version__
    assert OnnxRuntimeBackend(threads=1).options() == {"threads": 1}
    b1 = OnnxRuntimeBackend(threads=1, allow_spinning=False)
    assert b1._session_options().intra_op_num_threads == 1
    with pytest.raises((ValueError, BackendError), match="unknown option"):
        OnnxRuntimeBackend(precision="f16")


def test_whole_model_matches_ort(case, backend):
    name, view, feeds, ref = case
    values, [(sub, blob, _)] = run_parts(backend, view, [view.op_nodes], feeds)
    for out, expected in ref.items():
        np.testing.assert_allclose(values[out], expected, rtol=RTOL, atol=ATOL, err_msg=out)
    _assert_covered(sub, blob)
    assert blob.backend == "onnxruntime"
    assert set(blob.files) == {"model.onnx"}
    assert blob.meta["backend_version"] == ort.__version__
    assert blob.meta["input_names"] == [t.name for t in sub.inputs]
    assert blob.meta["output_names"] == [t.name for t in sub.outputs]
    json.dumps(blob.meta)  # stored as JSON in artifacts
    assert blob.source.startswith("# onnxruntime")
    assert len(blob.source.strip().splitlines()) == len(blob.kernels) + 4


def test_split_in_two_matches_ort(case, backend):
    name, view, feeds, ref = case
    ops = view.op_nodes
    k = len(ops) // 2
    values, blobs = run_parts(backend, view, [ops[:k], ops[k:]], feeds)
    for out, expected in ref.items():
        np.testing.assert_allclose(values[out], expected, rtol=RTOL, atol=ATOL, err_msg=out)
    for sub, blob, _ in blobs:
        _assert_covered(sub, blob)
    # the boundary really is a cut: the second part reads what the first produced
    first, second = blobs[0][0], blobs[1][0]
    assert {t.name for t in first.outputs} & {t.name for t in second.inputs}


def test_fresh_load_from_bytes(case, backend):
    name, view, feeds, ref = case
    sub = Subgraph(view, view.op_nodes)
    blob = backend.build(sub)
    stored = Blob(backend=blob.backend, files={k: bytes(v) for k, v in blob.files.items()},
                  meta=json.loads(json.dumps(blob.meta)))
    runner = OnnxRuntimeBackend(threads=1, allow_spinning=False).load(stored)
    assert isinstance(runner, Runner)
    outs = runner([feeds[n] for n in runner.input_names])
    for n, arr in zip(runner.output_names, outs):
        np.testing.assert_allclose(arr, ref[n], rtol=RTOL, atol=ATOL)
    runner.close()


def test_outputs_survive_later_calls(case, backend):
    name, view, feeds, ref = case
    runner = backend.load(backend.build(Subgraph(view, view.op_nodes)))
    first = runner([feeds[n] for n in runner.input_names])
    kept = [a.copy() for a in first]
    runner([feeds[n] * 0.5 for n in runner.input_names])
    for a, b in zip(first, kept):
        np.testing.assert_array_equal(a, b)


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


def test_supports_everything_in_squeezenet_and_transformer(case, backend):
    name, view, feeds, ref = case
    verdicts = backend.supports(view)
    assert set(verdicts) == set(view.op_nodes)
    bad = {i: v.reason for i, v in verdicts.items() if not v.ok}
    assert not bad


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
    _assert_covered(sub, blob)
