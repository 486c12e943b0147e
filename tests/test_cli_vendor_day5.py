"""Issue 36, left from the fourth new-user afternoon (2026-11-26): the model an artifact was
compiled from was still replaced by `annotate -o` and `overlays -o DIR` when it keeps its
weights in an external data file (its file bytes are not the bytes the manifest hashes).
Each case through the real CLI."""

from __future__ import annotations


import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cli_runner import digest, provmap, refused

pytestmark = pytest.mark.usefixtures("own_config")


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
    before = digest(model)
    refused(provmap("annotate", art, "-o", model), f"-o/--output {model} is the model this "
             "artifact was compiled from")
    assert digest(model) == before


def test_overlays_never_replaces_the_source_model_in_its_directory(embedded, tmp_path):
    model, art = embedded
    before = digest(model)
    refused(provmap("overlays", art, "-o", model.parent), f"{model} is the model this "
             "artifact was compiled from")
    assert digest(model) == before
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
    refused(r, words)
    assert not (tmp_path / "r.html").exists()


def test_revoking_by_too_short_a_prefix_says_so_not_no_such_entry(tmp_path):
    """`trust --revoke 82cf` (the first digits `--list` shows) said "no such entry"."""
    model = _with_external_data(tmp_path / "m.onnx")
    art = tmp_path / "t.provmap"
    assert provmap("compile", model, "-o", art, "--strategy", "single:tvm").returncode == 0
    listed = provmap("trust", "--list").stdout
    entry = listed.splitlines()[1].split()[0]
    refused(provmap("trust", "--revoke", entry[:4]), "a digest prefix needs at least 8 hex "
            "digits (1 entry starts with it)")
    assert entry in provmap("trust", "--list").stdout
    r = provmap("trust", "--revoke", entry[:8])
    assert r.returncode == 0 and f"revoked {entry}" in r.stdout, r.stderr


def test_provmaps_own_trust_list_and_cost_cache_are_never_outputs(tmp_path, artifact):
    """`inspect A --sqlite $PROVMAP_TRUST` replaced the trust list with a map: every locally
    built TVM artifact then refused to run.  The cost cache likewise."""
    import os

    trust = tmp_path / "trusted"
    model = _with_external_data(tmp_path / "m.onnx")
    r = provmap("compile", model, "-o", tmp_path / "t.provmap", "--strategy", "single:tvm")
    assert r.returncode == 0 and trust.is_file(), r.stderr
    before = digest(trust)
    refused(provmap("inspect", artifact, "--sqlite", trust), "trust list (provmap's own")
    refused(provmap("run", artifact, "--random", "-o", trust), "trust list (provmap's own")
    assert digest(trust) == before
    cache = tmp_path / "cost.sqlite"
    cache.write_bytes(b"")  # exists: a command would replace it
    refused(provmap("report", artifact, "-o", cache), "cost cache (provmap's own")
    assert os.path.getsize(cache) == 0


def test_annotate_never_replaces_a_file_that_is_not_an_onnx_model(embedded):
    """`annotate -o weights.bin` replaced the embedded model's own external weights."""
    model, art = embedded
    weights = model.parent / "model.onnx.data"
    before = digest(weights)
    refused(provmap("annotate", art, "-o", weights), "exists and is not an ONNX model")
    assert digest(weights) == before


def test_bisect_refuses_to_compare_a_library_with_itself(tmp_path):
    model = _with_external_data(tmp_path / "m.onnx")
    refused(provmap("bisect", model, "--backend", "openvino", "--reference", "openvino"),
             "are one library")


def test_an_input_that_is_also_an_output_is_named_as_given(tmp_path, artifact):
    """`run A --inputs in.npz --save-inputs in.npz` said "--save-inputs None (it writes ...)"."""
    feeds = tmp_path / "in.npz"
    assert provmap("run", artifact, "--random", "--save-inputs", feeds).returncode == 0
    r = provmap("run", artifact, "--inputs", feeds, "--save-inputs", feeds)
    refused(r, f"--save-inputs {feeds} is this command's --inputs file")


@pytest.mark.parametrize("argv, words", [
    (("run", "{a}", "--inputs", "{d}/in.npz", "--seed", "4"), "--seed applies to random inputs"),
    (("inspect", "{a}", "--json", "--limit", "2"), "--limit trims the text listing"),
    (("compile", "{m}", "-o", "{d}/x.provmap", "--strategy", "single:onnxruntime",
      "--tuning-db", "{d}/db"), "--tuning-db applies to TVM backends"),
    (("compile", "{m}", "-o", "{d}/x.provmap", "--strategy", "single:onnxruntime",
      "--input-shape", "x=\u0664x16"), "dimensions must be integers"),
])
def test_options_that_would_be_ignored_or_misread_are_refused(tmp_path, artifact, argv, words):
    """Each was taken, exit 0: a seed beside --inputs, --limit under --json, --tuning-db with
    no TVM backend, an Arabic-Indic digit read as 4 (issue 36's fifth afternoon)."""
    model = _with_external_data(tmp_path / "m.onnx")
    assert provmap("run", artifact, "--random", "--save-inputs", tmp_path / "in.npz"
                   ).returncode == 0
    r = provmap(*(str(x).format(a=artifact, d=tmp_path, m=model) for x in argv))
    refused(r, words)
    assert not (tmp_path / "x.provmap").exists()


def test_overlays_prints_the_host_it_was_given(tmp_path, artifact):
    r = provmap("overlays", artifact, "-o", tmp_path / "ov", "--model", "bundled:squeezenet",
                "--host", "10.0.0.1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1].endswith("--host 10.0.0.1")


def _qlinear_conv(path):
    """QuantizeLinear -> QLinearConv -> DequantizeLinear: TVM's importer has no QLinearConv."""
    def const(name, value, dtype):
        return numpy_helper.from_array(np.asarray(value, dtype), name)

    inits = [const("s", 0.02, np.float32), const("z", 0, np.uint8),
             const("w", np.ones((2, 1, 1, 1)), np.int8), const("ws", 0.01, np.float32),
             const("wz", 0, np.int8), const("ys", 0.05, np.float32), const("yz", 0, np.uint8)]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="quant"),
             helper.make_node("QLinearConv", ["xq", "s", "z", "w", "ws", "wz", "ys", "yz"],
                              ["yq"], name="qconv"),
             helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"], name="dequant")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [1, 1, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 4])],
                          inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              path)
    return path


def test_bisect_names_the_node_the_backend_refuses(tmp_path):
    """OpenVINO's error about a later node was given as the divergence's place; compile names
    the node the backend does not take, and so does bisect now."""
    model = _qlinear_conv(tmp_path / "q.onnx")
    refused(provmap("bisect", model, "--backend", "tvm"),
             "'qconv' (QLinearConv) is not supported by tvm")


def test_explain_names_the_pin_that_placed_a_partition():
    """explain guessed "it wins through its boundaries" for a node the user had pinned."""
    from provmap.workbench.explain import explain_artifact, format_explain

    region = {"op_ids": ["n4"], "backend": "openvino", "ops": 1, "first": "#4 'n4' (Relu)",
              "searched_ms": 0.068, "greedy_backend": "onnxruntime",
              "alternatives": {"onnxruntime": {"ms": 0.016}, "openvino": {"ms": 0.068}}}
    manifest = {"strategy": "collage", "partitions": [{"id": "p1", "backend": "openvino",
                                                       "ops": ["n4"], "inputs": [],
                                                       "outputs": []}],
                "plan_info": {"collage": {
                    "backends": ["onnxruntime", "openvino"], "explain": [region],
                    "constraint_flags": [{"node": "n4", "kind": "pin",
                                          "flag": "--pin n4=openvino"}]}}}
    row = explain_artifact(manifest)["partitions"][0]
    assert row["verdict"].startswith("placed on openvino by --pin n4=openvino")
    assert row["constraints"] == ["--pin n4=openvino"]
    assert "wins through its boundaries" not in format_explain(explain_artifact(manifest))


def test_run_checks_the_inputs_file_before_loading_the_partitions(tmp_path, artifact):
    """`run --inputs` named a missing input only after 4-10 s of loading OpenVINO/TVM code."""
    bad = tmp_path / "bad.npz"
    np.savez(bad, nope=np.zeros(3, np.float32))
    r = provmap("run", artifact, "--inputs", bad)
    refused(r, "missing input")
    assert "loaded" not in r.stderr


def test_map_takes_a_name_ending_in_json_as_its_prefix(tmp_path):
    """`map M -o out/bert.json` wrote out/bert.json.json and out/bert.json.sqlite."""
    model = _with_external_data(tmp_path / "m.onnx")
    r = provmap("map", model, "-o", tmp_path / "bert.json")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in tmp_path.glob("bert*")) == ["bert.json", "bert.sqlite"]
