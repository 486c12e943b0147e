"""provmap in NVIDIA's Polygraphy (issue 27), with the real `polygraphy` command: the plugin
(`polygraphy run MODEL --onnxrt --provmap ART`, found through provmap's
`polygraphy.run.plugins` entry point) and RunResults files from `provmap run --save-outputs`.

A partition is made to diverge with tests/crashing_backend.py's PerturbingBackend (ONNX
Runtime, 0.1 added to every output), registered as the `perturbed` backend through a real
`provmap.backends` entry point (a dist-info directory on PYTHONPATH), so that the polygraphy
process, which loads the artifact itself, finds it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cli_runner import provmap as cli

pytest.importorskip("polygraphy", reason="the [polygraphy] extra (tests/run installs it)")

TESTS = Path(__file__).resolve().parent
MODEL = TESTS / "data" / "torchscript_attention_dynamic.onnx"


def polygraphy(*args, env=None) -> subprocess.CompletedProcess:
    exe = shutil.which("polygraphy", path=str(Path(sys.executable).parent))
    assert exe, "the polygraphy command is not next to this Python (pip install '.[polygraphy]')"
    return subprocess.run([exe, *map(str, args)], capture_output=True, text=True, timeout=600,
                          env=env)


@pytest.fixture(scope="module")
def perturbed_env(tmp_path_factory):
    """The environment of a process that finds the `perturbed` backend by its entry point."""
    site = tmp_path_factory.mktemp("site")
    d = site / "provmap_test_backends-0.1.dist-info"
    d.mkdir()
    (d / "METADATA").write_text("Metadata-Version: 2.1\nName: provmap-test-backends\nVersion: 0.1\n")
    (d / "entry_points.txt").write_text(
        "[provmap.backends]\nperturbed = crashing_backend:PerturbingBackend\n")
    env = dict(os.environ)
    # No empty entry: it would put the working directory on sys.path, and a checkout's stale
    # provmap.egg-info there hides the installed entry points (importlib keeps the first).
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(site), str(TESTS),
                                                    env.get("PYTHONPATH", "")] if p)
    return env


@pytest.fixture(scope="module")
def arts(tmp_path_factory, perturbed_env):
    """The export split three ways (OpenVINO, ONNX Runtime for the Softmax, OpenVINO), and the
    same split with the Softmax's partition on the perturbed backend."""
    d = tmp_path_factory.mktemp("polygraphy")
    for name, strategy in (("good", "greedy:openvino,onnxruntime"),
                           ("bad", "greedy:openvino,perturbed")):
        r = cli("compile", MODEL, "-o", d / f"{name}.provmap", "--strategy", strategy,
                "--backend-option", "openvino.exclude_ops=Softmax", "--input-shape", "x=2x5x16",
                env=perturbed_env)
        assert r.returncode == 0, r.stderr
    return d


def test_the_plugin_compares_a_real_export_with_onnx_runtime_in_one_command(arts, perturbed_env):
    r = polygraphy("run", MODEL, "--onnxrt", "--provmap", arts / "good.provmap",
                   "--input-shapes", "x:[2,5,16]", env=perturbed_env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = r.stdout + r.stderr
    assert "provmap-runner" in out and "PASSED | simple | All outputs matched" in out, out[-3000:]


def test_the_plugin_fails_when_a_partition_diverges(arts, perturbed_env):
    from provmap.runtime_module.artifact import read_artifact

    parts = read_artifact(arts / "bad.provmap").manifest["partitions"]
    assert "perturbed" in {p["backend"] for p in parts}
    r = polygraphy("run", MODEL, "--onnxrt", "--provmap", arts / "bad.provmap",
                   "--input-shapes", "x:[2,5,16]", env=perturbed_env)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out[-3000:]
    assert "FAILED | Output: 'y'" in out and "Traceback" not in out, out[-3000:]


@pytest.mark.parametrize("which, ok", [("good", True), ("bad", False)])
def test_run_results_files_are_what_polygraphy_loads(arts, perturbed_env, tmp_path, which, ok):
    """`provmap run --save-inputs in.json --save-outputs out.json`, then Polygraphy runs ONNX
    Runtime on the same inputs and compares with the saved outputs."""
    r = cli("run", arts / f"{which}.provmap", "--save-inputs", tmp_path / "in.json",
            "--save-outputs", tmp_path / "out.json", env=perturbed_env)
    assert r.returncode == 0, r.stderr
    r = polygraphy("run", MODEL, "--onnxrt", "--load-inputs", tmp_path / "in.json",
                   "--load-outputs", tmp_path / "out.json", env=perturbed_env)
    out = r.stdout + r.stderr
    assert (r.returncode == 0) == ok, out[-3000:]
    assert f"provmap-runner-{which}.provmap" in out  # the saved runner, compared by name
    assert ("PASSED | simple | All outputs matched" in out) == ok, out[-3000:]


def test_the_npz_outputs_stay_as_they_were(arts, tmp_path):
    import numpy as np

    r = cli("run", arts / "good.provmap", "-o", tmp_path / "o.npz", "--save-inputs",
            tmp_path / "i.npz")
    assert r.returncode == 0, r.stderr
    assert set(np.load(tmp_path / "o.npz")) == {"y"} and set(np.load(tmp_path / "i.npz")) == {"x"}


def test_an_unwritable_run_results_file_is_refused_before_the_run(arts):
    r = cli("run", arts / "good.provmap", "--save-outputs", "/proc/out.json")
    assert r.returncode == 2 and "not writable" in r.stderr and "Traceback" not in r.stderr
    assert "loaded" not in r.stderr


def test_a_missing_artifact_is_one_line_not_a_traceback(tmp_path, perturbed_env):
    r = polygraphy("run", MODEL, "--onnxrt", "--provmap", tmp_path / "gone.provmap",
                   "--input-shapes", "x:[2,5,16]", env=perturbed_env)
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "Traceback" not in out, out[-3000:]
    assert f"[!] provmap: {tmp_path / 'gone.provmap'}: no such artifact" in out, out[-3000:]
