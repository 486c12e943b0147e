"""`-o` writes only a regular file in an existing directory, and never replaces a file without a
word (issue 36; docs/cli.md).  As root, `compile -o /dev/full` used to turn the device into a
120 KB regular file, and `-o /nonexist/dir/x.provmap` created the directories silently.  A FIFO
stands in for a device here: the same test (not a regular file), without risking the machine's
/dev/null."""

from __future__ import annotations

import json
import os
import stat

import pytest

from cli_runner import one_error, provmap


# Builds record their digest in the trust list and their prices in the cache: this test's own.
pytestmark = pytest.mark.usefixtures("own_config")


def _compile(out, *extra):
    return provmap("compile", "bundled:squeezenet", "-o", out, "--strategy", "single:onnxruntime",
                   *extra)


def test_a_special_file_is_refused_and_left_as_it_is(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    one_error(_compile(fifo), str(fifo), "device or special file", "only regular files")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    for dev in ("/dev/null", "/dev/full"):  # refused by the check alone: never written
        r = provmap("run", tmp_path / "missing.provmap", "--random", "-o", dev)
        one_error(r, dev, "device or special file")
        assert stat.S_ISCHR(os.stat(dev).st_mode)


def test_a_missing_directory_is_refused_not_created(tmp_path):
    out = tmp_path / "no" / "such" / "x.provmap"
    one_error(_compile(out), "directory", "does not exist; create it first")
    assert not (tmp_path / "no").exists()


def test_an_existing_file_is_replaced_with_a_word_only_on_success(tmp_path):
    out = tmp_path / "a.provmap"
    r = _compile(out)
    assert r.returncode == 0 and "exists" not in r.stderr, r.stderr
    before = out.read_bytes()
    r = provmap("compile", "bundled:squeezenet", "-o", out, "--strategy", "single:nosuch")
    assert r.returncode == 2 and out.read_bytes() == before  # a failed command keeps it
    r = _compile(out, "--backend-option", "onnxruntime.threads=1")
    assert r.returncode == 0, r.stderr
    assert f"{out} existed: replaced" in r.stderr
    assert out.read_bytes() != before


def test_errors_are_json_on_stdout_under_json(tmp_path):
    """Scripts read `--json` output; a failure printed only a stderr line (issue 36)."""
    import json

    for args in (("inspect", tmp_path / "missing.provmap", "--json"),
                 ("map", tmp_path / "missing.onnx", "-o", tmp_path / "m", "--json"),
                 ("backends", "--json", "--options")):
        r = provmap(*args)
        if args[0] == "backends":
            assert r.returncode == 0 and "error" not in json.loads(r.stdout)
            continue
        line = one_error(r, "missing.")
        doc = json.loads(r.stdout)
        assert doc == {"error": line.removeprefix("provmap: error: "), "code": 2}
    r = provmap("inspect", tmp_path / "missing.provmap")  # without --json: stderr only
    assert r.returncode == 2 and r.stdout == ""


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


def test_an_output_that_is_the_commands_own_input_is_refused_before_any_work(tmp_path):
    """A new user's `run A -o A` turned the artifact into an .npz, exit 0; `compile m.onnx -o
    m.onnx` replaced the model with the artifact.  Now refused, naming the option, and the
    input is left as it was; two outputs of one command on one path likewise."""
    import onnx

    from provmap.provenance.bundled import zoo

    art = tmp_path / "sq.provmap"
    assert _compile(art).returncode == 0
    before = art.read_bytes()
    one_error(provmap("run", art, "-o", art), "-o/--output", "this command's artifact")
    one_error(provmap("run", art, "--random", "--save-inputs", art), "--save-inputs",
              "this command's artifact")
    one_error(provmap("inspect", art, "--sqlite", art), "--sqlite", "this command's artifact")
    assert art.read_bytes() == before
    model = tmp_path / "m.onnx"
    onnx.save(zoo.resolve("bundled:squeezenet")[0], model)
    m_before = model.read_bytes()
    one_error(provmap("compile", model, "-o", model, "--strategy", "single:onnxruntime"),
              "-o/--output", "this command's model")
    assert model.read_bytes() == m_before
    out = tmp_path / "out.npz"
    one_error(provmap("run", art, "--random", "-o", out, "--save-inputs", out),
              "--save-inputs", "-o/--output", "name the same file")
    assert not out.exists()
