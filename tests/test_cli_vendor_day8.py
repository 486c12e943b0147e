"""Issue 36's eighth new-user afternoon, through the real CLI: an int64 constant OpenVINO would
narrow, float16 judged at float32's tolerance, model-local functions, and OpenVINO as the
reference of a model with an unused input."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from cli_runner import one_error, provmap


def _save(path, nodes, inputs, outputs, initializer=(), functions=(), opsets=()):
    def info(triples):
        return [helper.make_tensor_value_info(*t) for t in triples]

    g = helper.make_graph(nodes, "g", info(inputs), info(outputs), list(initializer))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), *opsets],
                          ir_version=8, functions=list(functions))
    onnx.save(m, path)
    return path


def _ort(model, feeds):
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def test_an_int64_constant_outside_32_bits_stays_off_openvino(tmp_path):
    """Concat(x, [2**40 + 5, -2**35]) on OpenVINO gave [.., 2147483647, -2147483648], exit 0,
    with no note: a constant is known at compile time."""
    model = _save(tmp_path / "m.onnx", [helper.make_node("Concat", ["x", "C"], ["z"], axis=0,
                                                         name="cat")],
                  [("x", TensorProto.INT64, [2])], [("z", TensorProto.INT64, [4])],
                  [helper.make_tensor("C", TensorProto.INT64, [2], [2 ** 40 + 5, -2 ** 35])])
    one_error(provmap("compile", model, "-o", tmp_path / "ov.provmap", "--strategy",
                      "single:openvino"),
              "'cat' (Concat) is not supported by openvino", "the constant 'C' holds",
              "outside int32")
    art = tmp_path / "g.provmap"
    r = provmap("compile", model, "-o", art, "--strategy", "greedy:openvino,onnxruntime")
    assert r.returncode == 0 and "p0:onnxruntime(1)" in r.stdout, (r.stdout, r.stderr)
    x = np.array([3, 4], np.int64)
    np.savez(tmp_path / "in.npz", x=x)
    assert provmap("run", art, "--inputs", tmp_path / "in.npz", "-o",
                   tmp_path / "out.npz").returncode == 0
    np.testing.assert_array_equal(np.load(tmp_path / "out.npz")["z"], _ort(model, {"x": x})["z"])


def test_float16_tensors_are_judged_in_their_own_units_in_the_last_place():
    """2 fp16 ulp apart (1.6 and 1.8 ulp off the exact value: both correct) failed compare's
    float32 rtol; a float32 tensor keeps its tolerance."""
    from provmap.workbench.compare import Tolerance, metrics

    ref = np.array([1.8, -0.3, 100.0], np.float16)
    got = (ref.astype(np.float32) + 2 * np.spacing(ref).astype(np.float32)).astype(np.float16)
    assert metrics(got, ref, Tolerance())["ok"]
    assert not metrics(got, ref, Tolerance(ulps=0))["ok"]
    assert not metrics(got.astype(np.float32), ref.astype(np.float32), Tolerance())["ok"]
    far = (ref.astype(np.float32) + 8 * np.spacing(ref).astype(np.float32)).astype(np.float16)
    assert not metrics(far, ref, Tolerance())["ok"]


def test_model_local_functions_are_inlined_as_onnx_runtime_does(tmp_path):
    """torch's export_modules_as_functions: every backend refused the call, ONNX Runtime too
    ("no CPU kernel for Swish(my.domain)"), though ONNX Runtime runs the file."""
    swish = helper.make_function(
        "my.domain", "Swish", ["x"], ["y"],
        [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])],
        [helper.make_opsetid("", 17)])
    model = _save(tmp_path / "m.onnx",
                  [helper.make_node("Swish", ["x"], ["a"], domain="my.domain", name="swish"),
                   helper.make_node("Relu", ["a"], ["z"], name="relu")],
                  [("x", TensorProto.FLOAT, [2, 3])], [("z", TensorProto.FLOAT, [2, 3])],
                  functions=[swish], opsets=[helper.make_opsetid("my.domain", 1)])
    x = np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)
    np.savez(tmp_path / "in.npz", x=x)
    want = _ort(model, {"x": x})["z"]
    for strategy in ("single:onnxruntime", "single:openvino", "single:tvm"):
        art = tmp_path / f"{strategy.split(':')[1]}.provmap"
        r = provmap("compile", model, "-o", art, "--strategy", strategy)
        assert r.returncode == 0, r.stderr
        assert provmap("run", art, "--inputs", tmp_path / "in.npz", "-o",
                       tmp_path / "out.npz").returncode == 0
        np.testing.assert_allclose(np.load(tmp_path / "out.npz")["z"], want, rtol=1e-5,
                                   atol=1e-6)


@pytest.fixture(scope="module")
def unused_input(tmp_path_factory):
    d = tmp_path_factory.mktemp("unused")
    model = _save(d / "m.onnx", [helper.make_node("Relu", ["x"], ["a"], name="relu"),
                                 helper.make_node("Softmax", ["a"], ["y"], name="sm")],
                  [("x", TensorProto.FLOAT, [1, 8]), ("unused", TensorProto.FLOAT, [5])],
                  [("y", TensorProto.FLOAT, [1, 8])])
    art = d / "a.provmap"
    assert provmap("compile", model, "-o", art, "--strategy", "greedy:openvino,onnxruntime",
                   "--backend-option", "openvino.exclude_ops=Softmax").returncode == 0
    return d, model, art


def test_openvino_as_reference_feeds_only_the_inputs_it_kept(unused_input):
    """OpenVINO drops a graph input nothing reads; compare fed it by name and failed on a
    port check, cut at a source location; bisect called it an internal error."""
    d, model, art = unused_input
    r = provmap("compare", art, "--model", model, "--reference", "openvino")
    assert r.returncode == 0 and r.stdout.rstrip().endswith("match"), (r.stdout, r.stderr)
    r = provmap("bisect", model, "--backend", "onnxruntime", "--reference", "openvino", "-o",
                d / "bis")
    assert r.returncode == 0 and "internal error" not in r.stderr, r.stderr


def test_an_output_that_is_an_input_is_a_copy(tmp_path):
    """run() returned the caller's own array for a graph output that is a graph input: editing
    the result changed the input."""
    import provmap as pm

    model = _save(tmp_path / "m.onnx", [helper.make_node("Relu", ["x"], ["y"], name="relu")],
                  [("x", TensorProto.FLOAT, [3])],
                  [("y", TensorProto.FLOAT, [3]), ("x", TensorProto.FLOAT, [3])])
    art = tmp_path / "a.provmap"
    assert provmap("compile", model, "-o", art, "--strategy", "single:onnxruntime").returncode == 0
    x = np.array([-1.0, 0.0, 2.0], np.float32)
    out = pm.load(str(art)).run({"x": x})
    out["x"][0] = 42.0
    assert x[0] == -1.0


def test_random_token_ids_cover_the_table_they_index(tmp_path):
    """input_ids were always 0 or 1 (two rows of a 100-row embedding) though the manifest
    records the table's size; a mask stays 0/1."""
    import provmap as pm

    model = _save(tmp_path / "m.onnx",
                  [helper.make_node("Gather", ["E", "ids"], ["e"], name="emb"),
                   helper.make_node("Cast", ["mask"], ["m"], to=TensorProto.FLOAT, name="cast")],
                  [("ids", TensorProto.INT64, [1, 64]), ("mask", TensorProto.INT64, [1, 64])],
                  [("e", TensorProto.FLOAT, [1, 64, 4]), ("m", TensorProto.FLOAT, [1, 64])],
                  [helper.make_tensor("E", TensorProto.FLOAT, [100, 4], [0.0] * 400)])
    art = tmp_path / "a.provmap"
    assert provmap("compile", model, "-o", art, "--strategy", "single:onnxruntime").returncode == 0
    feeds = pm.load(str(art), runnable=False).random_inputs(0)
    assert feeds["ids"].max() > 1 and feeds["ids"].min() >= 0 and feeds["ids"].max() < 100
    assert set(np.unique(feeds["mask"])) <= {0, 1}


@pytest.mark.parametrize("kw, words", [
    ({"backend_options": ["openvino.threads=1"]}, "backend_options: expected {backend:"),
    ({"strategy": None}, "strategy: expected text"),
    ({"model": b"\x08\x08:"}, "model: bytes are not read as a model"),
])
def test_the_python_api_names_a_wrong_argument(tmp_path, kw, words):
    """A list of options was an AttributeError; model bytes a 'no such file' of the bytes."""
    import provmap as pm

    from provmap.provenance.util.errors import ProvmapError

    args = {"model": "bundled:transformer", "out": tmp_path / "a.provmap", **kw}
    with pytest.raises(ProvmapError, match=words.replace("{", r"\{")):
        pm.compile(args.pop("model"), **args)
    assert not (tmp_path / "a.provmap").exists()


def test_a_boundary_size_that_disagrees_with_its_shape_is_refused(tmp_path):
    from attack_kit import members, relu_artifact, repack

    from cli_runner import refused

    manifest, files = members(relu_artifact(tmp_path))
    manifest["partitions"][0]["inputs"][0]["bytes"] = 1
    bad = repack(tmp_path / "bad.provmap", manifest, files)
    refused(provmap("inspect", bad), "partitions[0].inputs[0].bytes: 1 is not the size of")


def test_a_sparse_initializer_is_read_as_onnx_runtime_reads_it(tmp_path):
    """It was refused as 'a tensor which no input, initializer or node defines'."""
    from onnx import numpy_helper

    vals = numpy_helper.from_array(np.array([1.5, -2.0], np.float32), "W")
    idx = numpy_helper.from_array(np.array([1, 4], np.int64), "W_idx")
    g = helper.make_graph([helper.make_node("Add", ["x", "W"], ["y"], name="add")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    g.sparse_initializer.append(helper.make_sparse_tensor(vals, idx, [2, 3]))
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              model)
    x = np.ones((2, 3), np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    art = tmp_path / "a.provmap"
    r = provmap("compile", model, "-o", art, "--strategy", "single:openvino")
    assert r.returncode == 0, r.stderr
    assert provmap("run", art, "--inputs", tmp_path / "in.npz", "-o",
                   tmp_path / "out.npz").returncode == 0
    np.testing.assert_array_equal(np.load(tmp_path / "out.npz")["y"], _ort(model, {"x": x})["y"])


def test_wording_of_three_refusals(tmp_path):
    """Duplicate node names (ORT refuses the file) are said at compile; `report --model` was
    told "did you mean --help?"; `--pin X=tvm` called TVM unknown when the search just did
    not use it."""
    model = _save(tmp_path / "m.onnx", [helper.make_node("Relu", ["x"], ["a"], name="dup"),
                                        helper.make_node("Sigmoid", ["a"], ["y"], name="dup")],
                  [("x", TensorProto.FLOAT, [2])], [("y", TensorProto.FLOAT, [2])])
    art = tmp_path / "a.provmap"
    r = provmap("compile", model, "-o", art, "--strategy", "single:openvino")
    assert r.returncode == 0 and "node name(s) 'dup' appear more than once" in r.stderr, r.stderr
    r = provmap("report", art, "-o", tmp_path / "r.html", "--model", model)
    assert r.returncode == 2 and "unrecognized arguments: --model" in r.stderr, r.stderr
    assert "--help?" not in r.stderr
    r = provmap("compile", model, "-o", tmp_path / "b.provmap", "--strategy",
                "collage:onnxruntime,openvino", "--pin", "dup=tvm", "--search-budget", "5")
    one_error(r, "a backend this search does not use 'tvm'", "collage:onnxruntime,openvino,tvm")


def test_warmup_is_bounded_like_repeats(tmp_path):
    """`run --warmup 100000000` was accepted and started three days of untimed runs."""
    r = provmap("run", tmp_path / "any.provmap", "--warmup", "100000000")
    assert r.returncode == 2 and "a whole number from 0 to 1000000" in r.stderr, r.stderr
