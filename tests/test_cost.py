"""Cost cache and estimators, on real backends (only MockEstimator's own test is mock).

Misbehaving backends live in tests/crashing_backend.py so the isolated worker can import them.
"""

import multiprocessing as mp
import sqlite3
import tempfile

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import crashing_backend as cb
from provmap.partition.measure.cache import CostCache, default_path, host_fingerprint
from provmap.partition.candidate import Candidate, Estimate
from provmap.partition.compile import load_view
from provmap.partition.measure.measured import MeasuredEstimator
from provmap.partition.measure.cost import MockEstimator
from provmap.partition.measure.worker import backend_spec, timing_plan
from provmap.partition.measure.boundary import calibrate_boundary, crossing_s
from provmap.partition.measure.accuracy import make_inputs
from provmap.provenance.util.errors import ProvmapError
from provmap.runtime_module.registry import get_backend
from provmap.runtime_module.subgraph import Subgraph


# ------------------------------------------------------------------------------------------
# models
# ------------------------------------------------------------------------------------------

def _conv(name, x, y, cin, cout, seed):
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((cout, cin, 3, 3)).astype(np.float32) * 0.3,
                                f"{name}_w")
    b = numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32), f"{name}_b")
    return helper.make_node("Conv", [x, w.name, b.name], [y], name=name, pads=[1, 1, 1, 1]), [w, b]


def _model(nodes, inits, shape_in, shape_out):
    g = helper.make_graph(nodes, "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape_in)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape_out)],
                          initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(m, full_check=True)
    return m


def conv_relu_model():
    conv, inits = _conv("conv", "x", "c", 3, 8, 0)
    return _model([conv, helper.make_node("Relu", ["c"], ["y"], name="relu")], inits,
                  [1, 3, 16, 16], [1, 8, 16, 16])


def two_blocks_model():
    """Two structurally identical Conv->Relu blocks with different weight values."""
    c1, i1 = _conv("conv1", "x", "c1", 4, 4, 1)
    c2, i2 = _conv("conv2", "r1", "c2", 4, 4, 2)
    return _model([c1, helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
                   c2, helper.make_node("Relu", ["c2"], ["y"], name="relu2")],
                  i1 + i2, [1, 4, 16, 16], [1, 4, 16, 16])


@pytest.fixture(scope="module")
def view():
    return load_view(conv_relu_model(), "conv_relu")


@pytest.fixture(scope="module")
def real_backends():
    return {n: get_backend(n) for n in ("onnxruntime", "openvino", "tvm")}


def _all(v, backend):
    return Candidate(backend, frozenset(v.op_nodes), "whole-model")


# ------------------------------------------------------------------------------------------
# cache
# ------------------------------------------------------------------------------------------

def test_cache_round_trip(tmp_path):
    path = tmp_path / "c.sqlite"
    ort = get_backend("onnxruntime")
    with CostCache(path) as c:
        assert c.get("k1", ort) is None
        c.put("k1", ort, seconds=1.5e-3, spread=0.1, repeats=12, max_abs_err=None, label="m: a")
        c.put("k2", ort, seconds=None, reason="onnxruntime: build failed: x")
        assert c.stats() == {"hits": 0, "misses": 1, "writes": 2}
    with CostCache(path) as c:
        hit = c.get("k1", ort)
        assert (hit.seconds, hit.spread, hit.repeats, hit.label) == (1.5e-3, 0.1, 12, "m: a")
        assert hit.estimate() == Estimate(1.5e-3, spread=0.1, cached=True)
        bad = c.get("k2", ort).estimate()
        assert not bad.valid and bad.cached and "build failed" in bad.reason
        # other options, version or host: a different entry
        assert c.get("k1", get_backend("onnxruntime", threads=1)) is None
        assert c.get("k1", ("onnxruntime", "0.0", {})) is None
        assert c.stats() == {"hits": 2, "misses": 2, "writes": 0}
        assert len(c) == 2
        assert c.delete_invalid() == 1 and len(c) == 1
    assert CostCache(path, host="elsewhere").get("k1", ort) is None
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert dict(con.execute("SELECT name, value FROM provmap_meta"))["schema_version"] == "1"
    con.close()
    assert len(host_fingerprint()) == 12


def test_cache_refuses_foreign_files(tmp_path, monkeypatch):
    text = tmp_path / "notes.txt"
    text.write_text("hello, this is not a database at all" * 10)
    with pytest.raises(ProvmapError, match="not a provmap cost cache"):
        CostCache(text)
    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE users(name TEXT)")
    con.commit()
    con.close()
    with pytest.raises(ProvmapError, match="not a provmap cost cache"):
        CostCache(other)
    newer = tmp_path / "newer.sqlite"
    CostCache(newer).close()
    con = sqlite3.connect(newer)
    con.execute("UPDATE provmap_meta SET value = '99' WHERE name = 'schema_version'")
    con.commit()
    con.close()
    with pytest.raises(ProvmapError, match="schema version 99"):
        CostCache(newer)
    monkeypatch.setenv("PROVMAP_CACHE", str(tmp_path / "env.sqlite"))
    assert default_path() == tmp_path / "env.sqlite"
    CostCache().close()
    assert (tmp_path / "env.sqlite").exists()


def _writer(path, tag, n, ready, go):
    c = CostCache(path)
    ready.set()
    go.wait(30)
    for i in range(n):
        c.put(f"{tag}-{i}", ("onnxruntime", "1", {}), seconds=i * 1e-6, repeats=i,
              label=f"{tag} {i}")
    c.close()


def test_cache_two_processes_write_at_once(tmp_path):
    path = tmp_path / "shared.sqlite"
    ctx = mp.get_context("spawn")
    go = ctx.Event()
    readies = [ctx.Event(), ctx.Event()]
    procs = [ctx.Process(target=_writer, args=(str(path), tag, 200, r, go))
             for tag, r in zip(("a", "b"), readies)]
    for p in procs:
        p.start()
    for r in readies:
        assert r.wait(60)
    go.set()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    with CostCache(path) as c:
        assert len(c) == 400
        for tag in "ab":
            for i in range(200):
                hit = c.get(f"{tag}-{i}", ("onnxruntime", "1", {}))
                assert hit is not None and hit.repeats == i
        assert c.stats()["hits"] == 400


def _create_and_write(path, q):
    try:
        with CostCache(path) as c:
            c.put("k", ("onnxruntime", "1", {}), seconds=1e-6, repeats=1, label="race")
        q.put("ok")
    except Exception as e:  # the parent reports it
        q.put(f"{type(e).__name__}: {e}")


def test_processes_creating_the_same_new_cache_file_at_once_all_open_it(tmp_path):
    """SQLite's busy handler does not cover the journal-mode switch of a new file: before
    `_open` retried, about 1 three-way race in 70 failed at once with "locked"."""
    ctx = mp.get_context("fork")
    for trial in range(40):
        path = str(tmp_path / f"race{trial}.sqlite")
        q = ctx.Queue()
        procs = [ctx.Process(target=_create_and_write, args=(path, q)) for _ in range(3)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        results = [q.get(timeout=5) for _ in procs]
        assert results == ["ok"] * 3, (trial, results)
        with CostCache(path) as c:
            assert len(c) == 1


# ------------------------------------------------------------------------------------------
# estimators
# ------------------------------------------------------------------------------------------

def test_mock_estimator(view):
    ops = frozenset(view.op_nodes)
    m = MockEstimator({("tvm", ops): 2e-3, ("openvino", ops): Estimate(None, "nope")})
    assert m.estimate(view, Candidate("tvm", ops)) == Estimate(2e-3)
    assert m.estimate(view, Candidate("openvino", ops)).reason == "nope"
    missing = m.estimate(view, Candidate("onnxruntime", ops))
    assert not missing.valid and "no mock cost" in missing.reason
    f = MockEstimator(lambda v, c: 1e-3 * len(c) if c.backend == "tvm" else None)
    assert f.estimate(view, Candidate("tvm", ops)).seconds == pytest.approx(2e-3)
    assert not f.estimate(view, Candidate("onnxruntime", ops)).valid
    assert m.stats() == {"calls": 3}


def test_inputs_are_deterministic(view):
    sub = Subgraph(view, view.op_nodes)
    a, b = make_inputs(sub.inputs, sub.key), make_inputs(sub.inputs, sub.key)
    assert np.array_equal(a["x"], b["x"]) and a["x"].dtype == np.float32
    from provmap.runtime_module.graph_view import TensorSpec
    ints = make_inputs([TensorSpec("i", (3,), "int64")], "k")
    assert ints["i"].tolist() == [0, 0, 0]


def test_timing_plan_caps_slow_candidates():
    st = {"warmup": 2, "repeats": 10, "max_time_s": 0.5}
    assert timing_plan(st, 1e-3) == (2, 10)
    assert timing_plan(st, 0.09) == (1, 5)
    assert timing_plan(st, 2.0) == (1, 3)
    assert timing_plan(dict(st, max_time_s=None), 2.0) == (2, 10)


def test_measured_on_real_backends_then_cache_hits(tmp_path, view, real_backends):
    path = tmp_path / "costs.sqlite"
    seen = []
    with MeasuredEstimator(real_backends, CostCache(path), repeats=5, min_time_s=0.01,
                           progress=lambda *a: seen.append(a)) as est:
        est.begin(3)
        ests = {n: est.estimate(view, _all(view, n)) for n in real_backends}
        for n, e in ests.items():
            assert e.valid, (n, e.reason)
            assert 0 < e.seconds < 0.1 and not e.cached
        assert ests["onnxruntime"].max_abs_err is None  # the reference is not checked
        assert ests["openvino"].max_abs_err < 1e-4 and ests["tvm"].max_abs_err < 1e-4
        s = est.stats()
        assert (s["measured"], s["cache_hits"], s["invalid"], s["unchecked"]) == (3, 0, 0, 0)
        assert s["worker_starts"] == 1 and s["worker_crashes"] == 0
        assert s["cache"]["writes"] == 3
        assert [x[:2] for x in seen] == [(1, 3), (2, 3), (3, 3)] and seen[-1][2] == 0
    with MeasuredEstimator(real_backends, CostCache(path)) as again:
        for n in real_backends:
            e = again.estimate(view, _all(view, n))
            assert e.cached and e.seconds == ests[n].seconds
        s = again.stats()
        assert (s["measured"], s["cache_hits"], s["measure_s"]) == (3 - 3, 3, 0.0)
        assert s["worker_starts"] == 0  # nothing to measure: no worker was even started
    rows = CostCache(path).entries()
    assert {r["backend"] for r in rows} == {"onnxruntime", "openvino", "tvm"}
    assert all("conv_relu: 2 op(s) #0 Conv 'conv'" in r["label"] for r in rows)


def test_repeated_blocks_share_one_entry(tmp_path):
    v = load_view(two_blocks_model(), "two_blocks")
    b1, b2 = frozenset(v.op_nodes[:2]), frozenset(v.op_nodes[2:])
    assert Subgraph(v, b1).key == Subgraph(v, b2).key
    with MeasuredEstimator({"tvm": get_backend("tvm")}, CostCache(tmp_path / "c.sqlite"),
                           repeats=3, min_time_s=0.0, isolate=False) as est:
        e1 = est.estimate(v, Candidate("tvm", b1))
        e2 = est.estimate(v, Candidate("tvm", b2))
        assert e1.valid and not e1.cached and e1.max_abs_err is not None
        assert e2.cached and e2.seconds == e1.seconds
        s = est.stats()
        assert (s["measured"], s["cache_hits"]) == (1, 1)
        assert len(est.cache) == 1


def test_failures_crashes_and_accuracy_guard(tmp_path, view):
    backends = {"onnxruntime": get_backend("onnxruntime"), "failing": cb.FailingBackend(),
                "crashy": cb.CrashingBackend(), "perturbed": cb.PerturbingBackend()}
    assert backend_spec(backends["crashy"]) == "crashing_backend:CrashingBackend"
    assert backend_spec(backends["onnxruntime"]) == "onnxruntime"
    with MeasuredEstimator(backends, CostCache(tmp_path / "c.sqlite"), repeats=3,
                           min_time_s=0.0) as est:
        bad = est.estimate(view, _all(view, "failing"))
        assert not bad.valid and bad.reason == "failing: build failed: no kernel for anything"
        crash = est.estimate(view, _all(view, "crashy"))
        assert not crash.valid and "crashed" in crash.reason and "SIGABRT" in crash.reason
        ok = est.estimate(view, _all(view, "onnxruntime"))  # the worker was restarted
        assert ok.valid and ok.seconds > 0
        wrong = est.estimate(view, _all(view, "perturbed"))
        assert not wrong.valid and wrong.reason.startswith("accuracy guard: max abs err 0.1")
        assert "vs onnxruntime" in wrong.reason and wrong.max_abs_err == pytest.approx(0.1, rel=1e-4)
        again = est.estimate(view, _all(view, "crashy"))  # a cached verdict: no second crash
        assert again.cached and "SIGABRT" in again.reason
        s = est.stats()
        assert s["worker_crashes"] == 1 and s["worker_starts"] == 2
        assert (s["measured"], s["cache_hits"], s["invalid"]) == (4, 1, 4)
        assert [r["backend"] for r in s["invalid_reasons"]] == \
            ["failing", "crashy", "perturbed", "crashy"]


def test_a_crash_in_prepare_costs_only_its_time(tmp_path, view):
    """Backend.prepare (a tuner's once-for-many work) runs in the measuring worker: if it dies
    there, the report says so and every candidate is still measured."""
    backends = {"crashyprepare": cb.CrashingPrepareBackend(),
                "onnxruntime": get_backend("onnxruntime")}
    with MeasuredEstimator(backends, CostCache(tmp_path / "c.sqlite"), repeats=3,
                           min_time_s=0.0) as est:
        said = []
        rep = est.prepare(view, [_all(view, "crashyprepare"), _all(view, "onnxruntime")],
                          log=said.append)
        assert "onnxruntime" not in rep  # the base class's prepare has nothing to do
        assert "SIGABRT" in rep["crashyprepare"]["error"]
        assert said and "crashyprepare: preparing 1 region(s) failed" in said[0]
        e = est.estimate(view, _all(view, "crashyprepare"))
        assert e.valid and e.seconds > 0
        s = est.stats()
        assert s["prepared"]["crashyprepare"]["error"] == rep["crashyprepare"]["error"]
        assert s["worker_crashes"] == 1


@pytest.mark.parametrize("start_method", ["spawn", "fork"])
def test_timeout_kills_worker_and_is_not_cached(tmp_path, view, monkeypatch, start_method):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # this process's, and the worker's
    monkeypatch.setenv("TMPDIR", str(scratch))
    backends = {"hanging": cb.HangingBackend(), "onnxruntime": get_backend("onnxruntime")}
    with MeasuredEstimator(backends, CostCache(tmp_path / "c.sqlite"), repeats=3, min_time_s=0.0,
                           timeout_s=3, start_method=start_method) as est:
        e = est.estimate(view, _all(view, "hanging"))
        assert not e.valid and e.reason.startswith("timed out after 3 s")
        assert list(scratch.glob("**/provmap-hang-*")) == []  # its scratch files went with it
        assert est.estimate(view, _all(view, "onnxruntime")).valid
        assert len(est.cache) == 1  # only the valid one


def test_in_process_matches_isolated_verdicts(view):
    backends = {"failing": cb.FailingBackend(), "perturbed": cb.PerturbingBackend(),
                "onnxruntime": get_backend("onnxruntime")}
    with MeasuredEstimator(backends, None, repeats=3, min_time_s=0.0, isolate=False) as est:
        assert "no kernel" in est.estimate(view, _all(view, "failing")).reason
        assert "accuracy guard" in est.estimate(view, _all(view, "perturbed")).reason
        assert est.estimate(view, _all(view, "onnxruntime")).valid
        assert "worker_starts" not in est.stats()
    off = MeasuredEstimator(backends, None, repeats=3, min_time_s=0.0, isolate=False,
                            check_accuracy=False)
    assert off.estimate(view, _all(view, "perturbed")).valid


def test_calibrate_boundary():
    cal = calibrate_boundary({"onnxruntime": get_backend("onnxruntime")}, min_time_s=0.05)
    assert 0 < cal["fixed_s"]["onnxruntime"] < 1e-3
    assert 0 < cal["per_byte_s"] < 1e-8
    assert crossing_s(cal, 10**6, "tvm", "tvm") == 0.0
    assert crossing_s(cal, 10**6, "tvm", "onnxruntime") == pytest.approx(
        cal["fixed_s"]["onnxruntime"] + 10**6 * cal["per_byte_s"])


def test_measuring_budget_keeps_single_ops_and_whole_model(tmp_path):
    v = load_view(two_blocks_model(), "two_blocks")
    ops = list(v.op_nodes)
    ort = {"onnxruntime": get_backend("onnxruntime")}
    with MeasuredEstimator(ort, CostCache(tmp_path / "c.sqlite"), repeats=3, min_time_s=0.0,
                           isolate=False, budget_s=0.0) as est:
        pair = est.estimate(v, Candidate("onnxruntime", frozenset(ops[:2]), "combine"))
        assert not pair.valid and "budget" in pair.reason
        assert est.estimate(v, Candidate("onnxruntime", frozenset(ops[:1]), "single-op")).valid
        assert est.estimate(v, _all(v, "onnxruntime")).valid
        s = est.stats()
        assert s["skipped_budget"] == 1 and s["measured"] == 2 and s["invalid"] == 0
    # Skipped regions are not cached: a run with time to spare measures them.
    with MeasuredEstimator(ort, CostCache(tmp_path / "c.sqlite"), repeats=3, min_time_s=0.0,
                           isolate=False) as est:
        assert est.estimate(v, Candidate("onnxruntime", frozenset(ops[:2]), "combine")).valid
        assert est.stats()["measured"] == 1
    # Cache hits are free, even past the budget.
    with MeasuredEstimator(ort, CostCache(tmp_path / "c.sqlite"), isolate=False,
                           budget_s=0.0) as est:
        assert est.estimate(v, Candidate("onnxruntime", frozenset(ops[:2]), "combine")).valid
        assert est.stats()["cache_hits"] == 1


def test_progress_eta_never_promises_more_than_the_budget_left(tmp_path):
    """Issue 36: `measured 1/260, ETA 1168 s` under a 30 s budget.  The rate so far times the
    candidates left overstates a search whose remaining regions are skipped once the budget is
    spent; every ETA the progress callback gets is at most the measuring budget left."""
    v = load_view(two_blocks_model(), "two_blocks")
    ops = list(v.op_nodes)
    runs = [frozenset(ops[i:i + n]) for n in (4, 3, 2) for i in range(len(ops) - n + 1)]
    cands = [Candidate("onnxruntime", r, "whole-model" if len(r) == 4 else "combine")
             for r in runs] + [Candidate("onnxruntime", frozenset([o]), "single-op") for o in ops]
    budget = 1e-6  # any measurement (an ORT session build, 5-30 ms by host) spends it at once
    seen = []

    def progress(done, total, eta):
        seen.append((done, total, eta, budget - est.stats()["measure_s"]))

    with MeasuredEstimator({"onnxruntime": get_backend("onnxruntime")},
                           CostCache(tmp_path / "c.sqlite"), repeats=3, min_time_s=0.0,
                           isolate=False, budget_s=budget, progress=progress) as est:
        est.begin(len(cands))
        for c in cands:
            est.estimate(v, c)
        s = est.stats()
    assert [d for d, *_ in seen] == list(range(1, len(cands) + 1)), seen
    assert s["skipped_budget"] > 0 and s["measure_s"] > budget, s  # the budget ran out
    for done, total, eta, left in seen:
        assert 0 <= eta <= max(left, 0.0), (done, total, eta, left)
    # single ops are still measured past the budget: the rate alone would have promised more
    assert any(eta == 0 and done < total for done, total, eta, _ in seen), seen
