"""Issue 36's eleventh new-user afternoon, through the real CLI."""

from __future__ import annotations

import onnx
from cli_runner import provmap, refused
from onnx import TensorProto, helper


def _relu(tmp_path):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
    path = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              path)
    return path


def test_tuning_options_without_tuning_are_refused(tmp_path):
    """tvm.trials, tune_budget, tuning_db and --tuning-db without tune=metaschedule did
    nothing, exit 0, and the artifact's label read `tvm[trials=5;tune_budget=3]` as if tuned."""
    model, out = _relu(tmp_path), tmp_path / "a.provmap"
    why = "acts only with tune=metaschedule: nothing is tuned"
    for extra in (("--backend-option", "tvm.trials=5"), ("--backend-option", "tvm.tune_budget=5"),
                  ("--backend-option", f"tvm.tuning_db={tmp_path / 'db'}"),
                  ("--tuning-db", tmp_path / "db")):
        refused(provmap("compile", model, "-o", out, "--strategy", "single:tvm", *extra), why)
    refused(provmap("compile", model, "-o", out, "--strategy", "single:tvm[trials=5;tune_budget=3]"),
            "option trials " + why)
    assert not out.exists() and not (tmp_path / "db").exists()


def test_a_bisect_reproducer_is_what_the_reference_computes_for_the_node_alone(tmp_path):
    """The reproducer's expected values were the reference's whole-model values: ONNX Runtime's
    fp16 HardSwish inside MobileNet-v3 was 29 ulps off the HardSwish of its own inputs, so a
    correct TVM "failed alone" and the vendor got a reproducer the reference itself fails.
    Now the reference on the node alone is the expectation: it passes its own reproducer."""
    import json

    from provmap.runtime_module.registry import get_backend
    from provmap.workbench.bisect import check_reproducer

    out = tmp_path / "repro"
    r = provmap("bisect", "bundled:squeezenet", "--backend", "openvino", "--atol", "0",
                "--rtol", "0", "--ulps", "0", "-o", out, "--json")
    assert r.returncode == 1, r.stderr
    res = json.loads(r.stdout)
    assert res["node"] and "reference_alone_differs" in res
    assert check_reproducer(out / "reproducer.onnx", out / "reproducer_inputs.npz",
                            out / "reproducer_expected.npz", get_backend("onnxruntime")) == []


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


def test_the_cost_cache_file_holds_its_prices_after_a_compile(tmp_path):
    """The search left its prices in the cache's -wal file (the connection was never closed):
    a copy of the .sqlite alone had no tables."""
    import shutil
    import sqlite3

    cache = tmp_path / "c.sqlite"
    r = provmap("compile", _relu(tmp_path), "-o", tmp_path / "a.provmap", "--strategy",
                "collage", "--backends", "onnxruntime", "--search-budget", "20",
                "--refine-budget", "0", "--cache", cache)
    assert r.returncode == 0, r.stderr
    shutil.copy(cache, tmp_path / "copy.sqlite")  # the file alone, as a user archives it
    with sqlite3.connect(tmp_path / "copy.sqlite") as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
        assert "costs" in tables, tables
        assert db.execute("SELECT COUNT(*) FROM costs").fetchone()[0] > 0


def test_an_input_array_under_another_name_is_suggested(tmp_path):
    """An array named `X` for input `x` got only "missing input 'x'; the model takes x"."""
    import numpy as np

    art = tmp_path / "a.provmap"
    assert provmap("compile", _relu(tmp_path), "-o", art, "--strategy",
                   "single:onnxruntime").returncode == 0
    np.savez(tmp_path / "in.npz", X=np.ones((1, 8), np.float32))
    r = provmap("run", art, "--inputs", tmp_path / "in.npz", "-o", tmp_path / "o.npz")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "did you mean 'X' for 'x'?" in r.stderr, r.stderr


def test_max_rel_is_relative_to_non_zero_reference_values():
    """`max rel 1e+12` on an int8 tensor one step off where the reference is 0."""
    import numpy as np

    from provmap.workbench.compare import Tolerance, metrics

    m = metrics(np.array([1, 0, 6], np.int8), np.array([0, 0, 5], np.int8), Tolerance())
    assert m["max_abs"] == 1.0 and m["max_rel"] == 0.2 and m["ok"]


def test_a_strategy_in_capitals_gets_its_lower_case_spelling_suggested(tmp_path):
    refused(provmap("compile", _relu(tmp_path), "-o", tmp_path / "a.provmap", "--strategy",
                    "SINGLE:OPENVINO"), "did you mean 'single:openvino'?")


def test_a_gather_on_computed_indices_is_named_at_compile_on_tvm_and_openvino(tmp_path):
    """Indices the model computes (ids + 10) are not range-checked: OpenVINO returned zeros and
    TVM crashed (exit 139) on a large one (the eleventh afternoon; documented, but found by a
    crash).  compile now names such a Gather for the backends that do not check it."""
    import numpy as np
    from onnx import numpy_helper

    table = numpy_helper.from_array(np.ones((16, 4), np.float32), "table")
    ten = numpy_helper.from_array(np.array(10, np.int64), "ten")
    g = helper.make_graph([helper.make_node("Add", ["ids", "ten"], ["j"], name="shift"),
                           helper.make_node("Gather", ["table", "j"], ["y"], name="emb")], "g",
                          [helper.make_tensor_value_info("ids", TensorProto.INT64, [3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
                          [table, ten])
    model = tmp_path / "g.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              model)
    for backend, words in (("tvm", "TVM reads outside the tensor"),
                           ("openvino", "OpenVINO returns zeros")):
        r = provmap("compile", model, "-o", tmp_path / f"{backend}.provmap", "--strategy",
                    f"single:{backend}")
        assert r.returncode == 0, r.stderr
        assert "Gather 'emb': indices the model computes are not checked at run time" in r.stderr
        assert words in r.stderr, r.stderr
    r = provmap("compile", model, "-o", tmp_path / "ort.provmap", "--strategy",
                "single:onnxruntime")  # ONNX Runtime checks them itself
    assert r.returncode == 0 and "not checked" not in r.stderr, r.stderr


def test_explain_prints_a_newline_in_a_node_name_escaped(tmp_path):
    """explain printed a node named "relu\\nFORGED LINE: ..." as two lines (the twelfth
    afternoon; every other command escapes it)."""
    mk = helper.make_node
    g = helper.make_graph([mk("Sigmoid", ["x"], ["a"], name="sig"),
                           mk("Relu", ["a"], ["y"], name="relu\nFORGED LINE: p1 ok\rX")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
    model, art = tmp_path / "m.onnx", tmp_path / "a.provmap"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              model)
    assert provmap("compile", model, "-o", art, "--strategy", "greedy:openvino,onnxruntime",
                   "--backend-option", "openvino.exclude_ops=Relu").returncode == 0
    r = provmap("explain", art)
    assert r.returncode == 0, r.stderr
    assert not any(ln.startswith("FORGED") or ln.startswith("X") for ln in
                   r.stdout.splitlines()), r.stdout
    assert "relu\\x0aFORGED LINE: p1 ok\\x0dX" in r.stdout, r.stdout


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


def test_explain_headroom_takes_the_shapes_the_artifact_was_compiled_at(tmp_path):
    """On a model with a dynamic dimension explain --headroom said to pass --input-shape, which
    explain does not take; the artifact records the shapes it was compiled with."""
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["a"], name="relu"),
                           helper.make_node("Sigmoid", ["a"], ["y"], name="sig")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])])
    model, art = tmp_path / "m.onnx", tmp_path / "a.provmap"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              model)
    assert provmap("compile", model, "-o", art, "--strategy", "greedy:openvino,onnxruntime",
                   "--input-shape", "x=2x8", "--embed-model").returncode == 0
    r = provmap("explain", art, "--headroom", "--repeats", "3")
    assert r.returncode == 0 and "input-shape" not in r.stderr, r.stderr
    assert "limit" in r.stdout, r.stdout
