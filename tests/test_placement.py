"""Placement as data (issue 27): the per-node table from `provmap inspect --json` and
`--sqlite`, and the `namespace` annotate writes for Model Explorer, through the real CLI."""

from __future__ import annotations

import json
import sqlite3

import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
import numpy as np

from cli_runner import provmap as cli


def unnamed_and_repeated() -> onnx.ModelProto:
    """x -> Relu (unnamed) -> Softmax "dup" -> Add "dup" (+ an unnamed Constant) -> Neg
    (unnamed): Model Explorer names them node, dup, dup_1, node_1, node_2."""
    c = numpy_helper.from_array(np.full((2, 6), 0.5, np.float32), "cval")
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Softmax", ["r"], ["s"], name="dup", axis=-1),
             helper.make_node("Constant", [], ["c"], value=c),
             helper.make_node("Add", ["s", "c"], ["a"], name="dup"),
             helper.make_node("Neg", ["a"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.fixture(scope="module")
def art(tmp_path_factory):
    d = tmp_path_factory.mktemp("placement")
    onnx.save(unnamed_and_repeated(), d / "m.onnx")
    r = cli("compile", d / "m.onnx", "-o", d / "a.provmap", "--strategy",
            "greedy:openvino,onnxruntime", "--backend-option", "openvino.exclude_ops=Softmax",
            "--embed-model")
    assert r.returncode == 0, r.stderr
    return d


def test_inspect_json_has_one_row_per_node_of_the_users_model(art):
    r = cli("inspect", art / "a.provmap", "--json")
    assert r.returncode == 0, r.stderr
    table = json.loads(r.stdout)["placement"]
    assert (table["schema"], table["version"], table["model"], table["graph"]) == \
        ("provmap.placement", 2, "original", "g")
    rows = table["nodes"]
    assert [r["node"] for r in rows] == ["node", "dup", "node_1", "dup_1", "node_2"]
    assert [r["name"] for r in rows] == ["", "dup", "", "dup", ""]
    by = {r["node"]: r for r in rows}
    assert by["node"]["backends"] == ["openvino"] and by["dup"]["backends"] == ["onnxruntime"]
    assert by["dup_1"]["backends"] == ["openvino"] and by["node_2"]["backends"] == ["openvino"]
    assert by["dup"]["partitions"] != by["node"]["partitions"]
    assert all(r["kernels"] and r["reason"] is None and r["state"] == "ran"
               for r in rows if r["op_type"] != "Constant")
    # The Constant runs nowhere (v2; v1 placed it on its consumer's backend with no kernel):
    # its consumer's partition carries its value.
    c = by["node_1"]
    assert (c["state"], c["partitions"], c["backends"], c["kernels"]) == \
        ("folded_at_import", [], [], [])
    assert c["carried_by"] == by["dup_1"]["partitions"] and c["reason"]
    # The artifact's own partitions are the table's.
    parts = {p["id"]: p["backend"] for p in table["partitions"]}
    assert all(parts[p] in r["backends"] for r in rows for p in r["partitions"])


def test_sqlite_export_is_the_same_table_beside_the_map(art, tmp_path):
    out = tmp_path / "p.sqlite"
    r = cli("inspect", art / "a.provmap", "--sqlite", out, "--json")
    assert r.returncode == 0, r.stderr
    want = json.loads(r.stdout)["placement"]
    con = sqlite3.connect(out)
    con.row_factory = sqlite3.Row
    got = [dict(row) for row in con.execute("SELECT * FROM placement ORDER BY idx")]
    assert len(got) == len(want["nodes"])
    for g, w in zip(got, want["nodes"]):
        assert g["idx"] == w["index"] and g["node"] == w["node"] and g["reason"] == w["reason"]
        assert g["state"] == w["state"]
        for k in ("partitions", "backends", "kernels", "carried_by", "exprs"):
            assert json.loads(g[k]) == w[k]
    meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
    assert json.loads(meta["placement_version"]) == 2
    # Joins to the map's own tables: every kernel named is one of the map's kernels.
    ok = con.execute("SELECT count(*) FROM placement, json_each(placement.kernels) k "
                     "WHERE k.value NOT IN (SELECT name FROM kernels)").fetchone()[0]
    assert ok == 0
    ov = [row[0] for row in con.execute(
        "SELECT node FROM placement, json_each(placement.backends) b WHERE b.value = "
        "'openvino' ORDER BY idx")]
    assert ov == ["node", "dup_1", "node_2"]  # not the Constant it carries


def test_annotate_groups_nodes_by_partition_for_model_explorer(art, tmp_path):
    r = cli("annotate", art / "a.provmap", "-o", tmp_path / "ann.onnx")
    assert r.returncode == 0, r.stderr
    ann = onnx.load(tmp_path / "ann.onnx")
    ns = [{p.key: p.value for p in n.metadata_props}["namespace"] for n in ann.graph.node]
    table = json.loads(cli("inspect", art / "a.provmap", "--json").stdout)["placement"]
    want = [f"{','.join(r['partitions'])} {r['backends'][0]}" if r["partitions"] else
            "no partition" for r in table["nodes"]]
    assert ns == want and ns[1].endswith(" onnxruntime") and ns[0].endswith(" openvino")
    # Annotating the annotated model does not nest the partition layer twice.
    r = cli("annotate", art / "a.provmap", "--model", tmp_path / "ann.onnx", "-o",
            tmp_path / "ann2.onnx")
    if r.returncode == 0:  # the annotated model has another hash: refused is fine too
        again = onnx.load(tmp_path / "ann2.onnx")
        assert [{p.key: p.value for p in n.metadata_props}["namespace"]
                for n in again.graph.node] == ns


def test_namespace_keeps_an_exporters_name_hierarchy_inside_the_partition(tmp_path):
    """A TorchScript export names nodes /qkv/MatMul: its layer stays below the partition."""
    from pathlib import Path

    src = Path(__file__).parent / "data" / "torchscript_attention_dynamic.onnx"
    art = tmp_path / "a.provmap"
    r = cli("compile", src, "-o", art, "--strategy", "greedy:openvino,onnxruntime",
            "--backend-option", "openvino.exclude_ops=Softmax", "--input-shape", "x=2x5x16")
    assert r.returncode == 0, r.stderr
    r = cli("annotate", art, "--model", src, "-o", tmp_path / "ann.onnx")
    assert r.returncode == 0, r.stderr
    ns = {n.name: {p.key: p.value for p in n.metadata_props}["namespace"]
          for n in onnx.load(tmp_path / "ann.onnx").graph.node}
    assert ns["/qkv/MatMul"].endswith(" openvino/qkv") and ns["/Softmax"].endswith(" onnxruntime")
    assert ns["/Shape"] == "no partition"


def test_node_names_are_model_explorers(art):
    """The `node` column is what onnx_ir's NameFixPass (which Model Explorer's ONNX adapter
    runs) names each node, so overlays keyed by it land on the right nodes."""
    ir = pytest.importorskip("onnx_ir")
    from onnx_ir.passes.common import NameFixPass

    model = ir.serde.deserialize_model(onnx.load(art / "m.onnx"))
    NameFixPass()(model)
    table = json.loads(cli("inspect", art / "a.provmap", "--json").stdout)["placement"]
    assert [r["node"] for r in table["nodes"]] == [n.name for n in model.graph]


def test_overlays_and_sqlite_bad_paths_are_one_line_each(art, tmp_path):
    """Needs no extra: the overlays are plain JSON; only --open needs Model Explorer."""
    from cli_runner import one_error

    one_error(cli("overlays", art / "a.provmap", "-o", "/proc/ov"), "/proc/ov", "not writable")
    one_error(cli("inspect", art / "a.provmap", "--sqlite", "/proc/p.sqlite"), "not writable")
    (tmp_path / "p.json").write_text("[]")
    one_error(cli("overlays", art / "a.provmap", "-o", tmp_path / "ov", "--profile",
                  tmp_path / "p.json"), "p.json", "not the output of `provmap profile --json`")
    r = cli("overlays", art / "a.provmap", "-o", tmp_path / "ov", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    part = json.loads(open(out["files"]["partition"]).read())["g"]["results"]
    assert set(part) == {"node", "dup", "node_1", "dup_1", "node_2"}
    assert out["command"][0] == "model-explorer" and "--no_open_in_browser" in out["command"]
