"""The OpenVINO backend on real models, against a plain ORT session on the original model.

Tolerance: the backend runs in f32 (asserted below), but OpenVINO's CPU plugin picks its own
algorithms: brgemm/Winograd convolutions and FullyConnected layers accumulate in a different
order, LayerNormalization becomes MVN plus a fused multiply-add, and Erf/Softmax use their own
vectorised approximations.  Against ORT that gives relative differences of ~1e-6..1e-5 on these
models; rtol = atol = 1e-3 leaves headroom for other CPUs and still catches any wrong wiring or
a silent bf16 run (bf16 keeps only ~3 significant digits, errors ~1e-2).
"""

from __future__ import annotations

import json

import numpy as np
import openvino as ov
import pytest

from provmap.provenance.bundled import zoo
from provmap.provenance.importer import import_onnx
from provmap.runtime_module.backend import BackendError, Blob, Runner
from provmap.runtime_module.backends.openvino import OpenVINOBackend
from provmap.runtime_module.registry import get_backend
from provmap.runtime_module.graph_view import GraphView
from backend_cases import bundled_model, load_case, run_parts
from unsupported_models import MAXUNPOOL_NODE, erf_double_model, maxunpool_model
from provmap.runtime_module.subgraph import Subgraph

RTOL = ATOL = 1e-3


@pytest.fixture(scope="module", params=["squeezenet", "transformer"])
def case(request):
    return load_case(request.param)


@pytest.fixture(scope="module")
def backend():
    return OpenVINOBackend()


def _assert_covered(sub, blob):
    positions = {p for k in blob.kernels for p in k.nodes}
    pos = {node: i for i, node in enumerate(sub.closure)}
    missing = [sub.view.describe(i) for i in sub.ops if pos[i] not in positions]
    assert not missing, f"op nodes in no kernel: {missing}"
    assert all(0 <= p < len(sub.closure) for p in positions)
    assert all(k.kind == "ov-layer" and k.op for k in blob.kernels)
    assert not {k.op for k in blob.kernels} & {"Input", "Output", "Const"}
    assert len({k.name for k in blob.kernels}) == len(blob.kernels)


def _assert_f32(blob, runner):
    assert blob.meta["precision"] == "f32"
    assert blob.meta["inference_precision"] == "f32"
    assert blob.meta["config"]["INFERENCE_PRECISION_HINT"] == "f32"
    assert runner.compiled.get_property("INFERENCE_PRECISION_HINT") == ov.Type.f32
    # and no executed layer runs in bf16/f16
    for op in runner.compiled.get_runtime_model().get_ordered_ops():
        assert op.get_rt_info()["runtimePrecision"].astype(str) not in ("bf16", "f16")


def test_registry_and_options():
    b = get_backend("openvino")
    assert isinstance(b, OpenVINOBackend)
    assert b.version() == ov.get_version()
    assert b.config()["INFERENCE_PRECISION_HINT"] == "f32"
    with pytest.raises(BackendError, match="precision"):
        OpenVINOBackend(precision="fp32")
    with pytest.raises((ValueError, BackendError), match="unknown option"):
        OpenVINOBackend(device="GPU")


def test_whole_model_matches_ort(case, backend):
    name, view, feeds, ref = case
    values, [(sub, blob, runner)] = run_parts(backend, view, [view.op_nodes], feeds)
    for out, expected in ref.items():
        np.testing.assert_allclose(values[out], expected, rtol=RTOL, atol=ATOL, err_msg=out)
    _assert_covered(sub, blob)
    _assert_f32(blob, runner)
    assert set(blob.files) == {"model.xml", "model.bin"}
    assert blob.meta["input_names"] == [t.name for t in sub.inputs]
    assert blob.meta["output_names"] == [t.name for t in sub.outputs]
    json.dumps(blob.meta)
    assert blob.source.startswith("# OpenVINO")


def test_split_in_two_matches_ort(case, backend):
    name, view, feeds, ref = case
    ops = view.op_nodes
    k = len(ops) // 2
    values, blobs = run_parts(backend, view, [ops[:k], ops[k:]], feeds)
    for out, expected in ref.items():
        np.testing.assert_allclose(values[out], expected, rtol=RTOL, atol=ATOL, err_msg=out)
    for sub, blob, runner in blobs:
        _assert_covered(sub, blob)
        _assert_f32(blob, runner)


def test_fresh_load_from_bytes(case, backend):
    name, view, feeds, ref = case
    blob = backend.build(Subgraph(view, view.op_nodes))
    stored = Blob(backend=blob.backend, files={k: bytes(v) for k, v in blob.files.items()},
                  meta=json.loads(json.dumps(blob.meta)))
    runner = OpenVINOBackend().load(stored)
    assert isinstance(runner, Runner)
    outs = runner([feeds[n] for n in runner.input_names])
    for n, arr in zip(runner.output_names, outs):
        np.testing.assert_allclose(arr, ref[n], rtol=RTOL, atol=ATOL)
    _assert_f32(stored, runner)
    runner.close()


def test_outputs_survive_later_calls(case, backend):
    name, view, feeds, ref = case
    runner = backend.load(backend.build(Subgraph(view, view.op_nodes)))
    inputs = [feeds[n] for n in runner.input_names]
    first = runner(inputs)
    kept = [a.copy() for a in first]
    second = runner([x * 0.5 for x in inputs])
    for a, b, c in zip(first, kept, second):
        np.testing.assert_array_equal(a, b)
        assert not np.shares_memory(a, c)
    # read-only and non-contiguous inputs are accepted too
    ro = [np.asfortranarray(x) for x in inputs]
    for x in ro:
        x.flags.writeable = False
    for a, b in zip(runner(ro), kept):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)


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


def _cpu_has(cap: str) -> bool:
    return cap in [str(c) for c in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")]


def test_explicit_bf16_is_recorded_or_refused_where_the_cpu_lacks_it():
    """On a CPU without bf16 the plugin would run f32 under a bf16 label (issue 36): refused up
    front, naming the option and the CPU's capabilities; elsewhere built and recorded."""
    view = GraphView(import_onnx(bundled_model("transformer")))
    if not _cpu_has("BF16"):
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


def test_supports_everything_in_squeezenet_and_transformer(case, backend):
    name, view, feeds, ref = case
    verdicts = backend.supports(view)
    assert set(verdicts) == set(view.op_nodes)
    bad = {i: v.reason for i, v in verdicts.items() if not v.ok}
    assert not bad


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
