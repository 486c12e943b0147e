"""overlays (the node data Model Explorer shows over the user's model), through the real CLI: an
--errors file from a compare of another artifact or model is refused, and the command it prints
to open the overlays keeps the --host it was given.  Model Explorer itself rendering them is in
test_model_explorer.py; overlays never replacing the model it annotates, in
test_cli_outputs_keep_inputs.py."""

from __future__ import annotations

import onnx
import pytest
from cli_runner import provmap, refused
from small_models import conv_relu

pytestmark = pytest.mark.usefixtures("own_config")


@pytest.fixture(scope="module")
def artifact(squeezenet_cli_artifact):
    return squeezenet_cli_artifact


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


def test_overlays_prints_the_host_it_was_given(tmp_path, artifact):
    r = provmap("overlays", artifact, "-o", tmp_path / "ov", "--model", "bundled:squeezenet",
                "--host", "10.0.0.1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1].endswith("--host 10.0.0.1")
