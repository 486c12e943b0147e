"""Issue 36, left from the fourth new-user afternoon (2026-11-26): the model an artifact was
compiled from was still replaced by `annotate -o` and `overlays -o DIR` when it keeps its
weights in an external data file (its file bytes are not the bytes the manifest hashes).
Each case through the real CLI."""

from __future__ import annotations

import hashlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cli_runner import provmap

pytestmark = pytest.mark.usefixtures("own_config")


def _digest(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def _refused(r, *words):
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("provmap: error:"), r.stderr
    for w in words:
        assert w in lines[0], (w, r.stderr)


def _with_external_data(path):
    """MatMul + Relu whose weight lives in `path`.data, as large exports are saved."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((16, 16))
                                .astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
             helper.make_node("Relu", ["y"], ["z"], name="relu")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [1, 16])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 16])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save_model(m, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location=path.name + ".data", size_threshold=0)
    return path


@pytest.fixture
def embedded(tmp_path):
    proj = tmp_path / "proj"
    proj.mkdir()
    model = _with_external_data(proj / "model.onnx")
    art = tmp_path / "a.provmap"
    r = provmap("compile", model, "-o", art, "--strategy", "single:onnxruntime",
                "--embed-model")
    assert r.returncode == 0, r.stderr
    return model, art


def test_annotate_never_replaces_a_source_model_with_external_data(embedded):
    model, art = embedded
    before = _digest(model)
    _refused(provmap("annotate", art, "-o", model), f"-o/--output {model} is the model this "
             "artifact was compiled from")
    assert _digest(model) == before


def test_overlays_never_replaces_the_source_model_in_its_directory(embedded, tmp_path):
    model, art = embedded
    before = _digest(model)
    _refused(provmap("overlays", art, "-o", model.parent), f"{model} is the model this "
             "artifact was compiled from")
    assert _digest(model) == before
    r = provmap("overlays", art, "-o", tmp_path / "ov")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "ov" / "model.onnx").is_file()


@pytest.fixture(scope="module")
def artifact(squeezenet_cli_artifact):
    return squeezenet_cli_artifact


@pytest.mark.parametrize("argv, words", [
    (("report", "{a}", "-o", "{d}/r.html", "--repeats", "50"), "--repeats applies only with "
     "--measure"),
    (("report", "{a}", "-o", "{d}/r.html", "--trust"), "--trust applies only with --measure"),
    (("explain", "{a}", "--model", "{d}/m.onnx"), "--model applies only with --headroom"),
    (("explain", "{a}", "--repeats", "3", "--trust"), "--repeats/--trust apply only with "
     "--headroom"),
])
def test_options_that_act_only_beside_another_are_refused_alone(tmp_path, artifact, argv,
                                                                 words):
    """`report --repeats 50` profiled nothing and `explain --model m.onnx` read nothing, exit 0
    (issue 36's fourth afternoon)."""
    r = provmap(*(str(x).format(a=artifact, d=tmp_path) for x in argv))
    _refused(r, words)
    assert not (tmp_path / "r.html").exists()


def test_revoking_by_too_short_a_prefix_says_so_not_no_such_entry(tmp_path):
    """`trust --revoke 82cf` (the first digits `--list` shows) said "no such entry"."""
    model = _with_external_data(tmp_path / "m.onnx")
    art = tmp_path / "t.provmap"
    assert provmap("compile", model, "-o", art, "--strategy", "single:tvm").returncode == 0
    listed = provmap("trust", "--list").stdout
    digest = listed.splitlines()[1].split()[0]
    _refused(provmap("trust", "--revoke", digest[:4]), "a digest prefix needs at least 8 hex "
             "digits (1 entry starts with it)")
    assert digest in provmap("trust", "--list").stdout
    r = provmap("trust", "--revoke", digest[:8])
    assert r.returncode == 0 and f"revoked {digest}" in r.stdout, r.stderr
