"""TVM regions tuned with MetaSchedule (tvm tune=metaschedule): the database is reused across
processes, the trial budget holds, and an artifact rebuilds from records without re-tuning.

Trial counts are tiny (a handful per task) on a tiny region: these tests check what is tuned,
reused and applied, and that tuned code computes the right numbers, never how fast it is."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from provmap.partition.measure.cache import backend_identity
from provmap.partition.model_source import load_view
from provmap.runtime_module.backends.tvm_tuning import TuningDatabase, make_target
from provmap.runtime_module.registry import get_backend
from provmap.runtime_module.subgraph import Subgraph


def _two_task_model(path) -> None:
    """MatMul+Add+Relu, then a second MatMul: two fused TIR functions, i.e. two tasks."""
    rng = np.random.default_rng(0)

    def init(name, shape):
        return helper.make_tensor(name, TensorProto.FLOAT, shape,
                                  rng.standard_normal(shape).astype(np.float32).ravel().tolist())

    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W1"], ["m1"], name="mm1"),
         helper.make_node("Add", ["m1", "b1"], ["a1"], name="add1"),
         helper.make_node("Relu", ["a1"], ["r1"], name="relu1"),
         helper.make_node("MatMul", ["r1", "W2"], ["y"], name="mm2")],
        "two_tasks",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 24])],
        [init("W1", [16, 32]), init("b1", [32]), init("W2", [32, 24])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    p = tmp_path_factory.mktemp("tune") / "two_tasks.onnx"
    _two_task_model(str(p))
    return str(p)


_BUILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    from provmap.partition.model_source import load_view
    from provmap.runtime_module.registry import get_backend
    from provmap.runtime_module.subgraph import Subgraph
    model, db, trials, budget = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    view = load_view(model)
    sub = Subgraph(view, view.op_nodes)
    tvm = get_backend("tvm", tune="metaschedule", trials=trials, tune_budget=budget,
                      tuning_db=db)
    blob = tvm.build(sub)
    x = np.random.default_rng(1).standard_normal((8, 16)).astype(np.float32)
    got = tvm.load(blob)([x])[0]
    ort = get_backend("onnxruntime")
    want = ort.load(ort.build(sub))([x])[0]
    print(json.dumps({"tuning": blob.meta["tuning"], "target": blob.meta["target"],
                      "max_err": float(np.abs(got - want).max())}))
""")


def _build_in_fresh_process(model, db, trials, budget) -> dict:
    r = subprocess.run([sys.executable, "-c", _BUILD, model, str(db), str(trials), str(budget)],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "tvm tune:" in r.stderr or "tuned" in r.stdout  # progress goes to stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_database_reused_across_processes_and_budget_respected(model_path, tmp_path):
    db = tmp_path / "db"
    # Budget 4 trials, 4 per task, 2 tasks: one task can be tuned, the other is left untuned.
    first = _build_in_fresh_process(model_path, db, 4, 4)
    t = first["tuning"]
    assert t["tasks"] == 2 and t["reused"] == 0
    assert 1 <= t["trials"] <= 4
    assert t["tuned"] + t["untuned"] == 2 and t["untuned"] >= 1
    assert first["max_err"] < 1e-3  # tuned (and untuned) kernels compute the same numbers
    assert '"mcpu"' in first["target"]  # tuning builds for this host's CPU

    # A second process with a larger budget: what the first tuned comes from the database,
    # only the rest is tuned now.
    second = _build_in_fresh_process(model_path, db, 4, 100)
    t2 = second["tuning"]
    assert t2["reused"] == t["tuned"]
    assert t2["tuned"] == 2 - t["tuned"] and t2["untuned"] == 0
    assert t2["trials"] <= 4 * (2 - t["tuned"])
    assert second["max_err"] < 1e-3

    # A third: everything from the database, nothing tuned.
    third = _build_in_fresh_process(model_path, db, 4, 100)
    assert third["tuning"]["reused"] == 2 and third["tuning"]["trials"] == 0
    assert third["tuning"]["tuned"] == 0


def test_budget_zero_builds_untuned(model_path, tmp_path):
    view = load_view(model_path)
    be = get_backend("tvm", tune="metaschedule", trials=4, tune_budget=0,
                     tuning_db=str(tmp_path / "db"))
    blob = be.build(Subgraph(view, view.op_nodes))
    t = blob.meta["tuning"]
    assert t["trials"] == 0 and t["untuned"] == 2 and t["tuned"] == 0
    # Still a working build, with provenance: every kernel maps to expressions.
    assert blob.kernels and all(k.exprs for k in blob.kernels)


def test_records_of_another_scope_are_reported_not_used(tmp_path):
    here = TuningDatabase(tmp_path, make_target("native", 2))
    other = TuningDatabase(tmp_path, make_target("", 2))  # another target: another scope
    assert here.dir != other.dir
    other.dir.mkdir(parents=True)
    (other.dir / "database_tuning_record.json").write_text('[0, []]\n[0, []]\n')
    assert here.foreign_records() == 2 and other.foreign_records() == 0


def test_tuned_prices_are_keyed_apart_and_the_db_location_is_not():
    plain = backend_identity(get_backend("tvm"))
    tuned = backend_identity(get_backend("tvm", tune="metaschedule", trials=8))
    elsewhere = backend_identity(get_backend("tvm", tune="metaschedule", trials=8,
                                             tuning_db="/somewhere/else"))
    more = backend_identity(get_backend("tvm", tune="metaschedule", trials=64))
    assert plain != tuned and tuned == elsewhere and tuned != more


def test_bad_tune_option_is_one_clear_error():
    from provmap.runtime_module.backend import BackendError

    with pytest.raises(BackendError, match="tune='autotvm'"):
        get_backend("tvm", tune="autotvm")
    with pytest.raises(BackendError, match="trials=.many.: expected an integer >= 1"):
        get_backend("tvm", tune="metaschedule", trials="many")


def test_compiled_artifact_rebuilds_from_records_in_a_fresh_process(model_path, tmp_path):
    """provmap compile twice on one database: the second tunes nothing, and the artifact
    computes what ONNX Runtime computes."""
    db = tmp_path / "db"
    cmd = [sys.executable, "-m", "provmap.cli.main", "compile", model_path,
           "--strategy", "single:tvm", "--backend-option", "tvm.tune=metaschedule",
           "--backend-option", "tvm.trials=3", "--tuning-db", str(db), "--json"]
    runs = []
    for i in range(2):
        out = tmp_path / f"a{i}.provmap"
        r = subprocess.run(cmd + ["-o", str(out)], capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stderr[-3000:]
        runs.append(json.loads(r.stdout))
    assert runs[0]["tuning"]["tuned"] >= 1
    assert runs[1]["tuning"] == {**runs[1]["tuning"], "tuned": 0, "trials": 0,
                                 "reused": runs[0]["tuning"]["tuned"]}

    import provmap

    mod = provmap.load(str(tmp_path / "a1.provmap"))
    x = np.random.default_rng(2).standard_normal((8, 16)).astype(np.float32)
    got = mod.run({"x": x})
    view = load_view(model_path)
    ort = get_backend("onnxruntime")
    want = ort.load(ort.build(Subgraph(view, view.op_nodes)))([x])[0]
    np.testing.assert_allclose(list(got.values())[0], want, rtol=1e-4, atol=1e-4)


def test_collage_search_tunes_tvm_candidates_and_a_second_search_tunes_nothing(
        model_path, tmp_path, monkeypatch):
    """A search over tuned TVM and ONNX Runtime reports what tuning did; a second search with
    an empty cost cache (so every candidate is built again) finds every record in the
    database; the artifact computes what ONNX Runtime computes."""
    import provmap
    from provmap.partition.collage import CollageOptions

    monkeypatch.setenv("PROVMAP_TUNING_DB", str(tmp_path / "db"))  # the worker inherits it
    strategy = "collage:tvm[tune=metaschedule;trials=2],onnxruntime"
    reports = []
    for i in range(2):
        opts = CollageOptions(max_size=1, max_depth=1, cache_path=str(tmp_path / f"c{i}.sqlite"),
                              e2e_check=False, refine_budget_s=0.0, in_context=False)
        art = provmap.compile(model_path, strategy=strategy, collage_options=opts,
                              out=str(tmp_path / f"a{i}.provmap"))
        search = art.manifest["plan_info"]["collage"]
        reports.append(search["estimator"]["tuning"])
        # A tuning backend makes the search price every candidate up front (so a later search,
        # whatever it asks for, finds every region's records); here all regions are distinct.
        assert search["estimator"]["measured"] == search["candidates"]["after_pruning"]
    first, second = reports
    # The distinct tasks of every candidate are tuned up front in one session; each region's
    # build then finds all of its tasks in the database.
    up = first["up_front"]
    assert up["regions"] >= 3 and up["tasks"] >= 3
    assert up["tuned"] + up["reused"] + up["untuned"] == up["tasks"]
    assert up["tuned"] >= 1 and up["trials"] >= 1
    assert first["tuned"] == up["tuned"] and first["trials"] == up["trials"]
    assert first["regions"] >= 3 and first["reused"] == first["tasks"] >= up["tasks"]
    assert first["untuned"] == 0
    assert second["tuned"] == 0 and second["trials"] == 0
    assert second["up_front"]["reused"] == up["tasks"]
    assert second["reused"] == second["tasks"] == first["tasks"]

    x = np.random.default_rng(3).standard_normal((8, 16)).astype(np.float32)
    got = list(provmap.load(str(tmp_path / "a1.provmap")).run({"x": x}).values())[0]
    view = load_view(model_path)
    ort = get_backend("onnxruntime")
    want = ort.load(ort.build(Subgraph(view, view.op_nodes)))([x])[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
