"""What users bring from Polygraphy, trtexec and tvmc, through the real CLI in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def provmap(*args):
    return subprocess.run([sys.executable, "-m", "partition.cli", *map(str, args)],
                          capture_output=True, text=True)


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
    assert "NaN 1 Inf 1" in text and "latency over 1 iteration(s)" in text


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
    ans = json.loads(r.stdout)
    assert ans["results"] == [] and "nosuch" in ans["error"]


def test_options_have_help_text():
    from partition.cli import build_parser

    subs = next(a for a in build_parser()._actions if a.dest == "command").choices
    for cmd in ("compile", "run", "inspect", "lookup", "bisect", "compare", "report"):
        for action in subs[cmd]._actions:
            if action.option_strings and action.dest != "help":
                assert action.help, f"provmap {cmd} {action.option_strings[0]} has no help"


def test_default_collage_search_leaves_tvm_out():
    from partition.compile import DEFAULT_COLLAGE_BACKENDS

    assert "tvm" not in DEFAULT_COLLAGE_BACKENDS
    assert "add tvm" in provmap("compile", "--help").stdout.replace("\n", " ").replace("  ", " ")
