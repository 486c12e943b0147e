"""What a stranger's manifest says about each partition (issue 33; hashes recomputed): the
backend it runs on (unknown here, or relabelled to a library its code is not for), native code
where its backend has none, a precision only its blob_meta records, a boundary whose size
disagrees with its shape, a node already run by another partition, and the tensor names its
own model file uses: each is refused, naming the field, before anything runs."""

from __future__ import annotations

import json

import onnx
import pytest
from attack_kit import edited, members, repack
from cli_runner import one_error, provmap, refused, refused_in_process
from onnx import TensorProto, helper

from provmap.cli.main import main

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.mark.usefixtures("own_config")
def test_an_unknown_backend_in_a_manifest_is_named_as_such(tmp_path):
    """It used to get the trust message ("it is native code"), which sends a user to `provmap
    trust` for a backend this install does not have (issue 36)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    from attack_kit import members, repack

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              tmp_path / "m.onnx")
    assert provmap("compile", tmp_path / "m.onnx", "-o", tmp_path / "a.provmap", "--strategy",
                   "single:onnxruntime").returncode == 0
    m, files = members(tmp_path / "a.provmap")
    m["backends"] = {"nosuch": {**m["backends"]["onnxruntime"], "name": "nosuch"}}
    for p in m["partitions"]:
        p["backend"], p["type_key"] = "nosuch", "provmap.nosuch"
    m["strategy"] = "single:nosuch"
    pmap = json.loads(files["map.json"])
    for k in pmap["kernels"]:  # the map agrees with the partitions (it is checked against them)
        k["backend"] = "nosuch"
    files["map.json"] = json.dumps(pmap).encode()
    repack(tmp_path / "u.provmap", m, files)
    np.savez(tmp_path / "in.npz", x=np.ones(2, np.float32))
    for extra in ((), ("--trust",)):
        line = one_error(provmap("run", tmp_path / "u.provmap", "--inputs", tmp_path / "in.npz",
                                 "-o", tmp_path / "o.npz", *extra),
                         "partition p0: unknown backend 'nosuch'", "available: tvm")
        assert "native code" not in line


def test_unknown_backend_in_a_manifest_is_one_line(capsys, relu_art, tmp_path):
    def fn(m):
        m["backends"]["nosuch"] = m["backends"].pop("onnxruntime")
        m["partitions"][0]["backend"] = "nosuch"
        m["partitions"][0]["type_key"] = "provmap.nosuch"
        m["strategy"] = "single:nosuch"
    bad = edited(relu_art, tmp_path / "nb.provmap", fn)
    refused_in_process(capsys, ["run", bad, "--random", "--trust"], "nosuch")


def test_a_partition_relabelled_to_another_library_is_refused(capsys, tmp_path):
    """A TVM partition (lib.so) whose backend was edited to onnxruntime: `trust` said it needs
    no trust and inspect showed an ONNX Runtime partition; `run` failed late without naming
    the field (eleventh afternoon).  Now the type key and the native member are checked."""
    import onnx
    from attack_kit import relu_model

    src, onnx_path = tmp_path / "t.provmap", tmp_path / "relu.onnx"
    onnx.save(relu_model(), onnx_path)
    assert main(["compile", str(onnx_path), "-o", str(src), "--strategy", "single:tvm"]) == 0
    capsys.readouterr()
    manifest, files = members(src)
    manifest["partitions"][0]["backend"] = "onnxruntime"
    manifest["backends"] = {"onnxruntime": {**manifest["backends"]["tvm"], "name": "onnxruntime"}}
    manifest["strategy"] = "single:onnxruntime"
    pmap = json.loads(files["map.json"])
    for k in pmap["kernels"]:
        k["backend"] = "onnxruntime"
    files["map.json"] = json.dumps(pmap).encode()
    bad = repack(tmp_path / "bad.provmap", manifest, files)
    for cmd in (["inspect", bad], ["trust", bad]):
        refused_in_process(capsys, cmd, "partitions[0].type_key",
                           "'provmap.tvm', but the partition's backend is 'onnxruntime'")
    manifest["partitions"][0]["type_key"] = "provmap.onnxruntime"
    bad = repack(tmp_path / "bad2.provmap", manifest, files)
    refused_in_process(capsys, ["inspect", bad], "partitions[0].files",
                       "native code in a partition of 'onnxruntime'")


def test_a_precision_only_the_blob_records_is_refused(int64_artifact, tmp_path):
    """partitions[i].blob_meta.precision = bf16 ran bf16 while inspect showed the backend's
    options (f32): no member changed, so no hash caught it."""
    _d, art, _ = int64_artifact
    manifest, files = members(art)
    manifest["partitions"][0]["blob_meta"]["precision"] = "bf16"
    bad = repack(tmp_path / "bad.provmap", manifest, files)
    for argv in (["inspect", bad], ["run", bad, "--random"]):
        refused(provmap(*argv), "partitions[0].blob_meta.precision",
                "'bf16' differs from backends.openvino.options (f32)")


def test_a_boundary_size_that_disagrees_with_its_shape_is_refused(tmp_path):
    from attack_kit import members, relu_artifact, repack

    from cli_runner import refused

    manifest, files = members(relu_artifact(tmp_path))
    manifest["partitions"][0]["inputs"][0]["bytes"] = 1
    bad = repack(tmp_path / "bad.provmap", manifest, files)
    refused(provmap("inspect", bad), "partitions[0].inputs[0].bytes: 1 is not the size of")


@pytest.mark.parametrize("rename, words", [
    ("input", ("partition p0's code reads tensor 'secret'", "not among its manifest inputs")),
    ("output", ("partition p0's code writes tensor 'secret'", "not among its manifest outputs")),
])
def test_names_the_code_itself_gives_are_checked_against_the_manifest(capsys, relu_art, tmp_path,
                                                                       rename, words):
    """Without names in blob_meta, ONNX Runtime's runner takes them from the partition's own
    model file, which no schema reads: a name nothing produces failed deep in the run."""
    import onnx

    manifest, files = members(relu_art)
    p = manifest["partitions"][0]
    for k in ("input_names", "output_names"):
        p["blob_meta"].pop(k, None)
    member = next(f for f in p["files"] if f.endswith(".onnx"))
    m = onnx.load_from_string(files[member])
    old = (m.graph.input if rename == "input" else m.graph.output)[0].name
    for n in m.graph.node:
        n.input[:] = ["secret" if x == old else x for x in n.input]
        n.output[:] = ["secret" if x == old else x for x in n.output]
    (m.graph.input if rename == "input" else m.graph.output)[0].name = "secret"
    files[member] = m.SerializeToString()
    bad = repack(tmp_path / "bad.provmap", manifest, files)
    refused_in_process(capsys, ["run", bad, "--random", "--trust"], *words)


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
