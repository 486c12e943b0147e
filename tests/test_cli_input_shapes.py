"""The shapes a model is compiled at (`--input-shape`, and the Python API's input_shapes): a
negative or unbounded size is refused when read; two sizes for one named dimension are said
before a backend is blamed; shapes the model itself cannot run at (ONNX Runtime refuses it
there) are said as such, never as a backend's failure, and an op ONNX Runtime lacks is no
verdict on them; bisect takes open dimensions from the arrays it is given."""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest
from attack_kit import relu_model
from cli_runner import one_error, provmap, refused, refused_in_process
from onnx import TensorProto, helper
from small_models import two_inputs

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.mark.parametrize("shape,dim", [("1x-5", 1), ("-1x3", 0)])
def test_a_negative_input_dimension_is_refused(tmp_path, shape, dim):
    """-1 is a dynamic dimension, not a size; zero is a size (tests/test_zero_size.py)."""
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "C"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "C"])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              tmp_path / "dyn.onnx")
    r = provmap("compile", tmp_path / "dyn.onnx", "-o", tmp_path / "a.provmap", "--strategy",
                "single:openvino", "--input-shape", f"x={shape}")
    one_error(r, "--input-shape", "'x'", f"dimension {dim}")
    assert not (tmp_path / "a.provmap").exists()


def test_python_api_refuses_a_negative_input_size_too():
    from provmap.partition.compile import load_view
    from provmap.provenance.util.errors import ProvmapError
    from small_models import conv_relu

    name = conv_relu().graph.input[0].name
    with pytest.raises(ProvmapError, match=f"input '{name}' dimension 0 is -1; sizes must be >= 0"):
        load_view(conv_relu(), input_shapes={name: (-1, 3, 8, 8)})


def test_input_shapes_are_bounded_when_given(capsys, tmp_path):
    m = relu_model()
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "n"
    m.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "n"
    onnx.save(m, tmp_path / "dyn.onnx")
    out = tmp_path / "dyn.provmap"
    for spec, words in (("x=99999999999999999999", ("int64",)),
                        ("x=4294967297x4294967297", ("memory",))):
        refused_in_process(capsys, ["compile", tmp_path / "dyn.onnx", "-o", out, "--strategy",
                                    "single:onnxruntime", "--input-shape", spec],
                           "--input-shape", *words)
    assert not out.exists()
    assert not os.path.exists(str(out) + ".tmp")


def test_two_sizes_for_one_named_dimension_are_said_before_a_backend_is_blamed(tmp_path):
    """x[N, 4] and m[N, 4] given batch 2 and 3: the first node joining them failed on TVM or
    ONNX Runtime, which took the blame ("Where is not supported by tvm")."""
    g = helper.make_graph([helper.make_node("Add", ["x", "m"], ["y"], name="add")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4]),
                           helper.make_tensor_value_info("m", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              model)
    r = provmap("compile", model, "-o", tmp_path / "a.provmap", "--strategy", "single:tvm",
                "--input-shape", "x=2x4", "--input-shape", "m=3x4")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    warning = "dimension 'N' is 2 for input 'x' but 3 for input 'm'; the model names them alike"
    lines = r.stderr.splitlines()
    at = next(k for k, ln in enumerate(lines) if warning in ln)
    assert at < next(k for k, ln in enumerate(lines) if ln.startswith("provmap: error:"))
    assert not (tmp_path / "a.provmap").exists()
    r = provmap("compile", model, "-o", tmp_path / "b.provmap", "--strategy", "single:tvm",
                "--input-shape", "x=2x4", "--input-shape", "m=2x4")
    assert r.returncode == 0 and "names them alike" not in r.stderr, r.stderr


def test_input_shapes_the_model_cannot_run_at_are_not_blamed_on_a_backend(tmp_path):
    """A BERT export with 64 positions given seq 65: "Add is not supported by openvino" (or
    tvm), where ONNX Runtime refuses the model itself at that shape.  Here a position table of
    8 expanded to the input's shape."""
    import numpy as np
    from onnx import numpy_helper

    pos = numpy_helper.from_array(np.ones((1, 8), np.float32), "pos")
    mk = helper.make_node
    g = helper.make_graph([mk("Shape", ["x"], ["s"], name="shape"),
                           mk("Expand", ["pos", "s"], ["pe"], name="expand"),
                           mk("Add", ["x", "pe"], ["a"], name="add"),
                           mk("Relu", ["a"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "S"])],
                          [pos])
    model, out = tmp_path / "pos.onnx", tmp_path / "a.provmap"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              model)
    for strategy in ("single:openvino", "single:tvm", "greedy:openvino,tvm"):
        line = refused(provmap("compile", model, "-o", out, "--strategy", strategy,
                               "--input-shape", "x=1x9"),
                       "--input-shape x=1x9: the model cannot run at these input shapes",
                       "expand")
        assert "not supported by" not in line
    assert not out.exists()
    r = provmap("compile", model, "-o", out, "--strategy", "single:openvino", "--input-shape",
                "x=1x8")
    assert r.returncode == 0, r.stderr


def test_an_op_onnx_runtime_lacks_is_no_verdict_on_the_input_shapes():
    """A compile failing under --input-shape asks ONNX Runtime whether the model runs at those
    shapes; a model ORT cannot load at any shape (an op it lacks) said "cannot run at these
    input shapes" in place of the backend's own error.  A Reshape the shapes break is one."""
    from provmap.runtime_module.shape_check import ort_refuses

    def model(node, *extra):
        g = helper.make_graph([node], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              list(extra))
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("vendor.x", 1)],
                                 ir_version=8)

    lacking = model(helper.make_node("NoSuchOp", ["x"], ["y"], domain="vendor.x"))
    assert ort_refuses(lacking) is None
    shape = helper.make_tensor("s", TensorProto.INT64, [1], [5])
    broken = model(helper.make_node("Reshape", ["x", "s"], ["y"]), shape)
    assert ort_refuses(broken)


def test_bisect_takes_open_input_shapes_from_the_inputs_given(tmp_path):
    """bisect --inputs with 1x16 arrays still asked for --input-shape (suggesting 1x1)."""
    model = two_inputs(tmp_path)
    npz = tmp_path / "in.npz"
    np.savez(npz, input_ids=np.ones((1, 16), np.float32),
             attention_mask=np.full((1, 16), 2, np.float32))
    r = provmap("bisect", model, "--backend", "openvino", "--inputs", npz, "-o",
                tmp_path / "repro", "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["diverges"] is False and res["outputs"][0]["ok"] is True
