"""Issue 36's fourth new-user afternoon (2026-11-26): commands writing several files under one
`-o` (overlays and bisect: a directory; map: a prefix) checked only the name given, so an input
model was overwritten.  Each case through the real CLI."""

from __future__ import annotations

import os

import onnx
import pytest

from cli_runner import digest, provmap, refused
from small_models import conv_relu

pytestmark = pytest.mark.usefixtures("own_config")


@pytest.fixture(scope="module")
def artifact(squeezenet_cli_artifact):
    return squeezenet_cli_artifact


def test_overlays_never_replaces_the_model_it_annotates(tmp_path, artifact):
    proj = tmp_path / "proj"
    proj.mkdir()
    model = proj / "model.onnx"
    onnx.save(conv_relu(), model)                   # refused before the model is read
    before = digest(model)
    r = provmap("overlays", artifact, "-o", proj, "--model", model)
    refused(r, f"{proj} (it writes {model})", "this command's model")
    assert digest(model) == before and sorted(os.listdir(proj)) == ["model.onnx"]


def test_map_never_writes_through_a_link_onto_its_model(tmp_path):
    m = tmp_path / "victim.onnx"
    onnx.save(conv_relu(), m)
    before = digest(m)
    os.symlink("victim.onnx", tmp_path / "evil.json")
    r = provmap("map", m, "-o", tmp_path / "evil")
    refused(r, "evil.json", "this command's model")
    assert digest(m) == before and not (tmp_path / "evil.sqlite").exists()
    # a prefix named like the model writes m.onnx.json and m.onnx.sqlite: not the model
    r = provmap("map", m, "-o", m)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "victim.onnx.json").is_file() and digest(m) == before
    r = provmap("map", m, "-o", m)             # again: both files are named as replaced
    assert r.returncode == 0, r.stderr
    for f in ("victim.onnx.json", "victim.onnx.sqlite"):
        assert f"provmap: {tmp_path / f} existed: replaced" in r.stderr, r.stderr


def test_bisect_never_replaces_its_own_reproducer_input(tmp_path):
    d = tmp_path / "bis"
    d.mkdir()
    onnx.save(conv_relu(), d / "reproducer.onnx")
    before = digest(d / "reproducer.onnx")
    r = provmap("bisect", d / "reproducer.onnx", "--backend", "tvm", "-o", d)
    refused(r, f"{d} (it writes {d / 'reproducer.onnx'})", "this command's model")
    assert digest(d / "reproducer.onnx") == before
    link = tmp_path / "out"
    link.mkdir()
    os.symlink(d / "reproducer.onnx", link / "reproducer.onnx")
    r = provmap("bisect", d / "reproducer.onnx", "--backend", "tvm", "-o", link)
    refused(r, "this command's model")
    assert digest(d / "reproducer.onnx") == before


def test_the_write_itself_refuses_a_file_the_command_reads(tmp_path):
    """The last line of defence (provenance/util/atomic.protect_inputs): whatever path leads to
    an input, an atomic write onto it is refused, and nothing else is touched."""
    from provmap.provenance.util.atomic import protect_inputs, write_bytes_atomic
    from provmap.provenance.util.errors import ProvmapError

    src = tmp_path / "in.onnx"
    src.write_bytes(b"model")
    os.link(src, tmp_path / "hard.onnx")
    protect_inputs([src])
    try:
        with pytest.raises(ProvmapError, match="this command's input"):
            write_bytes_atomic(tmp_path / "hard.onnx", b"x")
        write_bytes_atomic(tmp_path / "other.onnx", b"x")
    finally:
        protect_inputs([])
    assert src.read_bytes() == b"model" and (tmp_path / "other.onnx").read_bytes() == b"x"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_models_external_data_is_an_input_too(tmp_path):
    """`compile m/ext.onnx -o m/ext.bin`, ext.bin being the model's weights, lost the model."""
    from onnx.external_data_helper import convert_model_to_external_data

    m = conv_relu()
    convert_model_to_external_data(m, all_tensors_to_one_file=True, location="ext.bin",
                                   size_threshold=0)
    onnx.save(m, tmp_path / "ext.onnx")
    before = digest(tmp_path / "ext.bin")
    r = provmap("compile", tmp_path / "ext.onnx", "-o", tmp_path / "ext.bin", "--strategy",
                "single:onnxruntime")
    refused(r, "ext.bin is this command's model's external data")
    assert digest(tmp_path / "ext.bin") == before


def test_a_loop_of_links_is_refused_not_replaced(tmp_path, artifact):
    os.symlink("loop2", tmp_path / "loop1")
    os.symlink("loop1", tmp_path / "loop2")
    r = provmap("run", artifact, "--random", "-o", tmp_path / "loop1")
    refused(r, "loop1", "a loop of symbolic links")
    assert os.path.islink(tmp_path / "loop1") and os.path.islink(tmp_path / "loop2")


def test_a_fifo_among_a_directory_outputs_files_is_refused_before_any_is_written(tmp_path):
    d = tmp_path / "bis"
    d.mkdir()
    os.mkfifo(d / "reproducer_expected.npz")
    m = tmp_path / "m.onnx"
    onnx.save(conv_relu(), m)
    r = provmap("bisect", m, "--backend", "tvm", "-o", d)
    refused(r, "reproducer_expected.npz", "special file")
    assert sorted(os.listdir(d)) == ["reproducer_expected.npz"]


def test_someone_elses_sqlite_database_is_not_made_a_trust_list(tmp_path, monkeypatch):
    import sqlite3

    db = tmp_path / "user.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE notes (t TEXT)")
    con.commit()
    con.close()
    before = digest(db)
    monkeypatch.setenv("PROVMAP_TRUST", str(db))
    r = provmap("trust", "--list")
    refused(r, str(db), "not a trust list", "notes")
    assert digest(db) == before


def test_overlays_refuses_a_compare_of_another_artifact(tmp_path, artifact):
    import json

    m = tmp_path / "m.onnx"
    onnx.save(conv_relu(), m)
    other = tmp_path / "other.provmap"
    assert provmap("compile", m, "-o", other, "--strategy", "single:onnxruntime").returncode == 0
    r = provmap("compare", other, "--json", "--model", m)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["artifact_digest"]
    (tmp_path / "cmp.json").write_text(r.stdout)
    r = provmap("overlays", artifact, "--model", "bundled:squeezenet", "-o", tmp_path / "ov",
                "--errors", tmp_path / "cmp.json")
    refused(r, "a compare of another artifact")
    del res["artifact_digest"]                     # an older compare: judged by its tensors
    (tmp_path / "old.json").write_text(json.dumps(res))
    r = provmap("overlays", artifact, "--model", "bundled:squeezenet", "-o", tmp_path / "ov",
                "--errors", tmp_path / "old.json")
    refused(r, "none of its", "a compare of another model")
    assert not (tmp_path / "ov").exists()


def test_counts_are_ascii_and_bounded(artifact):
    """`profile --repeats 99999999999999999999` ran until killed; `threads=٣` (an Arabic-Indic
    digit) passed int()."""
    r = provmap("profile", artifact, "--repeats", "99999999999999999999")
    assert r.returncode == 2 and "from 1 to 1000000" in r.stderr, r.stderr
    r = provmap("run", artifact, "--random", "--repeats", "٣")
    assert r.returncode == 2 and "'٣' is not a whole number" in r.stderr, r.stderr


def test_bisect_names_wrong_input_arrays_and_a_model_with_nothing_to_run(tmp_path):
    import numpy as np
    from onnx import TensorProto, helper

    m = tmp_path / "m.onnx"
    onnx.save(conv_relu(), m)
    np.savez(tmp_path / "idx.npz", idx=np.zeros((1,), np.float32))
    r = provmap("bisect", m, "--backend", "openvino", "--inputs", tmp_path / "idx.npz")
    refused(r, "missing input 'x'", "the model takes x", "given 'idx'")
    const = helper.make_node("Constant", [], ["y"], value=helper.make_tensor(
        "v", TensorProto.FLOAT, [1], [1.0]))
    g = helper.make_graph([const], "g", [], [helper.make_tensor_value_info(
        "y", TensorProto.FLOAT, [1])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
              tmp_path / "c.onnx")
    r = provmap("bisect", tmp_path / "c.onnx", "--backend", "openvino")
    refused(r, "nothing to bisect")


def test_compare_says_which_side_has_the_nan():
    import numpy as np

    from provmap.workbench.compare import Tolerance, metrics

    tol = Tolerance(atol=1e-4, rtol=1e-3, quant_steps=1)
    got = metrics(np.array([0.0, 1.0], np.float32), np.array([np.nan, 1.0], np.float32), tol)
    assert got["problem"] == "the reference has NaN at 1 element(s) where this has none"
    got = metrics(np.array([np.nan, 1.0], np.float32), np.array([0.0, 1.0], np.float32), tol)
    assert got["problem"] == "NaN at 1 element(s) where the reference has none"


@pytest.mark.parametrize("flags", [("--research",), ("--max-size", "3"), ("--no-e2e-check",),
                                   ("--variant", "threads=1"), ("--no-variants",)])
def test_search_flags_under_single_are_refused_not_ignored(tmp_path, flags):
    r = provmap("compile", "bundled:squeezenet", "-o", tmp_path / "a.provmap", "--strategy",
                "single:onnxruntime", *flags)
    refused(r, flags[0], "--strategy collage only")
    assert not (tmp_path / "a.provmap").exists()


@pytest.mark.parametrize("args", [
    ("--strategy", "single:openvino[threads=2;threads=3]"),
    ("--strategy", "single:openvino", "--backend-option", "openvino.threads=2",
     "--backend-option", "openvino.threads=3")])
def test_an_option_given_twice_is_refused_not_the_last_kept(tmp_path, args):
    r = provmap("compile", "bundled:squeezenet", "-o", tmp_path / "a.provmap", *args)
    refused(r, "given twice")
