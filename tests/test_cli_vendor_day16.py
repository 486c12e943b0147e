"""Issue 36's sixteenth new-user afternoon, through the real CLI."""

from __future__ import annotations

import sqlite3

import numpy as np
import onnx
from attack_kit import members, relu_artifact, repack
from cli_runner import provmap
from onnx import TensorProto, helper, numpy_helper


def test_an_int64_tensor_from_onnx_runtime_runs_on_openvino(tmp_path):
    """M1: TopK (on ONNX Runtime: OpenVINO declines it for its tie order) hands its int64
    indices to an OpenVINO Cast; ONNX Runtime returns them as C long long, which OpenVINO's
    numpy bridge rejected: compile exit 0, every run and compare failed with a cut-off
    "Check 'ov_type_it != dtype_map.end()' failed"."""
    g = helper.make_graph(
        [helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1, name="topk"),
         helper.make_node("Cast", ["i"], ["ci"], to=TensorProto.INT32, name="cast")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("ci", TensorProto.INT32, [2, 2])],
        [numpy_helper.from_array(np.array([2], np.int64), "k")])
    model = tmp_path / "topk_cast.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              model)
    art = tmp_path / "a.provmap"
    r = provmap("compile", model, "-o", art, "--strategy", "greedy:openvino,onnxruntime")
    assert r.returncode == 0, r.stderr
    assert "p0:onnxruntime(1), p1:openvino(1)" in r.stdout + r.stderr
    r = provmap("run", art, "--random")
    assert r.returncode == 0, r.stderr
    r = provmap("compare", art, "--model", model, "--random")
    assert r.returncode == 0 and "match" in r.stdout, r.stdout + r.stderr


def test_inspect_sqlite_is_built_from_the_checked_map_not_the_senders_database(tmp_path):
    """M2: only map.sqlite edited (a node renamed, a kernel relabelled), its hash recomputed:
    inspect and lookup answered from map.json, and `inspect --sqlite` copied the sender's
    database, so its tables contradicted its own placement table and what inspect printed."""
    src = relu_artifact(tmp_path)
    manifest, files = members(src)
    db = tmp_path / "sender.sqlite"
    db.write_bytes(files["map.sqlite"])
    con = sqlite3.connect(db)
    con.execute("UPDATE onnx_nodes SET name = 'EVIL_NAME'")
    con.execute("UPDATE kernels SET backend = 'tvm'")
    con.commit()
    con.close()
    files["map.sqlite"] = db.read_bytes()
    art = repack(tmp_path / "edited.provmap", manifest, files)
    out = tmp_path / "pl.sqlite"
    r = provmap("inspect", art, "--sqlite", out)
    assert r.returncode == 0, r.stderr
    con = sqlite3.connect(out)
    try:
        assert con.execute("SELECT name FROM onnx_nodes").fetchall() == [("relu",)]
        assert {b for (b,) in con.execute("SELECT backend FROM kernels")} == {"onnxruntime"}
        assert con.execute("SELECT name, backends FROM placement").fetchall() == [
            ("relu", '["onnxruntime"]')]
    finally:
        con.close()
