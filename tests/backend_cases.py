"""Shared by the backend tests (test_backends.py over every ONNX backend, and the files of one
backend each): the models they run, the part-by-part executor and the kernel-coverage check."""

from __future__ import annotations

import onnxruntime as ort

from provmap.provenance.bundled import zoo
from provmap.provenance.importer import import_onnx
from provmap.runtime_module.backend import Backend
from provmap.runtime_module.graph_view import GraphView
from provmap.runtime_module.subgraph import Subgraph


def bundled_model(name: str):
    """A bundled model with seed-0 random weights, as these tests were measured with (the
    transformer has its own)."""
    model, _ = zoo.resolve(f"bundled:{name}:original")
    if name != "transformer":
        model = zoo.with_random_weights(model, seed=0)
    return model


def load_case(name: str):
    """(name, view, feeds, reference outputs of a plain ORT session on the original model)."""
    model = bundled_model(name)
    view = GraphView(import_onnx(model))
    feeds = zoo.random_inputs(model, seed=1)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    return name, view, feeds, ref


def run_parts(backend: Backend, view: GraphView, parts, feeds):
    """Build and run each part in order, feeding tensors by name.

    Returns (values, [(sub, blob, runner)]), checking each runner's output names, shapes and
    dtypes against the subgraph's on the way."""
    values = dict(feeds)
    built = []
    for ops in parts:
        sub = Subgraph(view, ops)
        blob = backend.build(sub)
        runner = backend.load(blob)
        outs = runner([values[n] for n in runner.input_names])
        assert runner.output_names == [t.name for t in sub.outputs]
        for t, arr in zip(sub.outputs, outs):
            assert arr.shape == t.shape and str(arr.dtype) == t.dtype, t
        values.update(zip(runner.output_names, outs))
        built.append((sub, blob, runner))
    return values, built


def assert_covered(sub: Subgraph, blob, kind: str):
    """Every op node of the part is in some kernel of the blob's map, the kernels are of the
    backend's kind and named uniquely, and none is a graph's plumbing (inputs, outputs,
    constants) claimed as work."""
    positions = {p for k in blob.kernels for p in k.nodes}
    pos = {node: i for i, node in enumerate(sub.closure)}
    missing = [sub.view.describe(i) for i in sub.ops if pos[i] not in positions]
    assert not missing, f"op nodes in no kernel: {missing}"
    assert all(0 <= p < len(sub.closure) for p in positions)
    assert all(k.kind == kind and k.op for k in blob.kernels)
    assert not {k.op for k in blob.kernels} & {"Input", "Output", "Const"}
    assert len({k.name for k in blob.kernels}) == len(blob.kernels)


def cpu_has(cap: str) -> bool:
    """Whether OpenVINO's CPU plugin reports the capability (BF16, FP16, ...) on this machine."""
    import openvino as ov

    return cap in [str(c) for c in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")]
