"""The corpus step (bench/corpus.py) on a small deterministic sample: every outcome lands in
exactly one column per backend, and a wrong number is counted as wrong, never as a refusal or a
run, with the plain library's verdict beside it."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from provmap.bench import corpus


def _tampered(payload):
    """The same case with its expected outputs off by one: whatever a correct backend returns
    is now a wrong number."""
    model, sets, rtol, atol = payload
    return model, [(ins, [o + 1 for o in outs]) for ins, outs in sets], rtol, atol


def test_runs_refusals_and_wrong_numbers_are_counted_apart():
    node = corpus.collect(["node"])
    cases = {n: node[n] for n in ("node/test_relu", "node/test_max_float64")}
    cases["node/test_relu_expected_plus_one"] = _tampered(node["node/test_relu"])
    user = corpus.user_cases()
    assert {"user/crnn_declared_output", "user/small_cnn_quant_dynamic",
            "user/small_cnn_fp16"} <= set(user)
    cases["user/crnn_declared_output"] = user["user/crnn_declared_output"]
    folder = corpus.folder_cases("pytorch-operator")
    cases["pytorch-operator/test_operator_exp"] = \
        folder["pytorch-operator/test_operator_exp"]
    assert all(len(p[1]) >= 1 for p in folder.values())  # every folder has its data sets

    results = corpus.run(cases, sorted(cases), ["onnxruntime", "openvino"], jobs=2, timeout=300)
    table = corpus.tally(results)
    for b, t in table.items():
        assert sum(t[c] for c in corpus.COLUMNS) == t["total"] == len(cases), (b, t)
        # The tampered case ran and returned the right numbers: counted wrong, never hidden.
        assert t["wrong_cases"] == ["node/test_relu_expected_plus_one"], (b, results)
        plain = results["node/test_relu_expected_plus_one"][b]["plain"]
        assert plain["status"] == "fail"  # the plain library is "wrong" against it as well
    for case in ("node/test_relu", "user/crnn_declared_output",
                 "pytorch-operator/test_operator_exp"):
        assert {r["status"] for r in results[case].values()} == {"pass"}, results[case]
    # float64 on OpenVINO is a refusal with its reason; ORT runs it.
    assert results["node/test_max_float64"]["openvino"]["status"] == "error"
    assert "float64" in results["node/test_max_float64"]["openvino"]["message"]
    assert table["onnxruntime"]["runs"] == 4 and table["openvino"]["refused"] == 1
    md = corpus.markdown(results, table, {"cases": len(cases), "folders": ["node"], "date": "d",
                                          "host": "h", "versions": "v", "seconds": 1,
                                          "sample": None, "seed": 0})
    assert "| openvino | 3 | 1 | 1 | 0 | 5 |" in md and "## Wrong on openvino" in md


def _corpus_on_onnxruntime(folder: str, cases: str, out) -> dict:
    """The corpus step's command line on one folder's matching cases, ONNX Runtime only, one
    job: its JSON result (the command must succeed)."""
    r = subprocess.run([sys.executable, "-m", "provmap.bench.corpus", "--folders", folder,
                        "--cases", cases, "--backends", "onnxruntime", "--jobs", "1",
                        "-o", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return json.loads(out.read_text())


def test_the_command_line(tmp_path):
    out = tmp_path / "c.json"
    res = _corpus_on_onnxruntime("simple", "expand_shape_model1$", out)
    assert res["table"]["onnxruntime"]["runs"] == 1 and res["meta"]["cases"] == 1
    assert "| onnxruntime | 1 | 0 | 0 | 0 | 1 |" in out.with_suffix(".md").read_text()
    r = subprocess.run([sys.executable, "-m", "provmap.bench.corpus", "--backends", "tpu"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "unknown backend(s) ['tpu']" in r.stderr
    assert "Traceback" not in r.stderr
    # -o: a directory is the records' root (its record: DIR/corpus/<host>.json and .md); a bad
    # -o is refused before the run
    from provmap.bench.records import record_stem

    d = tmp_path / "dir"
    r = subprocess.run([sys.executable, "-m", "provmap.bench.corpus", "--folders", "simple",
                        "--cases", "expand_shape_model1$", "--backends", "onnxruntime",
                        "--jobs", "1", "-o", str(d)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    stem = record_stem("corpus", d)
    assert stem.with_suffix(".json").is_file() and stem.with_suffix(".md").is_file()
    (tmp_path / "c.txt").write_text("")
    for bad, why in ((tmp_path / "none" / "c.json", "does not exist"),
                     (tmp_path / "c.txt", "not a directory")):
        r = subprocess.run([sys.executable, "-m", "provmap.bench.corpus", "-o", str(bad)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and why in r.stderr and "Traceback" not in r.stderr


def test_sampling_takes_every_folder_and_is_seeded():
    names = [f"{f}/c{i}" for f in ("node", "simple", "user") for i in range(20 if f == "node"
                                                                          else 3)]
    a, b = corpus.sample(names, 8, 0, None), corpus.sample(names, 8, 0, None)
    assert a == b and {x.split("/")[0] for x in a} == {"node", "simple", "user"}
    assert corpus.sample(names, 8, 1, None) != a or len(a) == len(names)
    assert np.all([x.startswith("simple/") for x in corpus.sample(names, None, 0, "^simple/")])


def test_cases_of_random_operators_leave_the_sample_counted(tmp_path):
    """Bernoulli's outputs are each library's draws: against onnx's expected outputs they were
    "wrong" on every backend.  Found in the graph (an _expanded case inlines its function body:
    RandomUniformLike), in subgraphs and in local functions; excluded, and said in meta."""
    from onnx import TensorProto, helper as h

    node = corpus.collect(["node"])
    names = ["node/test_relu", "node/test_bernoulli", "node/test_bernoulli_seed_expanded"]
    assert corpus.random_cases(node, names) == names[1:]
    x = h.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = h.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    draw = h.make_graph([h.make_node("RandomNormalLike", ["x"], ["y"])], "draw", [], [y])
    in_if = h.make_graph([h.make_node("If", ["c"], ["y"], then_branch=draw, else_branch=draw)],
                         "g", [h.make_tensor_value_info("c", TensorProto.BOOL, [])], [y])
    fn = h.make_function("local", "Noise", ["x"], ["y"],
                         [h.make_node("RandomUniformLike", ["x"], ["y"])],
                         [h.make_opsetid("", 17)])
    in_fn = h.make_graph([h.make_node("Noise", ["x"], ["y"], domain="local")], "g", [x], [y])
    models = {"if": h.make_model(in_if), "function": h.make_model(in_fn, functions=[fn])}
    cases = {k: (m.SerializeToString(), [], 0, 0) for k, m in models.items()}
    assert corpus.random_cases(cases, sorted(cases)) == ["function", "if"]
    assert corpus.excluded_note(1) == "excluded: 1 case of random operators"

    out = tmp_path / "c.json"
    res = _corpus_on_onnxruntime("node", "test_bernoulli|test_relu$", out)
    assert res["meta"]["cases"] == 1 and list(res["results"]) == ["node/test_relu"]
    assert res["meta"]["excluded"] == "excluded: 6 cases of random operators", res["meta"]
    assert res["table"]["onnxruntime"]["wrong"] == 0
    assert "excluded: 6 cases of random operators" in out.with_suffix(".md").read_text()
