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


def test_a_cost_cache_that_is_a_directory_is_refused_before_the_search(tmp_path):
    """L2: PROVMAP_CACHE naming a directory failed after the search had started, as "cannot
    open: unable to open database file"; the trust list's same mistake is caught up front."""
    import os

    d = tmp_path / "cachedir"
    d.mkdir()
    model = relu_artifact(tmp_path).parent / "relu.onnx"
    env = {**os.environ, "PROVMAP_CACHE": str(d)}
    r = provmap("compile", model, "-o", tmp_path / "c.provmap", "--strategy",
                "collage:onnxruntime,openvino", env=env)
    assert r.returncode == 2, r.stderr
    assert f"the cost cache {d} is a directory; set PROVMAP_CACHE to a file" in r.stderr
    assert "collage:" not in r.stderr and not (tmp_path / "c.provmap").exists()
    r = provmap("compile", model, "-o", tmp_path / "c.provmap", "--strategy",
                "collage:onnxruntime,openvino", "--cache", tmp_path / "relu.onnx" / "x.sqlite")
    assert r.returncode == 2 and "which is not a directory; set --cache to a file" in r.stderr


def test_compare_json_names_every_rule_and_the_one_each_tensor_passed_on(tmp_path):
    """L1: `compare --json` listed atol and rtol only, beside a uint8 QDQ output one step off
    (past both) and "match": true, never saying it passed on --quant-steps."""
    import json

    from provmap.workbench.compare import Tolerance, metrics

    art = relu_artifact(tmp_path)
    r = provmap("compare", art, "--model", tmp_path / "relu.onnx", "--random", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert (d["atol"], d["rtol"], d["quant_steps"], d["ulps"]) == (1e-4, 1e-3, 1, 4)
    assert [t["passed_on"] for t in d["tensors"]] == ["atol/rtol"]
    step = 1 / 256
    ref = np.array([0.0, 0.5, 1.0])
    off = metrics(ref + step, ref, Tolerance(), step)  # one step of the grid
    assert off["ok"] and off["passed_on"] == "quant_steps"
    assert metrics(ref + 3 * step, ref, Tolerance(), step)["passed_on"] is None
    u8 = np.array([3, 4], np.uint8)
    assert metrics(u8 + np.uint8(1), u8, Tolerance())["passed_on"] == "quant_steps"
    h = np.array([1000.0], np.float16)
    assert metrics(h + np.float16(1.5), h, Tolerance())["passed_on"] == "ulps"  # 3 ulp, past rtol


def test_format_version_2_without_a_schedule_is_refused(tmp_path):
    """L3: docs/artifact.md: version 2 goes with a schedule; one without was accepted."""
    manifest, files = members(relu_artifact(tmp_path))
    manifest["format_version"] = 2
    art = repack(tmp_path / "v2.provmap", manifest, files)
    for cmd in (("inspect", art), ("run", art, "--random")):
        r = provmap(*cmd)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert "format_version: 2 goes with a schedule, and there is none" in r.stderr


def test_manifest_fields_no_command_shows_are_still_checked(tmp_path):
    """L4: a backend entry named as another library, a runner output listed twice and an
    OpenVINO partition recorded for a GPU were accepted and shown nowhere."""
    import copy

    manifest, files = members(relu_artifact(tmp_path))
    edits = {
        "name": (lambda m: m["backends"]["onnxruntime"].__setitem__("name", "tensorrt"),
                 "backends.onnxruntime.name: 'tensorrt', but the entry is 'onnxruntime'"),
        "twice": (lambda m: m["partitions"][0].__setitem__(
            "runner_outputs", m["partitions"][0]["runner_outputs"] * 2),
            "partitions[0].runner_outputs: 'y' is listed twice"),
        "gpu": (lambda m: m["partitions"][0].setdefault("blob_meta", {}).__setitem__(
            "device", "GPU"), "partitions[0].blob_meta.device: 'GPU': partitions run on the CPU"),
    }
    for key, (edit, words) in edits.items():
        m = copy.deepcopy(manifest)
        edit(m)
        art = repack(tmp_path / f"{key}.provmap", m, files)
        r = provmap("inspect", art)
        assert r.returncode == 2 and "Traceback" not in r.stderr, (key, r.stderr)
        assert words in r.stderr, (key, r.stderr)
