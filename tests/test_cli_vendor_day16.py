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


def test_a_node_run_by_two_partitions_is_refused(tmp_path):
    """Seventeenth afternoon L2: a node id appended to a second partition's ops was accepted;
    explain then counted it in both partitions, inspect and lookup in one."""
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                           helper.make_node("Neg", ["r"], ["y"], name="neg")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              tmp_path / "m.onnx")
    src = tmp_path / "a.provmap"
    r = provmap("compile", tmp_path / "m.onnx", "-o", src, "--strategy",
                "greedy:onnxruntime,openvino", "--backend-option", "onnxruntime.exclude_ops=Neg")
    assert r.returncode == 0, r.stderr
    manifest, files = members(src)
    manifest["partitions"][1]["ops"].append(manifest["partitions"][0]["ops"][0])
    bad = repack(tmp_path / "bad.provmap", manifest, files)
    for cmd in (("inspect", bad), ("explain", bad)):
        r = provmap(*cmd)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert "partitions[1].ops[1]" in r.stderr and "already runs in p0" in r.stderr, r.stderr
    r = provmap("explain", src)
    assert "(1 op node)" in r.stdout and "ops)" not in r.stdout, r.stdout


def test_a_float32_output_cast_from_float16_is_judged_in_float16_ulps(tmp_path):
    """Seventeenth afternoon L1: convert_float_to_float16(keep_io_types=True) ends each output
    with a Cast to float32; compare judged it at float32's rtol, so OpenVINO "diverged" where it
    was closer to the float32 model than ONNX Runtime's own float16 run, and --ulps did
    nothing."""
    import json

    from provmap.workbench.compare import Tolerance, metrics, tensor_grids

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float16), "w")
    g = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["xh"], to=TensorProto.FLOAT16, name="in_cast"),
         helper.make_node("MatMul", ["xh", "w"], ["mh"], name="mm"),
         helper.make_node("Softmax", ["mh"], ["sh"], axis=-1, name="sm"),
         helper.make_node("Cast", ["sh"], ["y"], to=TensorProto.FLOAT, name="out_cast")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 64])], [w])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    # the float16 tensor has no declared type: found by inference
    assert tensor_grids(model) == {"y": np.dtype(np.float16)}
    ref = np.array([0.5, 0.25], np.float32)
    off = ref + np.spacing(ref.astype(np.float16)).astype(np.float32) * 2  # 2 ulp of float16
    assert not metrics(off, ref, Tolerance())["ok"]
    m = metrics(off, ref, Tolerance(), np.dtype(np.float16))
    assert m["ok"] and m["passed_on"] == "ulps"
    assert not metrics(off, ref, Tolerance(ulps=1), np.dtype(np.float16))["ok"]
    path = tmp_path / "fp16io.onnx"
    onnx.save(model, path)
    art = tmp_path / "a.provmap"
    assert provmap("compile", path, "-o", art, "--strategy", "single:openvino").returncode == 0
    r = provmap("compare", art, "--model", path, "--random", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    [t] = json.loads(r.stdout)["tensors"]
    assert t["ok"] and t["passed_on"] in ("atol/rtol", "ulps")
