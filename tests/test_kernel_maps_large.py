"""Kernel maps on long graphs (issue 33): the same answers the per-kernel walks gave, on graphs
whose size made those walks quadratic; compile time itself is bench/compile_scaling.py's row."""

from __future__ import annotations

import random

import pytest
from onnx import TensorProto, helper

from provmap.bench.compile_scaling import neg_relu_chain
from provmap.bench.decoder_model import gpt2_like
from provmap.provenance.importer import import_onnx
from provmap.runtime_module.backends.onnxruntime import OnnxRuntimeBackend
from provmap.runtime_module.backends.openvino import OpenVINOBackend
from provmap.runtime_module.backends.ort_kernels import attach_orphans
from provmap.runtime_module.backends.ov_kernels import _resolve
from provmap.runtime_module.graph_view import GraphView
from provmap.runtime_module.subgraph import Subgraph


def _build(model, backend):
    view = GraphView(import_onnx(model))
    sub = Subgraph(view, view.op_nodes)
    return view, sub, backend.build(sub)


def test_chain_kernels_each_cover_their_own_node():
    view, sub, blob = _build(neg_relu_chain(2000), OnnxRuntimeBackend())
    names = [view.nodes[i].name for i in sub.closure]
    covered = sorted((k.name, [names[p] for p in k.nodes]) for k in blob.kernels)
    assert covered == sorted((f"n{i}", [f"n{i}"]) for i in range(2000))


def test_a_long_run_of_removed_identities_joins_the_kernel_that_reads_it():
    """ORT drops every Identity; each one goes to the kernel of the Relu that reads the run.
    1,500 zero-binding nodes in a row overflowed the importer's recursive walk of them."""
    n = 1500
    nodes = [helper.make_node("Relu", ["x"], ["r0"], name="first")]
    x = "r0"
    for i in range(n):
        nodes.append(helper.make_node("Identity", [x], [f"i{i}"], name=f"id{i}"))
        x = f"i{i}"
    nodes.append(helper.make_node("Relu", [x], ["y"], name="last"))
    g = helper.make_graph(nodes, "identities",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    view, sub, blob = _build(model, OnnxRuntimeBackend())
    names = [view.nodes[i].name for i in sub.closure]
    by_kernel = {k.name: {names[p] for p in k.nodes} for k in blob.kernels}
    assert by_kernel["first"] == {"first"}
    assert by_kernel["last"] == {"last"} | {f"id{i}" for i in range(n)}


@pytest.mark.parametrize("backend", [OnnxRuntimeBackend, OpenVINOBackend])
def test_decoder_kernels_cover_every_node_without_smearing(backend):
    view, sub, blob = _build(gpt2_like(3), backend())
    covered = {p for k in blob.kernels for p in k.nodes}
    ops = {sub.closure.index(i) for i in view.op_nodes}
    assert ops <= covered
    # a layer is ~34 nodes: no kernel may claim a layer's worth (a walk leaking downstream)
    assert max(len(k.nodes) for k in blob.kernels) <= 12


def _attach_reference(covered, nodes, producer, consumers, wanted):
    """The recursive walk attach_orphans replaced, kept as the definition of its answer."""
    kernels_of = {}
    for k, cov in enumerate(covered):
        for p in cov:
            kernels_of.setdefault(p, set()).add(k)

    def via(p, forward, seen):
        if p in kernels_of:
            return kernels_of[p]
        if p in seen:
            return set()
        seen.add(p)
        if forward:
            nxt = {c for o in nodes[p].output if o for c in consumers.get(o, ())}
        else:
            nxt = {producer[x] for x in nodes[p].input if x in producer}
        ks = set()
        for q in nxt:
            ks |= via(q, forward, seen)
        return ks

    found = {p: via(p, True, set()) or via(p, False, set())
             for p in sorted(wanted - set(kernels_of))}
    for p, ks in found.items():
        for k in ks:
            covered[k].add(p)


@pytest.mark.parametrize("seed", range(40))
def test_attach_orphans_gives_the_recursive_walks_answer(seed):
    rng = random.Random(seed)
    n = rng.randint(2, 40)
    nodes = []
    for i in range(n):
        ins = rng.sample([f"t{j}" for j in range(i)], k=min(i, rng.randint(0, 3))) or ["x"]
        nodes.append(helper.make_node("Sum", ins, [f"t{i}"], name=f"n{i}"))
    producer = {f"t{i}": i for i in range(n)}
    consumers = {}
    for i, nd in enumerate(nodes):
        for x in nd.input:
            consumers.setdefault(x, []).append(i)
    covered = [set(rng.sample(range(n), k=rng.randint(0, 3))) for _ in range(rng.randint(1, 6))]
    expected = [set(c) for c in covered]
    _attach_reference(expected, nodes, producer, consumers, set(range(n)))
    attach_orphans(covered, nodes, producer, consumers, set(range(n)))
    assert covered == expected


@pytest.mark.parametrize("seed", range(20))
def test_resolve_takes_the_longest_known_prefix_before_a_separator(seed):
    rng = random.Random(seed)
    parts = ["attn", "q_proj", "MatMul", "x", "x_1", "Add", "a.b", ""]
    known = {"/".join(rng.choices(parts, k=rng.randint(1, 3))): {i} for i in range(30)}
    owners = {k: v for k, v in known.items() if k}
    for _ in range(50):
        name = "".join(rng.choice(parts) + rng.choice("/_.:x") for _ in range(rng.randint(1, 5)))
        brute = next((owners[k] for k in sorted(owners, key=len, reverse=True)
                      if len(k) < len(name) and name.startswith(k) and name[len(k)] in "/_.:"),
                     set())
        assert _resolve(name, owners) == (owners[name] if name in owners else brute)
