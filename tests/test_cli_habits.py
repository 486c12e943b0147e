"""What users bring from Polygraphy, trtexec and tvmc, through the real CLI in a subprocess."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from cli_runner import provmap

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def art(tmp_path_factory):
    """x -> Log -> y: negative inputs give NaN, zero gives -Inf (for the output statistics)."""
    d = tmp_path_factory.mktemp("cli")
    g = helper.make_graph([helper.make_node("Log", ["x"], ["y"], name="log")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(m, d / "log.onnx")
    r = provmap("compile", d / "log.onnx", "-o", d / "log.provmap", "--strategy",
                "single:onnxruntime")
    assert r.returncode == 0, r.stderr
    np.savez(d / "in.npz", x=np.array([-1.0, 0.0, 1.0, np.e], np.float32))
    return d


def test_version():
    r = provmap("--version")
    assert r.returncode == 0 and r.stdout.startswith("provmap ")


def test_run_prints_output_statistics_and_a_latency_summary(art):
    r = provmap("run", art / "log.provmap", "--inputs", art / "in.npz", "--warmup", "2",
                "--iterations", "3", "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    y = s["outputs"]["y"]
    assert (y["nan"], y["inf"]) == (1, 1)
    assert y["min"] == pytest.approx(0.0) and y["max"] == pytest.approx(1.0, rel=1e-6)
    assert s["warmup"] == 2 and len(s["run_ms"]) == 3
    assert s["min_ms"] <= s["median_ms"] <= s["max_ms"]
    text = provmap("run", art / "log.provmap", "--inputs", art / "in.npz").stdout
    assert "NaN 1 Inf 1" in text and "latency over 1 run after" in text


def test_random_and_inputs_together_are_refused(art):
    r = provmap("run", art / "log.provmap", "--random", "--inputs", art / "in.npz")
    assert r.returncode == 2 and "not both" in r.stderr and "Traceback" not in r.stderr


def test_garbage_npz_is_named_as_not_an_npz(art, tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"garbage")
    r = provmap("run", art / "log.provmap", "--inputs", bad)
    assert r.returncode == 2 and "bad.npz: not a valid .npz file" in r.stderr
    assert "Traceback" not in r.stderr


def test_lookup_json_answers_with_an_error_object(art):
    r = provmap("lookup", art / "log.provmap", "--onnx-node", "nosuch", "--json")
    assert r.returncode == 2
    ans = json.loads(r.stdout)  # one object, not a second error object after it
    assert ans["results"] == [] and "nosuch" in ans["error"] and ans["code"] == 2


def test_options_have_help_text():
    from provmap.cli.main import build_parser

    subs = next(a for a in build_parser()._actions if a.dest == "command").choices
    for cmd in ("compile", "run", "inspect", "lookup", "bisect", "compare", "report"):
        for action in subs[cmd]._actions:
            if action.option_strings and action.dest != "help":
                assert action.help, f"provmap {cmd} {action.option_strings[0]} has no help"


def test_default_collage_search_leaves_tvm_out():
    from provmap.partition.compile import DEFAULT_COLLAGE_BACKENDS

    assert "tvm" not in DEFAULT_COLLAGE_BACKENDS
    assert "add tvm" in provmap("compile", "--help").stdout.replace("\n", " ").replace("  ", " ")


@pytest.fixture
def readonly_dir(tmp_path):
    """A directory nobody may create files in: chmod works for users; root bypasses modes, so
    there a kernel directory that refuses new files stands in."""
    import os

    if os.geteuid() != 0:
        d = tmp_path / "ro"
        d.mkdir()
        d.chmod(0o555)
        yield d
        d.chmod(0o755)
    else:
        yield __import__("pathlib").Path("/proc/sys")


@pytest.mark.parametrize("make", ["missing", "truncated", "random", "empty"])
def test_compile_of_a_bad_model_file_is_one_line_naming_it(tmp_path, make):
    from small_models import conv_relu

    path = tmp_path / f"{make}.onnx"
    data = conv_relu().SerializeToString()
    if make == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif make == "random":
        path.write_bytes(np.random.default_rng(0).bytes(200))
    elif make == "empty":
        path.write_bytes(b"")
    r = provmap("compile", path, "-o", tmp_path / "a.provmap", "--strategy", "single:onnxruntime")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("provmap: error:")]
    assert len(lines) == 1 and f"{make}.onnx" in lines[0], r.stderr
    assert not (tmp_path / "a.provmap").exists()


def test_unwritable_outputs_are_refused_before_any_work(art, readonly_dir):
    for args in (("compile", "bundled:squeezenet", "-o", readonly_dir / "a.provmap"),
                 ("map", "bundled:squeezenet", "-o", readonly_dir / "m"),
                 ("run", art / "log.provmap", "--random", "-o", readonly_dir / "o.npz"),
                 ("report", art / "log.provmap", "-o", readonly_dir / "r.html"),
                 ("annotate", art / "log.provmap", "-o", readonly_dir / "a.onnx"),
                 ("profile", art / "log.provmap", "--trace", readonly_dir / "t.json"),
                 ("bisect", "bundled:squeezenet", "--backend", "openvino", "-o",
                  readonly_dir / "repro")):
        r = provmap(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert "Traceback" not in r.stderr and "not writable" in r.stderr, (args, r.stderr)
        assert "imported" not in r.stderr and "loaded" not in r.stderr  # refused first


def test_cache_in_a_missing_directory_is_refused(tmp_path):
    r = provmap("compile", "bundled:transformer", "-o", tmp_path / "a.provmap", "--cache",
                tmp_path / "no" / "such" / "c.sqlite")
    assert r.returncode == 2 and "does not exist" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "no").exists()


def test_locked_cache_is_a_clear_error_the_search_can_go_on_without(tmp_path):
    import sqlite3

    from provmap.partition.measure.cache import CacheLocked, CostCache

    path = tmp_path / "c.sqlite"
    CostCache(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(CacheLocked, match="locked by another process"):
            CostCache(path, busy_timeout_ms=200)
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_bisect_exit_codes_and_hidden_intermediate_divergence(tmp_path, art):
    """Exit 1 on a divergence, as compare.  At zero tolerance SqueezeNet's final Softmax output
    can match while intermediate tensors differ: bisect compares every intermediate, so it
    still finds the first diverging node and writes a reproducer."""
    r = provmap("bisect", "bundled:squeezenet", "--backend", "openvino", "--atol", "0", "--rtol",
                "0", "-o", tmp_path / "repro", "--json")
    assert r.returncode == 1, r.stderr
    res = json.loads(r.stdout)
    assert res["diverges"] and (tmp_path / "repro" / "reproducer.onnx").exists()
    r = provmap("bisect", art / "log.onnx", "--backend", "onnxruntime[optimization=basic]",
                "--inputs",
                art / "in.npz", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["diverges"] is False, r.stderr


def test_explain_on_a_greedy_artifact_says_why_each_node_went_where(tmp_path):
    out = tmp_path / "g.provmap"
    r = provmap("compile", "bundled:squeezenet", "-o", out, "--strategy",
                "greedy:openvino,onnxruntime", "--backend-option", "openvino.exclude_ops=Concat")
    assert r.returncode == 0, r.stderr
    text = provmap("explain", out).stdout
    assert "(Concat) -> onnxruntime because openvino: Concat is excluded by this backend's " \
           "exclude_ops option" in text
    data = json.loads(provmap("explain", out, "--json").stdout)
    declined = [d for p in data["partitions"] for d in p["nodes_declined_elsewhere"]]
    assert len(declined) == 8 and all(d["backend"] == "onnxruntime" for d in declined)


def test_profile_prints_progress(art):
    r = provmap("profile", art / "log.provmap", "--inputs", art / "in.npz", "--repeats", "2")
    assert r.returncode == 0, r.stderr
    assert "profile: 2 end-to-end runs" in r.stderr and "profile: kernels of p0" in r.stderr
