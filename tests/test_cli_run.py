"""run, from the CLI and from Python: output statistics (NaN and Inf counted) and a latency
summary, its timed runs called repeats (the old spellings kept), random inputs by default and
--random taken by every command that runs (but not beside --inputs), random token ids that
cover the table they index; from Python, inputs by name, and an output that is an input is a
copy."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_models import model_file
from cli_runner import provmap
from onnx import TensorProto, helper

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_run_prints_output_statistics_and_a_latency_summary(log_dir):
    r = provmap("run", log_dir / "log.provmap", "--inputs", log_dir / "in.npz", "--warmup", "2",
                "--iterations", "3", "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    y = s["outputs"]["y"]
    assert (y["nan"], y["inf"]) == (1, 1)
    assert y["min"] == pytest.approx(0.0) and y["max"] == pytest.approx(1.0, rel=1e-6)
    assert s["warmup"] == 2 and len(s["run_ms"]) == 3
    assert s["min_ms"] <= s["median_ms"] <= s["max_ms"]
    text = provmap("run", log_dir / "log.provmap", "--inputs", log_dir / "in.npz").stdout
    assert "NaN 1 Inf 1" in text and "latency over 1 run after" in text


def test_run_names_its_timed_runs_repeats_and_keeps_the_old_spellings(log_relu_dir):
    for flag in ("--repeats", "--iterations", "--repeat"):
        r = provmap("run", log_relu_dir / "m.provmap", flag, "3", "--json")
        assert r.returncode == 0, (flag, r.stderr)
        assert len(json.loads(r.stdout)["run_ms"]) == 3
    assert "--repeats" in provmap("run", "--help").stdout
    assert "--iterations" not in provmap("run", "--help").stdout  # hidden alias


def test_random_inputs_are_the_default_and_random_is_accepted_everywhere(log_relu_dir):
    r = provmap("run", log_relu_dir / "m.provmap")  # used to demand --random
    assert r.returncode == 0 and "latency over 1 run after" in r.stdout, r.stderr
    for args in (("run", log_relu_dir / "m.provmap", "--random", "--seed", "3"),
                 ("compare", log_relu_dir / "m.provmap", "--random"),
                 ("profile", log_relu_dir / "m.provmap", "--random", "--repeats", "2")):
        r = provmap(*args)
        assert r.returncode == 0, (args, r.stderr)
    r = provmap("compare", log_relu_dir / "m.provmap", "--random", "--inputs",
                log_relu_dir / "in.npz")
    assert r.returncode == 2 and "not both" in r.stderr


def test_random_and_inputs_together_are_refused(log_dir):
    r = provmap("run", log_dir / "log.provmap", "--random", "--inputs", log_dir / "in.npz")
    assert r.returncode == 2 and "not both" in r.stderr and "Traceback" not in r.stderr


def test_random_token_ids_cover_the_table_they_index(tmp_path):
    """input_ids were always 0 or 1 (two rows of a 100-row embedding) though the manifest
    records the table's size; a mask stays 0/1."""
    import provmap as pm

    model = model_file(tmp_path / "m.onnx",
                       [helper.make_node("Gather", ["E", "ids"], ["e"], name="emb"),
                        helper.make_node("Cast", ["mask"], ["m"], to=TensorProto.FLOAT,
                                         name="cast")],
                       [("ids", TensorProto.INT64, [1, 64]), ("mask", TensorProto.INT64, [1, 64])],
                       [("e", TensorProto.FLOAT, [1, 64, 4]), ("m", TensorProto.FLOAT, [1, 64])],
                       [helper.make_tensor("E", TensorProto.FLOAT, [100, 4], [0.0] * 400)])
    art = tmp_path / "a.provmap"
    assert provmap("compile", model, "-o", art, "--strategy", "single:onnxruntime").returncode == 0
    feeds = pm.load(str(art), runnable=False).random_inputs(0)
    assert feeds["ids"].max() > 1 and feeds["ids"].min() >= 0 and feeds["ids"].max() < 100
    assert set(np.unique(feeds["mask"])) <= {0, 1}


def test_run_from_python_with_a_list_says_it_wants_names(int64_artifact):
    import provmap as pm

    from provmap.provenance.util.errors import ProvmapError

    _d, art, _ = int64_artifact
    with pytest.raises(ProvmapError, match="inputs must map each input name to an array"):
        pm.load(str(art)).run([np.zeros(4, np.int64)])


def test_an_output_that_is_an_input_is_a_copy(tmp_path):
    """run() returned the caller's own array for a graph output that is a graph input: editing
    the result changed the input."""
    import provmap as pm

    model = model_file(tmp_path / "m.onnx", [helper.make_node("Relu", ["x"], ["y"], name="relu")],
                       [("x", TensorProto.FLOAT, [3])],
                       [("y", TensorProto.FLOAT, [3]), ("x", TensorProto.FLOAT, [3])])
    art = tmp_path / "a.provmap"
    assert provmap("compile", model, "-o", art, "--strategy", "single:onnxruntime").returncode == 0
    x = np.array([-1.0, 0.0, 2.0], np.float32)
    out = pm.load(str(art)).run({"x": x})
    out["x"][0] = 42.0
    assert x[0] == -1.0
