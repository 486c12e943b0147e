"""Partition and source models that would read this machine's files (issue 33's attack corpus,
hashes recomputed so the artifact verifies): external data in an initializer, a Constant, a
sparse initializer, a subgraph, a model-local function or its attribute default, training_info,
the embedded source model; and an OpenVINO partition whose model.xml is an ONNX model with
external data or an XML document with entities.  Each is refused, and nothing is read: the
victim's file never reaches the outputs, trusted or not."""

from __future__ import annotations

import json

import numpy as np
import pytest
from attack_kit import external, members, repack, stealing_model
from cli_runner import one_error, provmap
from onnx import TensorProto, helper

from provmap.provenance.util.errors import ProvmapError
from provmap.runtime_module.artifact import read_artifact
from provmap.runtime_module.module import load

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
SECRET = np.array([1.5, -2.0, 3.25, 4.0], np.float32).tobytes()


def _with_model(src, dst, model_bytes, **options):
    manifest, files = members(src)
    files["partitions/p0/model.onnx"] = model_bytes
    if options:
        manifest["backends"]["onnxruntime"]["options"] = options
    return repack(dst, manifest, files)


def _zeros(d):
    np.savez(d / "zeros.npz", x=np.zeros(4, np.float32))
    return d / "zeros.npz"


# -- ONNX models that refer to external data -------------------------------------------------

def test_external_data_in_a_partition_is_refused_and_nothing_is_read(relu_art, tmp_path):
    """The finding: ORT resolves external data against the working directory, so `run` in the
    victim's home put the bytes of a file of theirs into the outputs."""
    art = _with_model(relu_art, tmp_path / "steal.provmap", stealing_model(),
                      optimization="disable")
    (tmp_path / "secret.bin").write_bytes(SECRET)
    r = provmap("run", art, "--inputs", _zeros(tmp_path), "-o", tmp_path / "out.npz",
                cwd=tmp_path)
    one_error(r, "partitions/p0/model.onnx", "external data", "secret.bin")
    assert not (tmp_path / "out.npz").exists()


def test_external_data_in_a_function_attribute_default_is_refused_by_run(relu_art, tmp_path):
    """Issue 52: a model-local function whose attribute default (`attribute_proto`) is a tensor
    of `.ssh/id_rsa`, taken by a Constant through `ref_attr_name`, ORT's optimizer off: `run`
    in the victim's home exited 0 with the key's first 16 bytes in the outputs, because the
    guard walked a list of places and that one was not on it."""
    art = _with_model(relu_art, tmp_path / "received.provmap",
                      stealing_model("function_default", ".ssh/id_rsa"), optimization="disable")
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "id_rsa").write_bytes(SECRET + b"-----END KEY-----")
    r = provmap("run", art, "--inputs", _zeros(tmp_path), "-o", tmp_path / "out.npz",
                cwd=tmp_path)
    one_error(r, "received.provmap: partitions/p0/model.onnx: refused: "
                 "functions[0].attribute_proto[0].t: tensor 'w' refers to external data "
                 "'.ssh/id_rsa'")
    assert not (tmp_path / "out.npz").exists()


@pytest.mark.parametrize("where", ["constant", "sparse", "subgraph", "function",
                                   "function_default"])
def test_external_data_anywhere_in_the_model_is_refused_at_load(relu_art, tmp_path,
                                                                 monkeypatch, where):
    art = _with_model(relu_art, tmp_path / "steal.provmap", stealing_model(where))
    (tmp_path / "secret.bin").write_bytes(SECRET)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ProvmapError, match="refers to external data 'secret.bin'"):
        load(art, trust=True)  # trusted or not: never read


def test_external_data_in_training_info_is_refused_too(relu_art, tmp_path, monkeypatch):
    """training_info's graphs hold initializers as well; ORT skips them today, but the rule is
    "no external reference anywhere", not "none ORT happens to read"."""
    from provmap.runtime_module.module import load

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    model.training_info.add().initialization.CopyFrom(
        helper.make_graph([], "init", [], [], [external("w", "secret.bin")]))
    manifest, files = members(relu_art)
    files["partitions/p0/model.onnx"] = model.SerializeToString()
    bad = repack(tmp_path / "ti.provmap", manifest, files)
    (tmp_path / "secret.bin").write_bytes(bytes(16))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ProvmapError, match="training_info.*refers to external data 'secret.bin'"):
        load(bad).run({"x": np.zeros(4, np.float32)})


def test_external_data_in_the_embedded_source_model_is_refused(relu_art, tmp_path):
    manifest, files = members(relu_art)
    files["source/model.onnx"] = stealing_model()
    manifest["model"]["member"] = "source/model.onnx"
    art = repack(tmp_path / "src.provmap", manifest, files)
    with pytest.raises(ProvmapError, match="source/model.onnx: refused: .*external data"):
        read_artifact(art).resolve_model()


# -- OpenVINO sniffs the format of model.xml: ONNX too, with its external data ----------------

def _as_openvino(src, dst, xml: bytes):
    """The Relu artifact turned into an OpenVINO one whose model.xml is `xml` (no OpenVINO
    needed to build it: only Artifact.blob, what every load goes through, is exercised)."""
    manifest, files = members(src)
    p = manifest["partitions"][0]
    del files["partitions/p0/model.onnx"]
    files["partitions/p0/model.xml"], files["partitions/p0/model.bin"] = xml, b""
    p["backend"], p["files"] = "openvino", {"partitions/p0/model.xml": "",
                                            "partitions/p0/model.bin": ""}
    p["type_key"] = "provmap.openvino"
    manifest["backends"] = {"openvino": {"name": "openvino", "options": {}, "version": "x"}}
    manifest["strategy"] = "single:openvino"
    pmap = json.loads(files["map.json"])
    for k in pmap["kernels"]:  # its kernels are OpenVINO's too
        k["backend"] = "openvino"
    files["map.json"] = json.dumps(pmap).encode()
    return repack(dst, manifest, files)


def _onnx_reading(location: str) -> bytes:
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="add")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
                          [external("w", location)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=8).SerializeToString()


_IR = (b'<?xml version="1.0"?>\n<net name="g" version="11"><layers/><edges/></net>\n')


@pytest.mark.parametrize("xml,why", [
    # Measured: `provmap run` in the directory holding secret.bin added its bytes to x.
    (_onnx_reading("secret.bin"), "not an OpenVINO IR"),
    (b'<?xml version="1.0"?>\n<!DOCTYPE net [<!ENTITY e SYSTEM "file:///etc/passwd">]>\n'
     b'<net name="&e;" version="11"/>', "without a document type"),
    (b"<model/>", "expected <net>"),
])
def test_openvino_model_xml_must_be_an_ir(relu_art, tmp_path, monkeypatch, xml, why):
    bad = _as_openvino(relu_art, tmp_path / "ov.provmap", xml)
    (tmp_path / "secret.bin").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ProvmapError, match=f"partitions/p0/model.xml: refused: .*{why}"):
        read_artifact(bad).blob("p0")


def test_an_openvino_ir_passes_the_check(relu_art, tmp_path):
    blob = read_artifact(_as_openvino(relu_art, tmp_path / "ov.provmap", _IR)).blob("p0")
    assert blob.files["model.xml"] == _IR


# -- provmap's own layout of a partition past 2 GB: model.onnx + model.data -------------------

@pytest.mark.parametrize("location, offset, why", [
    ("model.data", 0, None),                 # provmap's layout: allowed, reads its own member
    ("secret.bin", 0, "secret.bin"),         # any other file: refused as ever
    ("../model.data", 0, "../model.data"),   # not exactly the member's name
    ("model.onnx", 0, "model.onnx"),         # the partition's graph itself
    ("model.data", 8, "model.data"),         # past the member's end
])
def test_a_split_partition_may_name_only_its_own_model_data(relu_art, tmp_path, location,
                                                           offset, why):
    """backends/ort_blob.py: an ONNX Runtime partition past protobuf's 2 GB keeps its weights
    in its own `model.data`; a stranger's artifact may use that layout, and nothing else."""
    w = external("w", location)
    w.external_data[1].value = str(offset)
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="add")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], [w])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    manifest, files = members(relu_art)
    files["partitions/p0/model.onnx"] = model.SerializeToString()
    files["partitions/p0/model.data"] = np.full(4, 2.0, np.float32).tobytes()
    manifest["partitions"][0]["files"]["partitions/p0/model.data"] = ""  # hashed by repack
    (tmp_path / "secret.bin").write_bytes(SECRET)
    art = repack(tmp_path / "split.provmap", manifest, files)
    r = provmap("run", art, "--inputs", _zeros(tmp_path), "-o", tmp_path / "out.npz",
                cwd=tmp_path)
    if why is None:
        assert r.returncode == 0, r.stderr
        np.testing.assert_array_equal(np.load(tmp_path / "out.npz")["y"], np.full(4, 2.0))
    else:
        one_error(r, "partitions/p0/model.onnx", "external data", why)
        assert not (tmp_path / "out.npz").exists()
