"""What every ONNX backend must do on real models, checked over ONNX Runtime and OpenVINO alike
against a plain ORT session on the original model (backend_cases.load_case).  What only one
backend does (its options, its fusions, what it refuses) is in test_backend_<name>.py.

Tolerances, per backend:
- onnxruntime: everything is float32 on the same library, and the whole-model subgraph is the
  very same ONNX graph as the reference, so results agree to rounding; a split changes which
  fusions ORT can do at the boundary (e.g. a Conv+Relu pair cut in two), which moves results by
  a few ulps.  rtol = atol = 1e-4 leaves ample room for that and still catches any wrong wiring.
- openvino: the backend runs in f32 (asserted below), but OpenVINO's CPU plugin picks its own
  algorithms: brgemm/Winograd convolutions and FullyConnected layers accumulate in a different
  order, LayerNormalization becomes MVN plus a fused multiply-add, and Erf/Softmax use their own
  vectorised approximations.  Against ORT that gives relative differences of ~1e-6..1e-5 on
  these models; rtol = atol = 1e-3 leaves headroom for other CPUs and still catches any wrong
  wiring or a silent bf16 run (bf16 keeps only ~3 significant digits, errors ~1e-2).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

import numpy as np
import onnxruntime as ort
import openvino as ov
import pytest

from backend_cases import assert_covered, load_case, run_parts
from provmap.runtime_module.backend import Backend, Blob, Runner
from provmap.runtime_module.backends.onnxruntime import OnnxRuntimeBackend
from provmap.runtime_module.backends.openvino import OpenVINOBackend
from provmap.runtime_module.subgraph import Subgraph


def _no_more(*_):
    pass


def _ort_source_has_a_line_per_kernel(blob: Blob):
    assert len(blob.source.strip().splitlines()) == len(blob.kernels) + 4


def _ov_runs_f32(blob: Blob, runner):
    assert blob.meta["precision"] == "f32"
    assert blob.meta["inference_precision"] == "f32"
    assert blob.meta["config"]["INFERENCE_PRECISION_HINT"] == "f32"
    assert runner.compiled.get_property("INFERENCE_PRECISION_HINT") == ov.Type.f32
    # and no executed layer runs in bf16/f16
    for op in runner.compiled.get_runtime_model().get_ordered_ops():
        assert op.get_rt_info()["runtimePrecision"].astype(str) not in ("bf16", "f16")


@dataclass(frozen=True)
class Spec:
    """What the shared checks need to know of one backend."""

    name: str
    tol: float                                # rtol = atol against the ORT reference
    make: Callable[[], Backend]               # the backend the parts are built with
    make_loader: Callable[[], Backend]        # another instance, configured otherwise, to load
    library_version: Callable[[], str]
    kind: str                                 # of every kernel in the blob's map
    files: frozenset[str]                     # the blob's members
    source_head: str
    check_source: Callable[[Blob], None]      # the whole model's listing, beyond its head
    check_runner: Callable[[Blob, Runner], None]  # every built or loaded part


SPECS = {s.name: s for s in (
    Spec("onnxruntime", 1e-4, OnnxRuntimeBackend,
         lambda: OnnxRuntimeBackend(threads=1, allow_spinning=False), lambda: ort.__version__,
         "ort-node", frozenset({"model.onnx"}), "# onnxruntime",
         _ort_source_has_a_line_per_kernel, _no_more),
    Spec("openvino", 1e-3, OpenVINOBackend, OpenVINOBackend, ov.get_version,
         "ov-layer", frozenset({"model.xml", "model.bin"}), "# OpenVINO",
         _no_more, _ov_runs_f32),
)}


@pytest.fixture(scope="module", params=["squeezenet", "transformer"])
def case(request):
    return load_case(request.param)


@pytest.fixture(scope="module", params=sorted(SPECS))
def spec_backend(request):
    spec = SPECS[request.param]
    return spec, spec.make()


def test_whole_model_matches_ort(case, spec_backend):
    (name, view, feeds, ref), (spec, backend) = case, spec_backend
    values, [(sub, blob, runner)] = run_parts(backend, view, [view.op_nodes], feeds)
    for out, expected in ref.items():
        np.testing.assert_allclose(values[out], expected, rtol=spec.tol, atol=spec.tol,
                                   err_msg=out)
    assert_covered(sub, blob, spec.kind)
    spec.check_runner(blob, runner)
    assert blob.backend == spec.name
    assert set(blob.files) == spec.files
    assert blob.meta["backend_version"] == spec.library_version()
    assert blob.meta["input_names"] == [t.name for t in sub.inputs]
    assert blob.meta["output_names"] == [t.name for t in sub.outputs]
    json.dumps(blob.meta)  # stored as JSON in artifacts
    assert blob.source.startswith(spec.source_head)
    spec.check_source(blob)


def test_split_in_two_matches_ort(case, spec_backend):
    (name, view, feeds, ref), (spec, backend) = case, spec_backend
    ops = view.op_nodes
    k = len(ops) // 2
    values, blobs = run_parts(backend, view, [ops[:k], ops[k:]], feeds)
    for out, expected in ref.items():
        np.testing.assert_allclose(values[out], expected, rtol=spec.tol, atol=spec.tol,
                                   err_msg=out)
    for sub, blob, runner in blobs:
        assert_covered(sub, blob, spec.kind)
        spec.check_runner(blob, runner)
    # the boundary really is a cut: the second part reads what the first produced
    first, second = blobs[0][0], blobs[1][0]
    assert {t.name for t in first.outputs} & {t.name for t in second.inputs}


def test_fresh_load_from_bytes(case, spec_backend):
    (name, view, feeds, ref), (spec, backend) = case, spec_backend
    blob = backend.build(Subgraph(view, view.op_nodes))
    stored = Blob(backend=blob.backend, files={k: bytes(v) for k, v in blob.files.items()},
                  meta=json.loads(json.dumps(blob.meta)))
    runner = spec.make_loader().load(stored)
    assert isinstance(runner, Runner)
    outs = runner([feeds[n] for n in runner.input_names])
    for n, arr in zip(runner.output_names, outs):
        np.testing.assert_allclose(arr, ref[n], rtol=spec.tol, atol=spec.tol)
    spec.check_runner(stored, runner)
    runner.close()


def test_outputs_survive_later_calls(case, spec_backend):
    (name, view, feeds, ref), (spec, backend) = case, spec_backend
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
        np.testing.assert_allclose(a, b, rtol=spec.tol, atol=spec.tol)


def test_supports_everything_in_squeezenet_and_transformer(case, spec_backend):
    (name, view, feeds, ref), (spec, backend) = case, spec_backend
    verdicts = backend.supports(view)
    assert set(verdicts) == set(view.op_nodes)
    bad = {i: v.reason for i, v in verdicts.items() if not v.ok}
    assert not bad
