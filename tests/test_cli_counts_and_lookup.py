"""What compile, inspect, annotate, lookup, compare and profile say about the nodes of one model
agrees, through the real CLI: the node states and op-node counts (folded, elided and helper
nodes included), a count of one in the singular, which model the states are keyed to; node
numbers are positions in the user's file as given, and a name compare prints for a node is one
lookup finds; lookup answers for every node and kernel, a kernel mapping to no node included,
and prints shapes as numbers."""

from __future__ import annotations

import json
import re

import numpy as np
import onnx
import pytest
from cli_models import float_model, saved_model
from cli_runner import one_error, provmap
from onnx import TensorProto, helper, numpy_helper

pytestmark = pytest.mark.usefixtures("own_config")


# -- counts and states ----------------------------------------------------------------------

def _chain_model(path):
    """Relu -> Reshape (its shape from a Shape -> Gather -> Unsqueeze -> Concat chain, folded
    before import) -> MatMul -> Identity -> Sigmoid: 9 nodes, 4 that compute."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([0], np.int64), "axes"),
             numpy_helper.from_array(np.array([-1], np.int64), "m1"),
             numpy_helper.from_array(np.random.RandomState(0).rand(4, 6).astype(np.float32), "w")]
    n = helper.make_node
    nodes = [n("Relu", ["x"], ["r"], name="relu"), n("Shape", ["r"], ["s"], name="shape"),
             n("Gather", ["s", "zero"], ["g"], name="gather", axis=0),
             n("Unsqueeze", ["g", "axes"], ["u"], name="unsqueeze"),
             n("Concat", ["u", "m1"], ["c"], name="concat", axis=0),
             n("Reshape", ["r", "c"], ["rs"], name="reshape"),
             n("MatMul", ["rs", "w"], ["mm"], name="matmul"),
             n("Identity", ["mm"], ["id"], name="identity"),
             n("Sigmoid", ["id"], ["y"], name="sigmoid")]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         [2, 2, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6])],
                          initializer=inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_node_counts_agree_across_compile_inspect_annotate_and_lookup(tmp_path):
    """On a folded Shape chain plus an Identity, coverage said every node mapped while the node
    states said 3 ran, 7 folded, 1 elided; partition counts included the elided Identity; and
    lookup named p0 for the Identity whose value a kernel of p1 carries."""
    import json

    model, art = _chain_model(tmp_path / "chain.onnx"), tmp_path / "ch.provmap"
    r = provmap("compile", model, "-o", art, "--strategy", "greedy:onnxruntime,tvm",
                "--backend-option", "onnxruntime.exclude_ops=Sigmoid", "--json")
    assert r.returncode == 0, r.stderr
    built = json.loads(r.stdout)
    info = json.loads(provmap("inspect", art, "--model", model, "--json").stdout)
    states = info["placement"]["states"]
    assert states["ran"] == 4 and states["folded_before_import"] == 4 and states["elided"] == 1
    assert sum(states.values()) == 9
    for cov in (built["coverage"], info["coverage"]):
        assert cov["onnx_nodes_mapped"] == states["ran"]
        assert cov["onnx_nodes_elided"] == 9 - states["ran"]
    rows = {row["name"]: row for row in info["placement"]["nodes"]}
    per_partition = {p["id"]: sum(1 for row in rows.values() if p["id"] in row["partitions"])
                     for p in info["partitions"]}
    assert {p["id"]: p["op_nodes"] for p in built["partitions"]} == per_partition
    assert {p["id"]: sum(1 for n in p["onnx_nodes"] if not n["helper"] and n["ran"])
            for p in info["partitions"]} == per_partition == {"p0": 3, "p1": 1}
    r = provmap("annotate", art, "--model", model, "-o", tmp_path / "a.onnx", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["states"] == states
    for name, row in rows.items():
        answer = json.loads(provmap("lookup", art, "--onnx-node", name, "--json").stdout)
        found = answer["results"][0] if "results" in answer else answer
        assert found["partitions"] == row["partitions"], (name, found, row)
    assert rows["identity"]["state"] == "elided" and rows["identity"]["partitions"] == []
    p1 = next(p for p in info["partitions"] if p["id"] == "p1")
    assert [k.split(":", 1)[1] for k in p1["kernels"]] == ["tir_sigmoid"]  # not p0's work again


def test_compile_progress_counts_the_op_nodes_inspect_counts(tmp_path):
    """L2: "building p0 on openvino (119 op nodes)" where the summary and inspect said 93 (a
    model with stale value_info: openvino folded shape arithmetic).  The line after the build
    says how many the kernels compute, the number the summary and inspect print."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Identity", ["r"], ["i"], name="alias"),
             helper.make_node("Add", ["i", "w"], ["y"], name="add")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [numpy_helper.from_array(np.ones((1, 4), np.float32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "alias.onnx")
    out = tmp_path / "a.provmap"
    r = provmap("compile", tmp_path / "alias.onnx", "-o", out, "--strategy", "single:openvino")
    assert r.returncode == 0, r.stderr
    assert "building p0 on openvino (3 op nodes)" in r.stderr
    assert "its kernels compute 2 of the 3 op nodes it was given; the other 1 was elided" \
        in r.stderr
    assert "p0:openvino(2)" in r.stdout
    assert "p0  openvino  2 op nodes" in provmap("inspect", out).stdout


def test_counts_of_one_are_singular(log_relu_dir):
    err = (log_relu_dir / "compile.stderr").read_text()
    assert "(1 op node)" in err and "op nodes)" not in err, err  # not "1 op nodes"


def test_inspect_json_relax_is_json_and_profile_counts_agree(artifact):
    r = provmap("inspect", artifact, "--json", "--relax")
    assert r.returncode == 0, r.stderr
    obj = json.loads(r.stdout)
    assert "partitions" in obj and "def main" in obj["relax"]
    r = provmap("profile", artifact, "--repeats", "1")
    assert r.returncode == 0 and "1 end-to-end run " in r.stderr, r.stderr


def test_inspect_says_which_model_its_node_states_are_over(artifact):
    """`inspect --model` keys the placement to the user's model; in text mode the output was
    the same with or without it, so nothing showed the option had been used."""
    def over(*extra):
        r = provmap("inspect", artifact, *extra)
        assert r.returncode == 0, r.stderr
        return next(ln for ln in r.stdout.splitlines() if ln.startswith("  over "))

    assert over() == ("  over 66 ONNX nodes of the compiled copy (pass --model FILE to key them "
                      "to your model)")
    assert over("--model", "bundled:squeezenet") == ("  over 66 ONNX nodes of the model as "
                                                     "given (bundled:squeezenet)")


def test_an_empty_model_has_node_states_in_words(tmp_path):
    model = saved_model(tmp_path, [], [("x", TensorProto.FLOAT, [2])],
                        [("x", TensorProto.FLOAT, [2])])
    art = tmp_path / "a.provmap"
    r = provmap("compile", model, "-o", art, "--strategy", "single:onnxruntime")
    if r.returncode == 0:
        assert "node states: no nodes" in provmap("inspect", art).stdout
    else:  # refused at compile is as good: one line, nothing written
        one_error(r)
        assert not art.exists()


# -- numbers and names -----------------------------------------------------------------------

def test_node_numbers_are_positions_in_the_users_file(tmp_path):
    """An unsorted model is sorted before import; "ONNX node #N" and lookup's index counted in
    that sorted copy, so "#52" named another node of the user's file (issue 36's sixth
    afternoon).  They count in the file as given, as inspect's placement table does."""
    from onnx import TensorProto, helper

    model = saved_model(tmp_path, [helper.make_node("Sigmoid", ["a"], ["y"], name="second"),
                                   helper.make_node("Relu", ["x"], ["a"], name="first")],
                        [("x", TensorProto.FLOAT, [1, 4])], [("y", TensorProto.FLOAT, [1, 4])])
    art = tmp_path / "a.provmap"
    assert provmap("compile", model, "-o", art, "--strategy", "single:onnxruntime").returncode == 0
    r = provmap("lookup", art, "--onnx-node", "second")
    assert r.returncode == 0 and r.stdout.startswith("ONNX node #0 'second' (Sigmoid)"), r.stdout
    r = provmap("lookup", art, "--onnx-node", "first", "--json")
    assert json.loads(r.stdout)["results"][0]["index"] == 1
    for extra in ((), ("--model", str(model))):
        rows = json.loads(provmap("inspect", art, "--json", *extra).stdout)["placement"]["nodes"]
        assert {r["name"]: r["index"] for r in rows} == {"second": 0, "first": 1}


@pytest.mark.parametrize("order, want", [([1, 0], 1), ([1, 1], 0), ([0, "1"], 0), ([7, 0], 0),
                                         ([0], 0), ({"0": 1}, 0)])
def test_a_strangers_file_order_is_used_only_when_it_is_a_permutation(order, want):
    from provmap.provenance.model import OnnxNode, ProvenanceMap

    nodes = [OnnxNode(f"n{i}", f"x{i}", "Relu", "", i, [], [f"t{i}"]) for i in range(2)]
    d = ProvenanceMap(meta={"file_order": order}, nodes=nodes).to_dict()
    assert ProvenanceMap.from_dict(d).file_index(0) == want


def test_compare_names_an_unnamed_node_as_lookup_finds_it(tmp_path):
    """compare called an unnamed node "Relu#423" (numbered by tensors), which lookup refused;
    it now gives the node's ID, which lookup and inspect use."""
    from onnx import TensorProto, helper

    model = saved_model(tmp_path, [helper.make_node("Relu", ["x"], ["a"]),
                                   helper.make_node("Sigmoid", ["a"], ["y"])],
                        [("x", TensorProto.FLOAT, [1, 4])], [("y", TensorProto.FLOAT, [1, 4])])
    art = tmp_path / "a.provmap"
    assert provmap("compile", model, "-o", art, "--strategy", "greedy:openvino,onnxruntime",
                   "--backend-option", "openvino.exclude_ops=Sigmoid").returncode == 0
    r = provmap("compare", art, "--model", model, "--json")
    assert r.returncode == 0, r.stderr
    labels = {t["tensor"]: t["onnx_node"] for t in json.loads(r.stdout)["tensors"]}
    for tensor in ("a", "y"):
        found = provmap("lookup", art, "--onnx-node", labels[tensor])
        assert found.returncode == 0, (labels, found.stderr)


def test_a_kernel_with_no_onnx_node_says_so(tmp_path):
    """L3: OpenVINO's copy layer for an Identity's output maps to no ONNX node, and
    `lookup --kernel` printed only a header."""
    model = float_model(tmp_path, [helper.make_node("Relu", ["x"], ["r"], name="relu"),
                                   helper.make_node("Identity", ["r"], ["r2"], name="ident")],
                        [("x", [1, 4])], [("r", [1, 4]), ("r2", [1, 4])])
    art = tmp_path / "a.provmap"
    assert provmap("compile", model, "-o", art, "--strategy", "single:openvino").returncode == 0
    r = provmap("lookup", art, "--kernel", "p0:r2")
    assert r.returncode == 0, r.stderr
    assert "maps to no ONNX node" in r.stdout


def test_lookup_prints_expression_shapes_as_numbers(log_relu_dir):
    info = json.loads(provmap("inspect", log_relu_dir / "m.provmap", "--json").stdout)
    nid = info["partitions"][0]["onnx_nodes"][0]["id"]
    node = json.loads(provmap("lookup", log_relu_dir / "m.provmap", "--onnx-node", nid,
                              "--json").stdout)
    mod = provmap("inspect", log_relu_dir / "m.provmap", "--relax").stdout
    eid = re.search(r'"provmap.exprs": \["(e[0-9a-f]+)"', mod).group(1)
    r = provmap("lookup", log_relu_dir / "m.provmap", "--expr", eid)
    assert r.returncode == 0 and node["results"], r.stderr
    assert "float32[4]" in r.stdout and "T.int64" not in r.stdout, r.stdout
    ans = json.loads(provmap("lookup", log_relu_dir / "m.provmap", "--expr", eid, "--json").stdout)
    assert ans["results"][0]["shape"] == "4"
