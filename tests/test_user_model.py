"""The user's model is the reference (issue 25): an artifact records the model as given, and
compare, annotate and --embed-model work with that file, although provmap compiled a derived
copy (input shapes fixed, shape arithmetic folded).  Through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import small_models as sm

from provmap.provenance.ids import model_sha256
from provmap.runtime_module.artifact import read_artifact
from cli_runner import provmap as cli


def _strip(model: onnx.ModelProto) -> bytes:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    del m.metadata_props[:]
    for n in m.graph.node:
        del n.metadata_props[:]
    return m.SerializeToString(deterministic=True)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A TorchScript-style dynamic-batch model compiled with --input-shape: provmap folds its
    Shape -> Gather -> Unsqueeze -> Concat chain and fixes the batch, so it compiles a copy."""
    d = tmp_path_factory.mktemp("user_model")
    onnx.save(sm.dynamic_batch_flatten(), d / "model.onnx")
    r = cli("compile", str(d / "model.onnx"), "-o", str(d / "a.provmap"), "--strategy",
            "greedy:openvino,onnxruntime", "--input-shape", "x=2x3x8x8", "--embed-model")
    assert r.returncode == 0, r.stderr
    return d


def test_the_manifest_records_the_given_model_and_the_derived_one(built):
    info = read_artifact(built / "a.provmap").manifest["model"]
    given = model_sha256(onnx.load(built / "model.onnx"))
    assert info["sha256"] == given
    assert info["derived_sha256"] != given
    assert info["input_shapes_given"] == {"x": [2, 3, 8, 8]}
    assert info["derived"] == ["input shapes fixed (x=2x3x8x8)", "4 node(s) folded to constants"]
    assert info["member_is"] == "original"  # --embed-model stored the user's file, not the copy
    r = cli("inspect", str(built / "a.provmap"))
    assert "derived copy" in r.stdout and "input shapes fixed (x=2x3x8x8)" in r.stdout


def test_compare_takes_the_users_file(built):
    r = cli("compare", str(built / "a.provmap"), "--model", str(built / "model.onnx"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1] == "match"
    assert "derived copy" not in r.stderr


def test_annotate_writes_onto_the_users_file_and_covers_every_node(built):
    src = built / "model.onnx"
    r = cli("annotate", str(built / "a.provmap"), "--model", str(src), "-o",
            str(built / "ann.onnx"), "--json")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["nodes"] == 8 and summary["unannotated"] == 0, summary
    ann, orig = onnx.load(built / "ann.onnx"), onnx.load(src)
    # Only metadata_props differ: the same nodes in the same order, symbolic batch kept.
    assert _strip(ann) == _strip(orig)
    assert ann.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"
    props = {n.name: {p.key: p.value for p in n.metadata_props} for n in ann.graph.node}
    assert props["/conv/Conv"]["provmap.backend"] == "openvino"
    assert props["/fc/Gemm"]["provmap.partition"] == "p0"
    for folded in ("/Shape", "/Gather", "/Unsqueeze"):
        assert "folded to a constant before import" in props[folded]["provmap.reason"]
        assert "provmap.backend" not in props[folded]
    # The embedded model is the user's too: annotate needs no --model.
    r = cli("annotate", str(built / "a.provmap"), "-o", str(built / "ann2.onnx"))
    assert r.returncode == 0, r.stderr
    assert _strip(onnx.load(built / "ann2.onnx")) == _strip(orig)


def test_the_derived_copy_is_accepted_and_named(built, tmp_path):
    from provmap.partition.compile import compile_model
    from provmap.partition.model_source import load_view

    view = load_view(built / "model.onnx", input_shapes={"x": (2, 3, 8, 8)})
    onnx.save(view.model, tmp_path / "derived.onnx")
    r = cli("compare", str(built / "a.provmap"), "--model", str(tmp_path / "derived.onnx"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "is provmap's derived copy of the model (input shapes fixed (x=2x3x8x8)" in r.stderr
    # A view alone has no other copy: embedded, it is recorded as the derived one.
    art = compile_model(view, "single:onnxruntime", out=tmp_path / "v.provmap", embed_model=True)
    assert art.manifest["model"]["member_is"] == "derived"


def test_another_model_is_refused_naming_both_hashes(built, tmp_path):
    other = sm.dynamic_batch_flatten()
    other.graph.initializer[0].float_data[:] = []
    other.graph.initializer[0].raw_data = bytes(len(other.graph.initializer[0].raw_data))
    onnx.save(other, tmp_path / "other.onnx")
    r = cli("compare", str(built / "a.provmap"), "--model", str(tmp_path / "other.onnx"))
    assert r.returncode == 2
    line = r.stderr.strip().splitlines()[-1]
    assert "is not the model this artifact was compiled from" in line
    assert "its derived copy's" in line and "Traceback" not in r.stderr


def test_a_model_onnx_runtime_reads_only_after_normalizing_is_still_the_users(tmp_path):
    """Nodes out of order (ORT's fp16 converter writes them so) and a -1 batch (paddle2onnx):
    provmap sorts and reads -1 as symbolic, and the file as given stays the reference."""
    m = sm.dynamic_batch_flatten()
    nodes = list(m.graph.node)
    del m.graph.node[:]
    m.graph.node.extend(reversed(nodes))
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = -1
    onnx.save(m, tmp_path / "model.onnx")
    art = tmp_path / "a.provmap"
    r = cli("compile", str(tmp_path / "model.onnx"), "-o", str(art), "--strategy",
            "single:onnxruntime", "--input-shape", "x=3x3x8x8")
    assert r.returncode == 0, r.stderr
    info = read_artifact(art).manifest["model"]
    assert info["sha256"] == model_sha256(onnx.load(tmp_path / "model.onnx"))
    assert info["derived"][0].startswith("normalized as ONNX Runtime reads it")
    r = cli("compare", str(art), "--model", str(tmp_path / "model.onnx"))
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == "match", r.stdout + r.stderr
    r = cli("annotate", str(art), "--model", str(tmp_path / "model.onnx"), "-o",
            str(tmp_path / "ann.onnx"), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["unannotated"] == 0, r.stdout + r.stderr
    ann = onnx.load(tmp_path / "ann.onnx")
    assert _strip(ann) == _strip(onnx.load(tmp_path / "model.onnx"))  # still in the user's order
    assert ann.graph.node[0].name == "/fc/Gemm"


TORCHSCRIPT = Path(__file__).parent / "data" / "torchscript_attention_dynamic.onnx"


@pytest.mark.parametrize("strategy", ["single:onnxruntime", "greedy:openvino,onnxruntime"])
def test_a_real_torchscript_export_is_its_own_reference(tmp_path, strategy):
    """A real TorchScript export (tests/data/make_torchscript_attention.py): dynamic batch and
    sequence, every view a Shape -> Gather -> Unsqueeze -> Concat chain.  Compiled with
    --input-shape, provmap folds the chains; the export itself stays the reference."""
    art = tmp_path / "a.provmap"
    r = cli("compile", str(TORCHSCRIPT), "-o", str(art), "--strategy", strategy,
            "--input-shape", "x=2x5x16")
    assert r.returncode == 0, r.stderr
    info = read_artifact(art).manifest["model"]
    assert any("folded to constants" in d for d in info["derived"]), info["derived"]
    r = cli("compare", str(art), "--model", str(TORCHSCRIPT))
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == "match", r.stdout + r.stderr
    r = cli("annotate", str(art), "--model", str(TORCHSCRIPT), "-o", str(tmp_path / "ann.onnx"),
            "--json")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["unannotated"] == 0 and summary["nodes"] == 69, summary
    assert summary["with_reason"] > 0  # the folded shape arithmetic says so
    ann = onnx.load(tmp_path / "ann.onnx")
    assert _strip(ann) == _strip(onnx.load(TORCHSCRIPT))
    reasons = {p.value for n in ann.graph.node for p in n.metadata_props
               if p.key == "provmap.reason"}
    assert any("folded" in why for why in reasons), reasons
    # The artifact computes what ONNX Runtime computes on the export itself.
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 5, 16)).astype(np.float32)}
    np.savez(tmp_path / "in.npz", **feeds)
    r = cli("run", str(art), "--inputs", str(tmp_path / "in.npz"), "-o", str(tmp_path / "o.npz"))
    assert r.returncode == 0, r.stderr
    want = ort.InferenceSession(str(TORCHSCRIPT), providers=["CPUExecutionProvider"]).run(
        None, feeds)[0]
    np.testing.assert_allclose(np.load(tmp_path / "o.npz")["y"], want, rtol=1e-3, atol=1e-4)
