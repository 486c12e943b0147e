"""Issue 36's seventh new-user afternoon, through the real CLI: OpenVINO's int64 computed in
32 bits, a precision only the blob records, and names that reached the terminal raw."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from attack_kit import members, repack
from onnx import TensorProto, helper

from cli_runner import one_error, provmap, refused


def _int_model(path, dtype=TensorProto.INT64):
    """y = x + 1 and c = concat(x, x): arithmetic and pure data movement, both narrowed."""
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "one"], ["y"], name="add"),
         helper.make_node("Concat", ["x", "x"], ["c"], axis=0, name="cat")], "g",
        [helper.make_tensor_value_info("x", dtype, [4])],
        [helper.make_tensor_value_info("y", dtype, [4]),
         helper.make_tensor_value_info("c", dtype, [8])],
        [helper.make_tensor("one", dtype, [1], [1])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              path)
    return path


@pytest.fixture(scope="module")
def int64_artifact(tmp_path_factory):
    d = tmp_path_factory.mktemp("i64")
    model = _int_model(d / "i64.onnx")
    art = d / "i64.provmap"
    r = provmap("compile", model, "-o", art, "--strategy", "single:openvino")
    assert r.returncode == 0, r.stderr
    return d, art, r.stderr


def test_openvino_int64_arithmetic_is_named_at_compile(int64_artifact):
    _d, _art, stderr = int64_artifact
    assert ("note: p0 (openvino): OpenVINO's CPU plugin computes int64 in 32 bits: Add 'add': "
            "results past 2**31 wrap") in stderr, stderr
    assert "Concat" not in stderr  # moving data cannot leave the range its inputs are in


@pytest.mark.parametrize("dtype, big, narrow", [(np.int64, 2 ** 40, "int32"),
                                                (np.int64, -(2 ** 35), "int32"),
                                                (np.uint64, 2 ** 40 + 1, "uint32")])
def test_an_input_openvino_would_narrow_is_refused_not_wrapped(tmp_path, dtype, big, narrow):
    """x + 1 on 2**40 came back 1 and Concat gave 0 for it, exit 0 (plain OpenVINO does the
    same); values inside 32 bits run and are right."""
    tp = TensorProto.INT64 if dtype is np.int64 else TensorProto.UINT64
    art = tmp_path / "a.provmap"
    assert provmap("compile", _int_model(tmp_path / "m.onnx", tp), "-o", art, "--strategy",
                   "single:openvino").returncode == 0
    np.savez(tmp_path / "big.npz", x=np.array([1, 2, big, 3], dtype))
    r = provmap("run", art, "--inputs", tmp_path / "big.npz", "-o", tmp_path / "out.npz")
    one_error(r, "partition p0 (openvino)", f"input 'x' holds {big}, outside {narrow}",
              "in 32 bits")
    assert not (tmp_path / "out.npz").exists()
    x = np.array([1, 2, 2 ** 31 - 2, 3], dtype)
    np.savez(tmp_path / "ok.npz", x=x)
    r = provmap("run", art, "--inputs", tmp_path / "ok.npz", "-o", tmp_path / "out.npz")
    assert r.returncode == 0, r.stderr
    out = np.load(tmp_path / "out.npz")
    np.testing.assert_array_equal(out["y"], x + 1)
    np.testing.assert_array_equal(out["c"], np.concatenate([x, x]))


def test_a_precision_only_the_blob_records_is_refused(int64_artifact, tmp_path):
    """partitions[i].blob_meta.precision = bf16 ran bf16 while inspect showed the backend's
    options (f32): no member changed, so no hash caught it."""
    _d, art, _ = int64_artifact
    manifest, files = members(art)
    manifest["partitions"][0]["blob_meta"]["precision"] = "bf16"
    bad = repack(tmp_path / "bad.provmap", manifest, files)
    for argv in (["inspect", bad], ["run", bad, "--random"]):
        refused(provmap(*argv), "partitions[0].blob_meta.precision",
                "'bf16' differs from backends.openvino.options (f32)")


NASTY = "/Mul\nok   p0 openvino    k2 (from /Cast): max abs 0\x1b[31mRED"


@pytest.fixture(scope="module")
def nasty_names(tmp_path_factory):
    d = tmp_path_factory.mktemp("names")
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["a"], name="relu"),
         helper.make_node("Mul", ["a", "a"], ["y"], name=NASTY)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = d / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              model)
    art = d / "a.provmap"
    r = provmap("compile", model, "-o", art, "--strategy", "single:openvino", "--embed-model")
    assert r.returncode == 0, r.stderr
    return d, model, art


@pytest.mark.parametrize("argv", [
    ["compare", "{a}", "--seed", "1"],
    ["inspect", "{a}"],
    ["bisect", "{m}", "--backend", "openvino", "-o", "{d}/bis", "--seed", "1"],
])
def test_names_never_drive_the_terminal_nor_forge_a_line(nasty_names, argv):
    """compare and bisect printed an embedded model's node name raw (ESC recoloured the
    terminal, its newline forged an "ok" line under a FAIL); inspect and lookup escaped the
    ESC but kept the newline as a line break."""
    d, model, art = nasty_names
    r = provmap(*[a.format(a=art, m=model, d=d) for a in argv])
    assert r.returncode in (0, 1), r.stderr
    for stream in (r.stdout, r.stderr):
        assert "\x1b" not in stream
        assert not any(ln.startswith("ok   p0 openvino    k2") for ln in stream.splitlines())


def _saved(tmp_path, nodes, inputs, outputs, value_info=(), initializer=(), ir=8):
    def info(triples):
        return [helper.make_tensor_value_info(*t) for t in triples]

    g = helper.make_graph(nodes, "g", info(inputs), info(outputs), list(initializer),
                          value_info=info(value_info))
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=ir),
              path)
    return path


def test_value_info_declaring_another_dtype_is_refused_at_compile(tmp_path):
    """Compiled and run with only the shape warned about; ORT refuses the file, so compare
    then failed on its reference."""
    model = _saved(tmp_path, [helper.make_node("Relu", ["x"], ["a"], name="relu"),
                              helper.make_node("Sigmoid", ["a"], ["y"], name="sig")],
                   [("x", TensorProto.FLOAT, [1, 4])], [("y", TensorProto.FLOAT, [1, 4])],
                   value_info=[("a", TensorProto.DOUBLE, [1, 4])])
    r = provmap("compile", model, "-o", tmp_path / "a.provmap", "--strategy", "single:onnxruntime")
    one_error(r, "tensor 'a' is declared float64 in value_info but the model computes float32 "
                 "(by Relu 'relu')")
    assert not (tmp_path / "a.provmap").exists()


def test_an_overridable_initializer_is_said_to_be_frozen(tmp_path):
    model = _saved(tmp_path, [helper.make_node("Add", ["x", "bias"], ["y"], name="add")],
                   [("x", TensorProto.FLOAT, [2]), ("bias", TensorProto.FLOAT, [2])],
                   [("y", TensorProto.FLOAT, [2])],
                   initializer=[helper.make_tensor("bias", TensorProto.FLOAT, [2], [1, 1])])
    art = tmp_path / "a.provmap"
    r = provmap("compile", model, "-o", art, "--strategy", "single:onnxruntime")
    assert r.returncode == 0 and "graph input(s) 'bias' also have an initializer" in r.stderr, \
        r.stderr
    assert "'bias' also have an initializer" in provmap("inspect", art).stdout


def test_an_artifact_without_outputs_is_refused(int64_artifact, tmp_path):
    """`run` wrote an empty .npz, exit 0."""
    _d, art, _ = int64_artifact
    manifest, files = members(art)
    manifest["model"]["outputs"] = []
    bad = repack(tmp_path / "bad.provmap", manifest, files)
    refused(provmap("run", bad, "--random", "-o", tmp_path / "o.npz"), "model.outputs: empty")
    assert not (tmp_path / "o.npz").exists()


def test_polygraphy_inputs_json_fed_back_says_what_to_use(int64_artifact, tmp_path):
    _d, art, _ = int64_artifact
    (tmp_path / "in.json").write_text('[{"x": {"array": "..."}}]')
    refused(provmap("run", art, "--inputs", tmp_path / "in.json"),
            "a JSON file", "--save-inputs FILE.npz")


def test_an_empty_model_has_node_states_in_words(tmp_path):
    model = _saved(tmp_path, [], [("x", TensorProto.FLOAT, [2])], [("x", TensorProto.FLOAT, [2])])
    art = tmp_path / "a.provmap"
    r = provmap("compile", model, "-o", art, "--strategy", "single:onnxruntime")
    if r.returncode == 0:
        assert "node states: no nodes" in provmap("inspect", art).stdout
    else:  # refused at compile is as good: one line, nothing written
        one_error(r)
        assert not art.exists()


def test_run_from_python_with_a_list_says_it_wants_names(int64_artifact):
    import provmap as pm

    from provmap.provenance.util.errors import ProvmapError

    _d, art, _ = int64_artifact
    with pytest.raises(ProvmapError, match="inputs must map each input name to an array"):
        pm.load(str(art)).run([np.zeros(4, np.int64)])


def test_tvms_python_log_lines_stay_off_the_terminal():
    from provmap.cli.native_log import _NATIVE

    assert _NATIVE.match(b"2026-11-27 08:18:43.427 WARNING Cannot connect to tracker "
                         b"('127.0.0.1', 1), retry in 5 secs...")
    assert not _NATIVE.match(b"provmap: error: 2026-11-27 is no tracker")
