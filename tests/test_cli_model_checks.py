"""What compile says about the user's model before a backend can take the blame, through the real
CLI: a graph output, a value_info entry or a node's type binding declared of another type than
the model computes is refused at compile, naming the tensor and the node; a stale value_info
shape (fixed, symbolic or of another rank) is said and the computed shape used; an initializer
that is also a graph input is said to be frozen.  ONNX features taken as ONNX Runtime takes them
compile and run: model-local functions, sparse initializers, an output listed twice."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from cli_models import model_file, ort_outputs, saved_model
from cli_runner import one_error, provmap, refused
from onnx import TensorProto, helper, numpy_helper
from provmap.runtime_module.onnx_external import MEM_ADDR, point_at


@pytest.mark.parametrize("backend", ["openvino", "onnxruntime"])
def test_an_output_declared_with_another_dtype_is_refused_at_compile(tmp_path, backend):
    """float16 declared, float32 computed: ONNX Runtime refuses to load it; provmap wrote an
    artifact on OpenVINO or TVM that failed at every run, and on ONNX Runtime blamed the
    first node."""
    from onnx import TensorProto, helper

    model = saved_model(tmp_path, [helper.make_node("Relu", ["x"], ["y"], name="relu")],
                        [("x", TensorProto.FLOAT, [1, 4])], [("y", TensorProto.FLOAT16, [1, 4])])
    r = provmap("compile", model, "-o", tmp_path / "a.provmap", "--strategy", f"single:{backend}")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert ("graph output 'y' is declared float16 but the model computes float32 (by Relu "
            "'relu')") in r.stderr.splitlines()[-1], r.stderr
    assert not (tmp_path / "a.provmap").exists()


def test_value_info_declaring_another_dtype_is_refused_at_compile(tmp_path):
    """Compiled and run with only the shape warned about; ORT refuses the file, so compare
    then failed on its reference."""
    model = saved_model(tmp_path, [helper.make_node("Relu", ["x"], ["a"], name="relu"),
                                   helper.make_node("Sigmoid", ["a"], ["y"], name="sig")],
                        [("x", TensorProto.FLOAT, [1, 4])], [("y", TensorProto.FLOAT, [1, 4])],
                        value_info=[("a", TensorProto.DOUBLE, [1, 4])])
    r = provmap("compile", model, "-o", tmp_path / "a.provmap", "--strategy", "single:onnxruntime")
    one_error(r, "tensor 'a' is declared float64 in value_info but the model computes float32 "
                 "(by Relu 'relu')")
    assert not (tmp_path / "a.provmap").exists()


def test_a_stale_value_info_on_a_boundary_takes_the_computed_shape(tmp_path):
    """ORT merges a stale intermediate declaration leniently and runs the model; provmap sized
    the boundary from it and the next partition failed to build, blaming a later node."""
    import numpy as np
    from onnx import TensorProto, helper

    model = saved_model(tmp_path, [helper.make_node("Relu", ["x"], ["a"], name="relu"),
                                   helper.make_node("Sigmoid", ["a"], ["y"], name="sig")],
                        [("x", TensorProto.FLOAT, [1, 4, 8])],
                        [("y", TensorProto.FLOAT, [1, 4, 8])],
                        value_info=[("a", TensorProto.FLOAT, [1, 4, 2])])
    art = tmp_path / "a.provmap"
    r = provmap("compile", model, "-o", art, "--strategy", "greedy:openvino,onnxruntime",
                "--backend-option", "openvino.exclude_ops=Sigmoid")
    assert r.returncode == 0, r.stderr
    assert ("tensor 'a' is declared [1, 4, 2] in value_info but the model computes [1, 4, 8]; "
            "the computed shape is used") in r.stderr
    x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(1, 4, 8)
    np.savez(tmp_path / "in.npz", x=x)
    r = provmap("run", art, "--inputs", tmp_path / "in.npz", "-o", tmp_path / "out.npz")
    assert r.returncode == 0, r.stderr
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["y"],
                               1 / (1 + np.exp(-np.maximum(x, 0))), rtol=1e-5)


def test_a_symbolic_or_wrong_rank_stale_value_info_is_said_too(tmp_path):
    """value_info ["N", 99] for a computed [N, 16], or of another rank, was dropped without a
    word, where [2, 99] warned (the tenth afternoon; docs/guide.md promises the warning)."""
    from cli_runner import provmap

    model = saved_model(tmp_path, [helper.make_node("Relu", ["x"], ["a"], name="relu"),
                                   helper.make_node("Sigmoid", ["a"], ["b"], name="sig"),
                                   helper.make_node("Neg", ["b"], ["y"], name="neg")],
                        [("x", TensorProto.FLOAT, ["N", 4, 8])],
                        [("y", TensorProto.FLOAT, ["N", 4, 8])],
                        value_info=[("a", TensorProto.FLOAT, ["N", 4, 2]),
                                    ("b", TensorProto.FLOAT, ["N", 4, 8, 1])])
    r = provmap("compile", model, "-o", tmp_path / "a.provmap", "--strategy",
                "single:onnxruntime", "--input-shape", "x=2x4x8")
    assert r.returncode == 0, r.stderr
    assert "tensor 'a' is declared [N, 4, 2] in value_info but the model computes" in r.stderr
    assert "tensor 'b' is declared [N, 4, 8, 1] in value_info but the model computes" in r.stderr


def test_an_input_of_another_type_than_its_weights_is_blamed_on_the_node(tmp_path):
    """An input declared double beside float weights: the refusal blamed the graph output's
    declared type, and once that was "corrected", ONNX Runtime's missing double Conv kernel.
    ONNX Runtime names the Conv binding T to two types; so does provmap now."""
    w = numpy_helper.from_array(np.ones((2, 3, 1, 1), np.float32), "W")
    for out_type in (TensorProto.FLOAT, TensorProto.DOUBLE):
        g = helper.make_graph(
            [helper.make_node("Conv", ["img", "W"], ["c"], name="conv1"),
             helper.make_node("Relu", ["c"], ["y"], name="relu")], "g",
            [helper.make_tensor_value_info("img", TensorProto.DOUBLE, [1, 3, 4, 4])],
            [helper.make_tensor_value_info("y", out_type, [1, 2, 4, 4])], [w])
        path = tmp_path / f"bad{out_type}.onnx"
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                                    ir_version=8), path)
        line = refused(provmap("compile", path, "-o", tmp_path / "a.provmap", "--strategy",
                               "single:onnxruntime"),
                       "ONNX node 'conv1' (Conv) binds its type T to float64 (input 'img') and "
                       "to float32 (input 'W')")
        assert "declared type" not in line and "no CPU kernel" not in line, line


def test_an_overridable_initializer_is_said_to_be_frozen(tmp_path):
    model = saved_model(tmp_path, [helper.make_node("Add", ["x", "bias"], ["y"], name="add")],
                        [("x", TensorProto.FLOAT, [2]), ("bias", TensorProto.FLOAT, [2])],
                        [("y", TensorProto.FLOAT, [2])],
                        initializer=[helper.make_tensor("bias", TensorProto.FLOAT, [2], [1, 1])])
    art = tmp_path / "a.provmap"
    r = provmap("compile", model, "-o", art, "--strategy", "single:onnxruntime")
    assert r.returncode == 0 and "graph input(s) 'bias' also have an initializer" in r.stderr, \
        r.stderr
    assert "'bias' also have an initializer" in provmap("inspect", art).stdout


# -- ONNX features taken as ONNX Runtime takes them ------------------------------------------

def test_model_local_functions_are_inlined_as_onnx_runtime_does(tmp_path):
    """torch's export_modules_as_functions: every backend refused the call, ONNX Runtime too
    ("no CPU kernel for Swish(my.domain)"), though ONNX Runtime runs the file."""
    swish = helper.make_function(
        "my.domain", "Swish", ["x"], ["y"],
        [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])],
        [helper.make_opsetid("", 17)])
    model = model_file(tmp_path / "m.onnx",
                       [helper.make_node("Swish", ["x"], ["a"], domain="my.domain", name="swish"),
                        helper.make_node("Relu", ["a"], ["z"], name="relu")],
                       [("x", TensorProto.FLOAT, [2, 3])], [("z", TensorProto.FLOAT, [2, 3])],
                       functions=[swish], opsets=[helper.make_opsetid("my.domain", 1)])
    x = np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)
    np.savez(tmp_path / "in.npz", x=x)
    want = ort_outputs(model, {"x": x})["z"]
    for strategy in ("single:onnxruntime", "single:openvino", "single:tvm"):
        art = tmp_path / f"{strategy.split(':')[1]}.provmap"
        r = provmap("compile", model, "-o", art, "--strategy", strategy)
        assert r.returncode == 0, r.stderr
        assert provmap("run", art, "--inputs", tmp_path / "in.npz", "-o",
                       tmp_path / "out.npz").returncode == 0
        np.testing.assert_allclose(np.load(tmp_path / "out.npz")["z"], want, rtol=1e-5,
                                   atol=1e-6)


def _sparse_model(tmp_path, vals):
    """m.onnx: x [2, 3] + W, W a sparse initializer of `vals` at flat positions 1 and 4."""
    idx = numpy_helper.from_array(np.array([1, 4], np.int64), "W_idx")
    g = helper.make_graph([helper.make_node("Add", ["x", "W"], ["y"], name="add")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    g.sparse_initializer.append(helper.make_sparse_tensor(vals, idx, [2, 3]))
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              model)
    return model


def test_a_sparse_initializer_is_read_as_onnx_runtime_reads_it(tmp_path):
    """It was refused as 'a tensor which no input, initializer or node defines'."""
    from onnx import numpy_helper

    vals = numpy_helper.from_array(np.array([1.5, -2.0], np.float32), "W")
    model = _sparse_model(tmp_path, vals)
    x = np.ones((2, 3), np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    art = tmp_path / "a.provmap"
    r = provmap("compile", model, "-o", art, "--strategy", "single:openvino")
    assert r.returncode == 0, r.stderr
    assert provmap("run", art, "--inputs", tmp_path / "in.npz", "-o",
                   tmp_path / "out.npz").returncode == 0
    np.testing.assert_array_equal(np.load(tmp_path / "out.npz")["y"],
                                  ort_outputs(model, {"x": x})["y"])


def test_a_sparse_initializer_in_external_data_is_one_line_naming_it(tmp_path):
    """Its values were read relative to the working directory (onnx.load leaves a sparse
    tensor's external data unread), and anything wrong was an 'internal error'; one named
    `*/_ORT_MEM_ADDR_/*` must never reach OpenVINO's frontend, which reads that address."""
    vals = onnx.TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[2])
    point_at(vals, MEM_ADDR, 4096, 8)
    model = _sparse_model(tmp_path, vals)
    r = provmap("compile", model, "-o", tmp_path / "a.provmap", "--strategy", "single:openvino")
    assert "sparse initializer 'W'" in one_error(r) and "external data" in one_error(r)
    assert not (tmp_path / "a.provmap").exists()


def test_an_output_listed_twice_compiles_into_an_artifact_that_opens(tmp_path):
    """M1: ONNX Runtime runs a graph that lists one output twice; provmap compiled it (exit 0)
    into an artifact every reader refused ("model.outputs[2]: 'p' is listed twice")."""
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["p"], name="relu"),
                           helper.make_node("Neg", ["x"], ["q"], name="neg")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4])
                           for n in ("p", "q", "p")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              tmp_path / "m.onnx")
    for backend in ("onnxruntime", "openvino", "tvm"):
        art = tmp_path / f"{backend}.provmap"
        r = provmap("compile", tmp_path / "m.onnx", "-o", art, "--strategy", f"single:{backend}")
        assert r.returncode == 0, r.stderr
        assert provmap("inspect", art).returncode == 0
        r = provmap("run", art, "--random")
        assert r.returncode == 0, r.stderr
        assert [ln.split(":")[0] for ln in r.stdout.splitlines()[:2]] == ["p", "q"], r.stdout
        r = provmap("compare", art, "--model", tmp_path / "m.onnx")
        assert r.returncode == 0 and r.stdout.strip().endswith("match"), r.stdout + r.stderr
