"""What a Collage search does under contention (provmap.partition.measure.hygiene), with a real CPU
hog started by the test: the search says so, marks its record, and does not store its kept plan
in the plan cache as if it were clean; a stored plan recorded as contended is not reused."""

import pytest

from provmap.partition.measure import hygiene
from provmap.partition.measure.cache import CostCache
from provmap.partition.collage import CollageOptions, plan_cache_keys
from provmap.partition.compile import compile_model, load_view
from provmap.partition.measure.contention import snapshot
from provmap.runtime_module.registry import get_backend

from cpu_hog import cpu_hog
from small_models import conv_relu

pytestmark = pytest.mark.skipif(not snapshot().known, reason="needs Linux /proc")

STRATEGY = "collage:onnxruntime,openvino"


def _opts(cache):
    # the hog outlasts a short wait for quiet: the search measures beside it, as accepted
    # (test_contention_policy.py tests the refusal without it)
    return CollageOptions(max_depth=2, max_size=2, cache_path=str(cache), refine_budget_s=0.0,
                          e2e_variants=(), quiet_wait_s=2.0, accept_contended=True)


@pytest.fixture
def acting(monkeypatch):
    monkeypatch.setenv("PROVMAP_CONTENTION", "act")  # conftest turns the actions off


def test_a_search_under_a_cpu_hog_is_marked_and_its_plan_not_cached(tmp_path, acting):
    view = load_view(conv_relu(), "conv_relu")
    cache = tmp_path / "costs.sqlite"
    said = []
    with cpu_hog(240.0):
        art = compile_model(view, STRATEGY, collage_options=_opts(cache), progress=said.append)
    rep = art.manifest["plan_info"]["collage"]
    cond = rep["conditions"]
    assert cond["contended"] and "other processes used" in cond["reason"]
    # the probe before the search saw the load and the search was accepted beside it; a
    # decision's rounds count as contended when it measured any (one alternative: none)
    assert cond["phases"]["before"]["contended"]
    e2e = cond["phases"]["e2e"]
    assert e2e["contended"] == bool(e2e["rounds_contended"])
    assert cond["policy"] == "act"
    # said in one line each: measuring beside the load, and the refusal with its reason
    assert sum("measuring beside the load as asked" in m for m in said) == 1
    refusal = [m for m in said if "not storing the kept plan in the plan cache" in m]
    assert len(refusal) == 1 and "decided under contention" in refusal[0]
    assert "decided under contention" in rep["plan_cache_refused"]
    backends = {b: get_backend(b) for b in ("onnxruntime", "openvino")}
    with CostCache(cache) as c:
        assert c.get_plan(*plan_cache_keys(view, backends, _opts(cache))) is None
        # the kept plan's partition times in context were not stored as clean either
        assert rep["in_context"] and all(r["not_stored"] for r in rep["in_context"])
        for p in art.manifest["partitions"]:
            assert c.get_in_context(p["key"], backends[p["backend"]]) is None


def test_a_cached_plan_recorded_as_contended_is_not_reused(tmp_path, acting):
    view = load_view(conv_relu(), "conv_relu")
    cache = tmp_path / "costs.sqlite"
    backends = {b: get_backend(b) for b in ("onnxruntime", "openvino")}
    keys = plan_cache_keys(view, backends, _opts(cache))
    plan = {"strategy": "collage", "partitions": [
        {"backend": "openvino", "ops": [view.node_ids[i] for i in view.op_nodes], "why": "x"}]}
    with CostCache(cache) as c:  # as another provmap (or an older one) would have left it
        c.put_plan(*keys, plan, {"conditions": {"contended": True, "reason": "e2e: hog"}})
    said = []
    art = compile_model(view, STRATEGY, collage_options=_opts(cache), progress=said.append)
    rep = art.manifest["plan_info"]["collage"]
    assert "plan_cache" not in rep and "e2e" in rep  # searched and measured, not reused
    assert any("not reusing the plan cached for this model: it was decided under contention"
               in m for m in said)


def test_candidate_prices_under_a_cpu_hog_are_measured_again_and_kept_out_of_the_cache(
        tmp_path, acting):
    from provmap.partition.candidate import Candidate
    from provmap.partition.measure.measured import MeasuredEstimator

    view = load_view(conv_relu(), "conv_relu")
    ops = frozenset(view.op_nodes)
    cands = [Candidate(b, ops, "whole-model") for b in ("onnxruntime", "openvino")] + \
        [Candidate("openvino", frozenset([i]), "single-op") for i in view.op_nodes]
    backends = {b: get_backend(b) for b in ("onnxruntime", "openvino")}
    with cpu_hog(240.0), MeasuredEstimator(backends, CostCache(tmp_path / "c.sqlite"),
                                           repeats=5) as est:
        prices = [est.estimate(view, c) for c in cands]
        st = est.stats()
    assert all(p.valid for p in prices)
    assert st["remeasured"] >= 1 and st["contended_prices"] >= 1, st
    # the prices still contended were used in this run but not written to the file
    assert len(CostCache(tmp_path / "c.sqlite")) == st["measured"] - st["contended_prices"]


def test_re_measuring_stops_when_the_contention_is_persistent():
    """Five second measurements that all stayed contended: a sixth would only double the
    search; one that helped keeps re-measuring on."""
    assert hygiene.retry_helps(0, 0) and hygiene.retry_helps(4, 4)
    assert not hygiene.retry_helps(hygiene.RETRY_GIVE_UP, hygiene.RETRY_GIVE_UP)
    assert hygiene.retry_helps(hygiene.RETRY_GIVE_UP, hygiene.RETRY_GIVE_UP - 1)


def test_the_cli_says_in_one_line_why_a_plan_is_not_cached(tmp_path):
    import os

    import onnx

    from cli_runner import provmap

    model = tmp_path / "m.onnx"
    onnx.save(conv_relu(), model)
    env = {**os.environ, "PROVMAP_CONTENTION": "act"}
    flags = ("--strategy", STRATEGY, "--max-size", "2", "--max-depth", "2", "--refine-budget",
             "0", "--no-variants", "--quiet-wait", "2")
    with cpu_hog(240.0):
        # measured beside the load as asked (the refusal without --accept-contended:
        # test_contention_policy.py)
        r = provmap("compile", model, "-o", tmp_path / "a.provmap", *flags,
                    "--accept-contended", "--cache", tmp_path / "k.sqlite", env=env)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "not storing the kept plan" in ln]
    assert len(lines) == 1 and "decided under contention (" in lines[0]
    assert "plan not stored in the plan cache: decided under contention" in r.stdout
    x = provmap("explain", tmp_path / "a.provmap")
    assert "measuring conditions: contended (" in x.stdout


def test_a_search_without_the_end_to_end_check_records_its_conditions_too(tmp_path):
    """(Under the suite's PROVMAP_CONTENTION=ignore: detected and recorded, not acted on.)"""
    view = load_view(conv_relu(), "conv_relu")
    opts = CollageOptions(max_depth=2, max_size=2, cache_path=str(tmp_path / "k.sqlite"),
                          e2e_check=False)
    rep = compile_model(view, STRATEGY, collage_options=opts).manifest["plan_info"]["collage"]
    cond = rep["conditions"]
    assert cond["policy"].startswith("ignore") and set(cond["phases"]) == {"candidates"}
    assert cond["phases"]["candidates"]["known"] and cond["phases"]["candidates"]["seconds"] > 0
    assert rep["estimator"]["remeasured"] == 0  # ignored: nothing measured twice
