"""compare's verdict: each tensor judged in its own units (float16 in its ulps, a float32 output
cast from float16 too, quantized grids in steps, a tensor all inside atol by its direction,
max rel over non-zero reference values), --json naming every rule and the one each tensor
passed on, which side holds a NaN; the culprit partition is one that diverges on the
reference's own inputs; OpenVINO as the reference is fed only the inputs it kept; the text
columns line up (and profile's)."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from attack_kit import relu_artifact
from cli_models import model_file
from cli_runner import provmap
from onnx import TensorProto, helper, numpy_helper


# -- each tensor judged in its own units ------------------------------------------------------

@pytest.mark.usefixtures("own_config")
def test_compare_says_which_side_has_the_nan():
    import numpy as np

    from provmap.workbench.compare import Tolerance, metrics

    tol = Tolerance(atol=1e-4, rtol=1e-3, quant_steps=1)
    got = metrics(np.array([0.0, 1.0], np.float32), np.array([np.nan, 1.0], np.float32), tol)
    assert got["problem"] == "the reference has NaN at 1 element(s) where this has none"
    got = metrics(np.array([np.nan, 1.0], np.float32), np.array([0.0, 1.0], np.float32), tol)
    assert got["problem"] == "NaN at 1 element(s) where the reference has none"


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


def test_a_float32_output_cast_from_float16_is_judged_in_float16_ulps(tmp_path):
    """Seventeenth afternoon L1: convert_float_to_float16(keep_io_types=True) ends each output
    with a Cast to float32; compare judged it at float32's rtol, so OpenVINO "diverged" where it
    was closer to the float32 model than ONNX Runtime's own float16 run, and --ulps did
    nothing."""
    import json

    from provmap.workbench.compare import Tolerance, metrics, tensor_grids

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float16), "w")
    g = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["xh"], to=TensorProto.FLOAT16, name="in_cast"),
         helper.make_node("MatMul", ["xh", "w"], ["mh"], name="mm"),
         helper.make_node("Softmax", ["mh"], ["sh"], axis=-1, name="sm"),
         helper.make_node("Cast", ["sh"], ["y"], to=TensorProto.FLOAT, name="out_cast")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 64])], [w])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    # the float16 tensor has no declared type: found by inference
    assert tensor_grids(model) == {"y": np.dtype(np.float16)}
    ref = np.array([0.5, 0.25], np.float32)
    off = ref + np.spacing(ref.astype(np.float16)).astype(np.float32) * 2  # 2 ulp of float16
    assert not metrics(off, ref, Tolerance())["ok"]
    m = metrics(off, ref, Tolerance(), np.dtype(np.float16))
    assert m["ok"] and m["passed_on"] == "ulps"
    assert not metrics(off, ref, Tolerance(ulps=1), np.dtype(np.float16))["ok"]
    path = tmp_path / "fp16io.onnx"
    onnx.save(model, path)
    art = tmp_path / "a.provmap"
    assert provmap("compile", path, "-o", art, "--strategy", "single:openvino").returncode == 0
    r = provmap("compare", art, "--model", path, "--random", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    [t] = json.loads(r.stdout)["tensors"]
    assert t["ok"] and t["passed_on"] in ("atol/rtol", "ulps")


def test_max_rel_is_relative_to_non_zero_reference_values():
    """`max rel 1e+12` on an int8 tensor one step off where the reference is 0."""
    import numpy as np

    from provmap.workbench.compare import Tolerance, metrics

    m = metrics(np.array([1, 0, 6], np.int8), np.array([0, 0, 5], np.int8), Tolerance())
    assert m["max_abs"] == 1.0 and m["max_rel"] == 0.2 and m["ok"]


def test_a_tensor_all_inside_atol_is_judged_by_its_direction():
    """Logits of 1e-9 from random weights sit inside --atol 1e-4 whatever a backend computes:
    a partition with noise for weights "matched" at cosine -0.29 (the twelfth afternoon)."""
    import numpy as np

    from provmap.workbench.compare import Tolerance, metrics

    ref = np.array([1e-9, -2e-9, 3e-9, 4e-9], np.float32)
    bad = metrics(-ref, ref, Tolerance())
    assert not bad["ok"] and "judged by direction" in bad["problem"], bad
    assert metrics(ref * np.float32(1.0001), ref, Tolerance())["ok"]
    assert metrics(np.full(4, 1e-6, np.float32), np.zeros(4, np.float32), Tolerance())["ok"]


def test_compare_json_names_every_rule_and_the_one_each_tensor_passed_on(tmp_path):
    """L1: `compare --json` listed atol and rtol only, beside a uint8 QDQ output one step off
    (past both) and "match": true, never saying it passed on --quant-steps."""
    import json

    from provmap.workbench.compare import Tolerance, metrics

    art = relu_artifact(tmp_path)
    r = provmap("compare", art, "--model", tmp_path / "relu.onnx", "--random", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert (d["atol"], d["rtol"], d["quant_steps"], d["ulps"]) == (1e-4, 1e-3, 1, 4)
    assert [t["passed_on"] for t in d["tensors"]] == ["atol/rtol"]
    step = 1 / 256
    ref = np.array([0.0, 0.5, 1.0])
    off = metrics(ref + step, ref, Tolerance(), step)  # one step of the grid
    assert off["ok"] and off["passed_on"] == "quant_steps"
    assert metrics(ref + 3 * step, ref, Tolerance(), step)["passed_on"] is None
    u8 = np.array([3, 4], np.uint8)
    assert metrics(u8 + np.uint8(1), u8, Tolerance())["passed_on"] == "quant_steps"
    h = np.array([1000.0], np.float16)
    assert metrics(h + np.float16(1.5), h, Tolerance())["passed_on"] == "ulps"  # 3 ulp, past rtol


# -- the culprit, the reference, the columns -------------------------------------------------

def test_a_partition_exact_on_the_references_inputs_is_not_left_as_the_culprit(tmp_path,
                                                                                monkeypatch):
    """Two int8 inputs each one step off (a match) gave ORT's QLinearAdd two steps off, and
    compare named that exact partition "first divergent".  Here the reference's `a` sits just
    inside the tolerance from the artifact's, and y = a + a doubles the gap past it: the Add
    partition, fed the reference's own `a`, matches, and compare says so."""
    import numpy as np

    import provmap.workbench.compare as compare
    from provmap.runtime_module.module import load

    g = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["a"], name="mul"),
                           helper.make_node("Add", ["a", "a"], ["y"], name="add")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
    model, art = tmp_path / "m.onnx", tmp_path / "a.provmap"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              model)
    r = provmap("compile", model, "-o", art, "--strategy", "greedy:openvino,onnxruntime",
                "--backend-option", "openvino.only_ops=Mul")
    assert r.returncode == 0, r.stderr
    x = {"x": np.linspace(0, 1, 8, dtype=np.float32).reshape(1, 8)}
    real = compare.reference_run

    def nudged(m, inputs, extra, reference="onnxruntime"):
        out = real(m, inputs, extra, reference)
        out["a"] = out["a"] + np.float32(0.7e-4)  # within atol 1e-4 (x = 0 keeps rtol out)
        out["y"] = out["a"] + out["a"]
        return out

    monkeypatch.setattr(compare, "reference_run", nudged)
    res = compare.compare_artifact(load(art), onnx.load(model), x)
    c = res["first_divergent_partition"]
    assert not res["match"] and c["backend"] == "onnxruntime", res
    assert c["inexact_inputs"] == ["a"] and c["matches_on_reference_inputs"] is True, c


@pytest.fixture(scope="module")
def unused_input(tmp_path_factory):
    d = tmp_path_factory.mktemp("unused")
    model = model_file(d / "m.onnx", [helper.make_node("Relu", ["x"], ["a"], name="relu"),
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


def _column(lines, word):
    return {ln.index(word) for ln in lines if word in ln}


def test_compare_and_profile_columns_line_up(log_relu_dir):
    r = provmap("compare", log_relu_dir / "m.provmap", "--inputs", log_relu_dir / "in.npz")
    assert r.returncode == 0, r.stderr
    rows = [ln for ln in r.stdout.splitlines() if ln.startswith(("ok", "FAIL"))]
    assert len(rows) == 2 and {"openvino", "onnxruntime"} <= set(r.stdout.split())
    # the tensor names start in one column whatever the backend's name length
    assert len({ln.index(" t (") if " t (" in ln else ln.index(" y (") for ln in rows}) == 1, rows
    r = provmap("profile", log_relu_dir / "m.provmap", "--inputs", log_relu_dir / "in.npz",
                "--repeats", "2")
    assert r.returncode == 0, r.stderr
    rows = [ln for ln in r.stdout.splitlines() if re.match(r"  p\d ", ln)]
    assert len(rows) == 2 and len(_column(rows, " ms ")) == 1, rows
    assert "1 kernels" not in r.stdout
