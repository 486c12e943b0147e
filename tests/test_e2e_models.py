"""Every test model, under single:<backend> for each backend and a greedy order that mixes
backends, compiled to an artifact and run by `provmap run` in a fresh process, must match ONNX
Runtime's full-model output.

Weights are replaced by seeded random ones (the bundled models' ConstantOfShape weights are all
equal, which would hide wiring mistakes such as swapped channels).

Tolerance: every backend computes in f32 (OpenVINO is pinned to f32; its bf16 default would be
~1e-2 off).  Backends sum in different orders and use different conv algorithms (Winograd, GEMM,
direct), so results differ by rounding that grows with depth: measured worst |diff| is ~1e-5 on
the softmax outputs (probabilities in [0, 1]) and ~1e-4 relative on the transformer.  We assert
atol=1e-4 + rtol=1e-3, which a wrong partition boundary (swapped or stale tensor) breaks by orders
of magnitude.
"""

import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pytest

from provmap.partition.compile import compile_model, load_view
from provmap.runtime_module.module import load
from provmap.provenance.bundled import zoo

# VGG-19 (548 MB of weights, ~2.5 min of the default run) is the `heavy` variant:
# `pytest -m heavy` runs it; the other five are the default run's sample.
MODELS = ["squeezenet", "resnet50", pytest.param("vgg19", marks=pytest.mark.heavy),
          "inception_v1", "bvlc_alexnet", "transformer"]

# Greedy orders that really mix backends: each backend is kept off an op the model has, the way
# a vendor restricts an accelerator, so greedy must cut around it.
MIXED = {
    "default": ("greedy:onnxruntime,openvino,tvm",
                {"onnxruntime": {"exclude_ops": "MaxPool,Softmax"},
                 "openvino": {"exclude_ops": "Softmax"}}),
    "transformer": ("greedy:onnxruntime,openvino,tvm",
                    {"onnxruntime": {"exclude_ops": "Softmax,LayerNormalization"},
                     "openvino": {"exclude_ops": "Softmax"}}),
}

ATOL, RTOL = 1e-4, 1e-3


@pytest.fixture(scope="module", params=MODELS)
def case(request, tmp_path_factory):
    name = request.param
    model = zoo.with_random_weights(zoo.resolve(f"bundled:{name}:original")[0], seed=7)
    feeds = zoo.random_inputs(model, seed=7)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    d = tmp_path_factory.mktemp(name)
    np.savez(d / "in.npz", **feeds)
    return name, load_view(model, name), ref, d


def _run_fresh(art, d):
    out = d / "out.npz"
    r = subprocess.run([sys.executable, "-m", "provmap.cli.main", "run", str(art), "--inputs",
                        str(d / "in.npz"), "-o", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    from provmap.provenance.util.npz_write import read_npz

    return read_npz(out)  # names as written (a '/' in resnet50's output name is escaped)


def _check(got, ref):
    assert set(got) == set(ref)
    for k in ref:
        np.testing.assert_allclose(got[k], ref[k], atol=ATOL, rtol=RTOL, err_msg=k)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["onnxruntime", "openvino", "tvm"])
def test_single_backend_matches_onnxruntime(case, backend):
    name, view, ref, d = case
    art = d / f"single-{backend}.provmap"
    a = compile_model(view, f"single:{backend}", out=art)
    assert [p["backend"] for p in a.manifest["partitions"]] == [backend]
    assert a.manifest["coverage"]["onnx_nodes_unaccounted"] == 0
    _check(_run_fresh(art, d), ref)
    art.unlink()  # the big models' artifacts are hundreds of MB


@pytest.mark.slow
def test_mixed_greedy_matches_onnxruntime(case):
    name, view, ref, d = case
    strategy, options = MIXED.get(name, MIXED["default"])
    art = d / "greedy.provmap"
    a = compile_model(view, strategy, out=art, backend_options=options)
    used = {p["backend"] for p in a.manifest["partitions"]}
    assert len(used) >= 2, used
    assert a.manifest["coverage"]["onnx_nodes_unaccounted"] == 0
    _check(_run_fresh(art, d), ref)
    _walk_lookup(art)
    art.unlink()


def _walk_lookup(art):
    """Every ONNX node answers with its kernels (or why it has none), every kernel with its
    nodes, and each answer is found again from the other side."""
    lk = load(art, runnable=False).lookup
    for n in lk.map.nodes:
        ans = lk.onnx_node(n.id)[0]
        assert ans["kernels"] or ans["elided"], (n.name, n.op_type)
        for k in ans["kernels"]:
            assert any(x["id"] == n.id for x in lk.kernel(k["kernel"])[0]["onnx_nodes"])
    for kname in lk.kernel_names():
        nodes = lk.kernel(kname)[0]["onnx_nodes"]
        assert nodes, kname
        for x in nodes:
            assert any(k["kernel"] == kname for k in lk.onnx_node(x["id"])[0]["kernels"])


def test_shape_inference_without_weight_data_gives_the_same_types():
    """provmap.provenance.fold.infer_types (used by GraphView) infers types on a copy whose large initializers are typed inputs (fast for
    VGG-size weights); small ones (Reshape's shape) keep their values.  Same types as on the
    full model."""
    import onnx

    from provmap.provenance.fold import weightless as _weightless

    model = zoo.with_random_weights(zoo.load_light("bvlc_alexnet"), seed=0)
    light = _weightless(model)
    assert light.ByteSize() < model.ByteSize() / 100
    assert {t.name for t in light.graph.initializer} < {t.name for t in model.graph.initializer}
    full = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    fast = onnx.shape_inference.infer_shapes(light, strict_mode=False)
    types = lambda m: {vi.name: vi.type.SerializeToString()  # noqa: E731
                       for vi in list(m.graph.value_info) + list(m.graph.output)}
    assert types(fast) == types(full) and len(types(full)) > 20
    view = load_view(model, "alexnet")
    assert all(view.spec(o).shape for o in view.graph_outputs)
