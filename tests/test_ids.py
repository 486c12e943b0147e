"""Expression and node IDs: content-derived, identical across processes, renames and reorders."""

import json
import random
import subprocess
import sys

import onnx
import pytest

from provmap.provenance import ids
from provmap.provenance.bundled import zoo
from provmap.provenance.importer import import_onnx


def id_table(model):
    """(node index -> node id, node id -> sorted expr ids) for a model."""
    imp = import_onnx(model)
    node_ids = [n.id for n in imp.pmap.nodes]
    exprs = {}
    for nid, eid, role in imp.pmap.node_exprs:
        exprs.setdefault(nid, []).append((eid, role))
    return node_ids, {k: sorted(v) for k, v in exprs.items()}


_CHILD = """
import json, sys
from provmap.provenance.bundled import zoo
from provmap.provenance.importer import import_onnx
m, _ = zoo.resolve(sys.argv[1])
imp = import_onnx(m)
print(json.dumps([[n.id for n in imp.pmap.nodes], [e.id for e in imp.pmap.exprs]]))
"""


@pytest.mark.parametrize("spec", ["bundled:squeezenet", "bundled:transformer"])
def test_ids_identical_across_processes(spec):
    outs = []
    for seed in ("0", "12345"):  # different hash seeds: nothing may depend on Python's hash()
        env = {"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"}
        import os
        env.update({k: v for k, v in os.environ.items() if k not in env})
        env["PYTHONHASHSEED"] = seed
        r = subprocess.run([sys.executable, "-c", _CHILD, spec], capture_output=True, text=True,
                           env=env, check=True)
        outs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    assert outs[0] == outs[1]
    assert len(set(outs[0][0])) == len(outs[0][0])  # unique node IDs
    assert len(set(outs[0][1])) == len(outs[0][1])  # unique expr IDs


def _renamed_and_shuffled(model, seed):
    """Rename every node and every internal tensor; emit nodes in a random topological order."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    rng = random.Random(seed)
    keep = {i.name for i in g.input} | {o.name for o in g.output} | {t.name for t in g.initializer}
    rename = {}
    for n in g.node:
        for o in n.output:
            if o and o not in keep:
                rename[o] = f"t{rng.randrange(10**9)}_{len(rename)}"
    for n in g.node:
        n.name = f"renamed_{rng.randrange(10**9)}"
        for i, x in enumerate(n.input):
            n.input[i] = rename.get(x, x)
        for i, x in enumerate(n.output):
            n.output[i] = rename.get(x, x)
    # random topological order: repeatedly pick any ready node
    nodes = list(g.node)
    produced = {o: i for i, n in enumerate(nodes) for o in n.output}
    deps = [{produced[x] for x in n.input if x in produced} for n in nodes]
    done, order = set(), []
    while len(order) < len(nodes):
        ready = [i for i in range(len(nodes)) if i not in done and deps[i] <= done]
        i = rng.choice(ready)
        done.add(i)
        order.append(i)
    new = [nodes[i] for i in order]
    copies = [onnx.NodeProto() for _ in new]
    for c, n in zip(copies, new):
        c.CopyFrom(n)
    del g.node[:]
    g.node.extend(copies)
    return m, order


@pytest.mark.parametrize("spec", ["bundled:squeezenet", "bundled:inception_v1",
                                  "bundled:transformer"])
def test_ids_survive_renaming_and_reordering(spec):
    model, _ = zoo.resolve(spec)
    base_nodes, base_exprs = id_table(model)
    for seed in (1, 2):
        shuffled, order = _renamed_and_shuffled(model, seed)
        assert [n.name for n in shuffled.graph.node] != [n.name for n in model.graph.node]
        nodes, exprs = id_table(shuffled)
        # node k of the shuffled file is node order[k] of the original
        assert [nodes[k] for k in range(len(order))] == [base_nodes[i] for i in order]
        assert exprs == base_exprs


def test_identical_nodes_get_distinct_stable_ids():
    # squeezenet has several ConstantOfShape weights computing exactly the same tensor
    model = zoo.load_light("squeezenet")
    r = ids.compute_node_ids(model.graph)
    assert len(set(r.node_digest)) < len(r.node_digest)  # real duplicates exist
    assert len(set(r.node_id)) == len(r.node_id)


def test_collision_detection_lengthens_only_colliding_ids(monkeypatch):
    monkeypatch.setattr(ids, "SHORT", 1)
    digests = {"a": bytes.fromhex("ab" * 16), "b": bytes.fromhex("ac" * 16),
               "c": bytes.fromhex("f0" * 16)}
    out = ids.shorten(digests, "n")
    assert out == {"a": "nababa", "b": "nacaca", "c": "nf"}  # 1 -> 5 hex digits
    with pytest.raises(ValueError):
        ids.shorten({"a": b"x" * 16, "b": b"x" * 16}, "n")


def test_id_format():
    node_ids, exprs = id_table(zoo.transformer_block())
    assert all(i.startswith("n") and len(i) == 1 + ids.SHORT for i in node_ids)
    int(node_ids[0][1:], 16)
