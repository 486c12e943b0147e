"""Independent partitions run at once (runtime_module/schedule.py, the executor in module.py).

Real backends throughout: ONNX Runtime and OpenVINO partitions, and ONNX Runtime subclasses
from tests/crashing_backend.py registered through a real `provmap.backends` entry point (a
dist-info directory written into a temp dir, as test_plugin_backend.py does), which fail at run
time or meet at a barrier that only partitions running at the same time can pass.
"""

import json
import os
import threading
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import small_models as sm

import crashing_backend as cb
from cli_runner import one_error, provmap
from provmap.partition.compile import compile_model, load_view
from provmap.provenance.util.errors import ProvmapError
from provmap.runtime_module import schedule as S
from provmap.runtime_module.artifact import read_artifact
from provmap.runtime_module.artifact_edit import with_schedule
from provmap.runtime_module.module import ArtifactModule, load
from quick_rule import QUICK_RULE

TESTS = Path(__file__).resolve().parent
SPLIT = {"onnxruntime": {"exclude_ops": ["Tanh", "Sigmoid"]}}


def _ort_reference(model, feeds):
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """The recording and failing backends as installed plugins; returns the site dir."""
    site = tmp_path / "site"
    d = site / "provmap_test_backends-0.1.dist-info"
    d.mkdir(parents=True)
    (d / "METADATA").write_text("Metadata-Version: 2.1\nName: provmap-test-backends\n"
                                "Version: 0.1\n")
    eps = {"slowpoke": "SlowBackend", "slowpoke2": "SlowBackend2", "runfail": "RunFailingBackend"}
    (d / "entry_points.txt").write_text("[provmap.backends]\n" + "".join(
        f"{k} = crashing_backend:{v}\n" for k, v in eps.items()))
    monkeypatch.syspath_prepend(str(site))
    cb.SlowBackend.FINISHED.clear()
    yield site
    cb.SlowBackend.DELAY_S, cb.SlowBackend.MEET = 0.0, None
    cb.SlowBackend.FINISHED.clear()


def _branches(strategy, options=SPLIT):
    return compile_model(load_view(sm.branches(), "branches"), strategy, backend_options=options)


def test_concurrent_schedule_matches_serial_and_ort_with_threads_per_partition():
    art = _branches("greedy:onnxruntime,openvino")
    parts = art.manifest["partitions"]
    assert [p["backend"] for p in parts] == ["onnxruntime", "openvino", "onnxruntime"]
    assert S.asap_stages(parts) == [["p0", "p1"], ["p2"]]
    conc = with_schedule(art, S.make_schedule(parts, {"p0": 1, "p1": 1}))
    assert conc.manifest["format_version"] == 2 and art.manifest["format_version"] == 1
    serial, par = ArtifactModule(art, trust=True), ArtifactModule(conc, trust=True)
    try:
        feeds = serial.random_inputs(3)
        want = _ort_reference(sm.branches(), feeds)
        a, b = serial.run(feeds), par.run(feeds)
        for name in ("y", "s"):
            assert np.array_equal(a[name], b[name])
            np.testing.assert_allclose(b[name], want[name], rtol=1e-3, atol=1e-6)
        # The schedule's thread counts reached the libraries.
        so = par.partitions[0].runner.sess.get_session_options()
        assert so.intra_op_num_threads == 1
        compiled = par.partitions[1].runner.compiled
        assert int(compiled.get_property("INFERENCE_NUM_THREADS")) == 1
        assert serial.partitions[0].runner.sess.get_session_options().intra_op_num_threads == 0
        assert par._pool is not None and serial._pool is None
    finally:
        serial.close()
        par.close()


def test_partitions_of_one_stage_really_run_at_once(plugins):
    # Both branch partitions wait at a 2-party barrier: a serial executor leaves the first
    # alone there until the barrier breaks.
    art = _branches("greedy:slowpoke,slowpoke2", {"slowpoke": {"exclude_ops": ["Tanh", "Sigmoid"]}})
    parts = art.manifest["partitions"]
    assert S.asap_stages(parts) == [["p0", "p1"], ["p2"]]
    cb.SlowBackend.MEET, cb.SlowBackend.MEET_TIMEOUT_S = threading.Barrier(2), 2.0
    mod = ArtifactModule(with_schedule(art, S.make_schedule(parts)), trust=True)
    try:
        out = mod.run(mod.random_inputs(0))
    finally:
        mod.close()
    assert set(out) == {"y", "s"}
    assert sorted(cb.SlowBackend.FINISHED[:2]) == [("r",), ("s",)]
    cb.SlowBackend.MEET = threading.Barrier(2)
    serial = ArtifactModule(art, trust=True)
    try:
        with pytest.raises(ProvmapError, match=r"partition p0 \(slowpoke\) failed"):
            serial.run(serial.random_inputs(0))
    finally:
        serial.close()


def test_a_failing_partition_is_reported_after_its_stage_is_joined(plugins):
    art = _branches("greedy:slowpoke,runfail", {"slowpoke": {"exclude_ops": ["Tanh", "Sigmoid"]}})
    parts = art.manifest["partitions"]
    assert [p["backend"] for p in parts] == ["slowpoke", "runfail", "slowpoke"]
    cb.SlowBackend.DELAY_S = 0.3  # the partner is still running when p1 fails
    mod = ArtifactModule(with_schedule(art, S.make_schedule(parts)), trust=True)
    try:
        with pytest.raises(ProvmapError) as e:
            mod.run(mod.random_inputs(0))
        assert str(e.value) == "partition p1 (runfail) failed: runfail: kernel faulted at run time"
        # p0 was joined before the error came back; p2 (next stage) never started.
        assert cb.SlowBackend.FINISHED == [("r",)]
        # The module still works for the next call (nothing wedged in the pool).
        with pytest.raises(ProvmapError, match="runfail"):
            mod.run(mod.random_inputs(1))
    finally:
        mod.close()


def test_failing_partition_through_the_cli_is_one_error_line(plugins, tmp_path):
    art = _branches("greedy:slowpoke,runfail", {"slowpoke": {"exclude_ops": ["Tanh", "Sigmoid"]}})
    path = tmp_path / "fail.provmap"
    with_schedule(art, S.make_schedule(art.manifest["partitions"])).save(path,
                                                                       record_built=True)
    r = provmap("run", path, "--random", timeout=120,
                env={**os.environ, "PYTHONPATH": f"{plugins}:{TESTS}"})
    one_error(r, "partition p1 (runfail) failed: runfail: kernel faulted at run time")


def test_schedule_is_recorded_inspected_and_old_artifacts_run_serially(tmp_path):
    art = _branches("greedy:onnxruntime,openvino")
    serial_path, conc_path = tmp_path / "serial.provmap", tmp_path / "conc.provmap"
    art.save(serial_path)
    with_schedule(art, S.make_schedule(art.manifest["partitions"], {"p0": 1, "p1": 1},
                                       why="test")).save(conc_path)
    stored = read_artifact(conc_path).manifest
    assert stored["schedule"] == {"stages": [["p0", "p1"], ["p2"]],
                                  "threads": {"p0": 1, "p1": 1}, "why": "test"}
    assert "schedule" not in read_artifact(serial_path).manifest
    assert load(serial_path).schedule is None
    r = provmap("inspect", str(conc_path))
    assert r.returncode == 0, r.stderr
    assert "schedule: p0+p1 | p2 (threads p0=1, p1=1)" in r.stdout
    r = provmap("inspect", str(serial_path))
    assert "schedule: serial" in r.stdout
    info = json.loads(provmap("inspect", str(conc_path), "--json").stdout)
    assert info["schedule"]["stages"] == [["p0", "p1"], ["p2"]]
    r = provmap("explain", str(conc_path))
    assert r.returncode == 0, r.stderr
    assert "schedule: p0+p1 | p2 (threads p0=1, p1=1)" in r.stdout
    r = provmap("run", str(conc_path), "--random", "-o", str(tmp_path / "o.npz"))
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("stages, msg", [
    ([["p0", "p1", "p2"]], "partition p2 (stage 0) reads an output of p0 (stage 0)"),
    ([["p0", "p1"]], "partition p2 is in no stage"),
    ([["p0"], ["p1", "p0"], ["p2"]], "partition p0 is in stages 0 and 1"),
    ([["p0", "p9"], ["p1", "p2"]], "stage 0 names 'p9'"),
])
def test_an_impossible_schedule_is_refused(stages, msg):
    art = _branches("greedy:onnxruntime,openvino")
    with pytest.raises(ProvmapError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        with_schedule(art, {"stages": stages, "threads": {}})


def test_second_level_measures_concurrent_schedules_and_explain_shows_the_numbers():
    from provmap.partition.schedule_search import search_schedules
    from provmap.workbench.explain import explain_artifact, format_explain

    art = _branches("greedy:onnxruntime,openvino")
    report: dict = {}
    kept = search_schedules(art, "greedy", report, QUICK_RULE, cores=2)
    found = report["schedule_search"]
    assert [t["change"].split(":")[0] for t in found["trail"]] == [
        "run independent partitions at once, each backend with its own threads",
        "run independent partitions at once, 2 core(s) split among them"]
    assert found["trail"][1]["schedule"]["threads"] == {"p0": 1, "p1": 1}
    for t in found["trail"]:
        assert t["status"] in ("kept", "rejected"), t
        assert t["proposal"]["median_ms"] > 0 and t["incumbent"]["median_ms"] > 0
    assert found["kept"] == sum(t["status"] == "kept" for t in found["trail"])
    assert (kept.manifest.get("schedule") is None) == (found["kept"] == 0)
    mod = ArtifactModule(kept, trust=True)
    ref = ArtifactModule(art, trust=True)
    try:
        feeds = ref.random_inputs(0)
        got, want = mod.run(feeds), ref.run(feeds)
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)
    finally:
        mod.close()
        ref.close()
    manifest = dict(kept.manifest, plan_info={"collage": {"schedule_search": found}})
    text = format_explain(explain_artifact(manifest))
    for t in found["trail"]:
        verdict = "kept because" if t["status"] == "kept" else "rejected:"
        assert (f"[{t['status']}] {t['change']}: {verdict} {t['proposal']['median_ms']:.3f} vs "
                f"{t['incumbent']['median_ms']:.3f} ms median") in text


def test_a_plan_without_independent_partitions_proposes_no_schedule():
    from provmap.partition.schedule_search import search_schedules

    art = compile_model(load_view(sm.conv_relu(), "cr"), "greedy:onnxruntime,openvino",
                        backend_options={"onnxruntime": {"exclude_ops": ["Relu"]}})
    assert len(art.manifest["partitions"]) == 2
    report: dict = {}
    assert search_schedules(art, "greedy", report) is art
    assert report["schedule_search"]["trail"] == []


@pytest.mark.slow
def test_collage_second_level_runs_the_schedule_search(tmp_path):
    from provmap.partition.collage import CollageOptions

    opts = CollageOptions(max_depth=3, max_size=4, cache_path=str(tmp_path / "c.sqlite"),
                          rule=QUICK_RULE, refine_budget_s=5.0,
                          pins=["tanh_b=openvino", "sigmoid_b=openvino", "mm_a=onnxruntime",
                                "relu_a=onnxruntime", "join=onnxruntime"], cuts=["relu_a"])
    # The join pinned too: left to the search, the price of a change of library (issue 35)
    # may put it with the OpenVINO branch (one switch instead of two), and the two partitions
    # left are then not independent.  The pins make the plan the one this test is about.
    art = compile_model(load_view(sm.branches(), "branches"), "collage:onnxruntime,openvino",
                        collage_options=opts, out=tmp_path / "b.provmap")
    assert len(art.manifest["partitions"]) == 3, art.manifest["partitions"]
    found = art.manifest["plan_info"]["collage"]["schedule_search"]
    assert len(found["trail"]) == 2 and all(t["status"] in ("kept", "rejected")
                                            for t in found["trail"])
    r = provmap("explain", tmp_path / "b.provmap")
    assert r.returncode == 0, r.stderr
    assert "concurrent schedules measured end to end against" in r.stdout
    # A schedule kept with the plan is honoured when the plan is reused from the cache.
    from provmap.partition.measure.cache import CostCache
    from provmap.partition.collage import plan_cache_keys
    from provmap.runtime_module.registry import get_backend

    view = load_view(sm.branches(), "branches")
    keys = plan_cache_keys(view, {n: get_backend(n) for n in ("onnxruntime", "openvino")}, opts)
    cache = CostCache(opts.cache_path)
    stored, rep, _created = cache.get_plan(*keys)
    assert stored["schedule"] == art.manifest.get("schedule")
    stored["schedule"] = S.make_schedule(art.manifest["partitions"], {"p0": 1, "p1": 1})
    cache.put_plan(*keys, stored, rep)
    cache.close()
    again = compile_model(view, "collage:onnxruntime,openvino", collage_options=opts)
    assert again.manifest["plan_info"]["collage"]["plan_cache"]["reused"]
    assert again.manifest["schedule"]["threads"] == {"p0": 1, "p1": 1}
    mod = ArtifactModule(again, trust=True)
    try:
        feeds = mod.random_inputs(0)
        want, got = _ort_reference(sm.branches(), feeds), mod.run(feeds)
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-3, atol=1e-6)
    finally:
        mod.close()


def test_a_tvm_partition_gets_its_thread_count_on_the_calling_threads_pool():
    import tvm

    num_threads = tvm.get_global_func("runtime.NumThreads")
    art = _branches("greedy:tvm,openvino", {"tvm": {"exclude_ops": ["Tanh", "Sigmoid"]}})
    parts = art.manifest["partitions"]
    assert [p["backend"] for p in parts] == ["tvm", "openvino", "tvm"]
    conc = ArtifactModule(with_schedule(art, S.make_schedule(parts, {"p0": 1, "p1": 1})),
                          trust=True)
    serial = ArtifactModule(art, trust=True)
    seen = {}

    def in_a_fresh_thread():
        seen["default"] = num_threads()
        x = [conc.random_inputs(0)["x"]]
        conc.partitions[0].runner(x)
        seen["set"] = num_threads()
        serial.partitions[0].runner(x)  # a runner without a count puts the pool back
        seen["back"] = num_threads()

    try:
        feeds = serial.random_inputs(0)
        want = _ort_reference(sm.branches(), feeds)
        a, b = serial.run(feeds), conc.run(feeds)
        for name in want:
            np.testing.assert_allclose(b[name], want[name], rtol=1e-3, atol=1e-6)
            np.testing.assert_allclose(b[name], a[name], rtol=1e-6, atol=1e-7)
        t = threading.Thread(target=in_a_fresh_thread)
        t.start()
        t.join()
    finally:
        conc.close()
        serial.close()
    assert seen["set"] == 1 and seen["back"] == seen["default"] >= 1
