"""The recheck of a kept one-library plan at a second moment (partition/recheck.py): the rule on
given numbers, then the whole step on SqueezeNet with real ONNX Runtime and OpenVINO."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

import provmap.partition.recheck as rc
from provmap.partition.collage_report import CollageReport
from provmap.partition.collage_types import EndToEnd, SecondLevel
from provmap.runtime_module.artifact_build import build_artifact
from provmap.runtime_module.plan import PartitionSpec, Plan, order_plan
from provmap.runtime_module.registry import get_backend


def _m(min_ms, median_ms, **kw):
    return {"min_ms": min_ms, "median_ms": median_ms, **kw}


def test_two_moments_pooled_decide_not_the_first_alone():
    """EfficientNet-B0 (2026-11-27): ONNX Runtime ahead by 1-3% in the search, OpenVINO ahead
    by 3-7% in the bench minutes later.  A rival ahead at the second moment by more than it
    was behind at the first replaces the kept plan; one behind at both does not."""
    first = {"single:onnxruntime": _m(3.19, 3.50), "single:openvino": _m(3.21, 3.59)}
    later = {"single:onnxruntime": _m(3.40, 3.70), "single:openvino": _m(3.18, 3.45)}
    p = rc.pooled([first, later], "single:onnxruntime", "single:openvino")
    assert p["moments"] == 2 and p["per_moment_min"] == [pytest.approx(1.0063, abs=1e-4),
                                                          pytest.approx(0.9353, abs=1e-4)]
    assert p["min_ratio"] == pytest.approx((3.21 / 3.19 * 3.18 / 3.40) ** 0.5)
    assert rc.switches(p, 0.03)
    same = rc.pooled([first, first], "single:onnxruntime", "single:openvino")
    assert not rc.switches(same, 0.03)
    # faster by minimum but far slower by median: not switched (break_tie's rule)
    odd = {"single:onnxruntime": _m(3.2, 3.5), "single:openvino": _m(3.1, 3.9)}
    assert not rc.switches(rc.pooled([odd, odd], "single:onnxruntime", "single:openvino"), 0.03)


def test_the_rival_is_the_closest_one_partition_plan_within_the_band():
    one = lambda b: Plan(f"single:{b}", [PartitionSpec(b, [0, 1])])  # noqa: E731
    plans = {"single:onnxruntime": one("onnxruntime"), "single:openvino": one("openvino"),
             "single:tvm": one("tvm"),
             "collage": Plan("collage", [PartitionSpec("tvm", [0]), PartitionSpec("openvino", [1])])}
    measured = {"single:onnxruntime": _m(2.0, 2.10), "single:openvino": _m(2.1, 2.25),
                "single:tvm": _m(2.2, 2.20), "collage": _m(1.9, 2.15)}
    # the kept plan found by signature, whatever its label in the second level
    kept_label, other = rc.rival(measured, plans, Plan("refined", [PartitionSpec("onnxruntime",
                                                                                 [1, 0])]))
    assert (kept_label, other) == ("single:onnxruntime", "single:tvm")  # mixed plans never
    measured["single:tvm"] = _m(2.5, 2.50)  # beyond 10% by median and slower by minimum
    assert rc.rival(measured, plans, plans["single:onnxruntime"])[1] == "single:openvino"
    measured["single:openvino"] = _m(2.4, 2.40)
    assert rc.rival(measured, plans, plans["single:onnxruntime"])[1] is None
    measured["single:openvino"] = _m(1.99, 2.40, capped=True)
    assert rc.rival(measured, plans, plans["single:onnxruntime"])[1] is None


@pytest.fixture(scope="module")
def two_libraries(squeezenet_view):
    view = squeezenet_view
    every = {b: get_backend(b) for b in ("onnxruntime", "openvino")}
    plans = {f"single:{b}": order_plan(view, Plan(f"single:{b}", [PartitionSpec(
        b, list(view.op_nodes))])) for b in every}
    built = {k: build_artifact(view, p, every) for k, p in plans.items()}
    return view, plans, built


@pytest.mark.parametrize("swing", [1.0, 0.5, 2.0])
def test_recheck_measures_both_libraries_again_and_keeps_the_pooled_winner(
        two_libraries, swing):
    """Real ONNX Runtime and OpenVINO measured once more; the first moment is given, scaled so
    that the rival was far ahead (0.5) or equal (1.0) then: the kept plan is the one the pooled
    ratios name, and explain prints the record; a rival twice as slow (2.0) is not measured."""
    view, plans, built = two_libraries
    kept_label, other = "single:onnxruntime", "single:openvino"
    first_moment = {kept_label: _m(10.0, 10.0), other: _m(10.0 * swing, 10.0 * swing)}
    report = CollageReport(e2e={"measured": first_moment, "winner": kept_label})
    first = NS(report=report, phases={})
    e2e = EndToEnd(kept_label, plans[kept_label], built[kept_label], {}, built, plans)
    kept = SecondLevel(kept_label, plans[kept_label], built[kept_label])
    said = []
    out = rc.recheck(first, e2e, kept, passes=2, repeats=6, margin=0.03, say=said.append)
    rec = report.recheck
    if swing == 2.0:  # twice as slow at the first moment: no rival, nothing measured again
        assert out is kept and rec is None and not said and "recheck" not in first.phases
        return
    assert set(rec["measured"]) == {kept_label, other} and "recheck" in first.phases
    now = rec["measured"]
    assert rec["per_moment_min"][0] == pytest.approx(swing)
    assert rec["per_moment_min"][1] == pytest.approx(now[other]["min_ms"] / now[kept_label]["min_ms"],
                                                     abs=1e-4)
    want = other if rc.switches(rec, 0.03) else kept_label
    assert out.label == rec["kept"] == want and rec["switched"] == (want == other)
    if swing == 0.5:
        assert out.label == other  # a 2x lead at one moment is not undone by this machine
    assert any(s.startswith("rechecking single:onnxruntime against single:openvino") for s in said)
    from provmap.workbench.explain import explain_artifact, format_explain

    manifest = dict(built[kept_label].manifest, plan_info={"collage": {"recheck": rec}})
    text = format_explain(explain_artifact(manifest))
    assert f"recheck against {rec['against']} (ms, median / min): " in text


def test_a_mixed_plan_or_a_lone_plan_is_not_rechecked(monkeypatch):
    calls = []
    monkeypatch.setattr(rc, "measure_artifacts", lambda *a, **kw: calls.append(a))
    report = CollageReport(e2e={"measured": {"collage": _m(1.0, 1.0)}, "winner": "collage"})
    first = NS(report=report, phases={})
    mixed = Plan("collage", [PartitionSpec("tvm", [0]), PartitionSpec("openvino", [1])])
    e2e = EndToEnd("collage", mixed, "art", {}, {"collage": "art"}, {"collage": mixed})
    kept = SecondLevel("collage", mixed, "art")
    assert rc.recheck(first, e2e, kept, 4, 20, 0.03, print) is kept
    lone = Plan("single:tvm", [PartitionSpec("tvm", [0, 1])])
    e2e = EndToEnd("single:tvm", lone, "art", {}, {"single:tvm": "art"}, {"single:tvm": lone})
    report.e2e = {"measured": {"single:tvm": _m(1.0, 1.0)}, "winner": "single:tvm"}
    kept = SecondLevel("single:tvm", lone, "art")
    assert rc.recheck(first, e2e, kept, 4, 20, 0.03, print) is kept
    assert rc.recheck(first, e2e, kept, 0, 20, 0.03, print) is kept
    assert not calls and report.recheck is None


def test_a_whole_model_move_by_the_second_level_pools_with_its_own_measurement():
    """MobileNet-v3 (2026-11-27): the check had ONNX Runtime 7% ahead, the second level then
    moved the whole model to OpenVINO on its own, later measurement: that one is the first
    moment, not the check's."""
    one = lambda b: Plan(f"single:{b}", [PartitionSpec(b, [0, 1])])  # noqa: E731
    report = CollageReport(
        e2e={"measured": {"single:onnxruntime": _m(2.10, 2.19), "single:openvino": _m(2.20, 2.35)},
             "winner": "single:onnxruntime"},
        refine={"start": "single:onnxruntime", "trail": [
            {"status": "rejected", "proposal": _m(9, 9), "incumbent": _m(1, 1)},
            {"status": "kept", "proposal": _m(2.00, 2.05), "incumbent": _m(2.15, 2.20)}]})
    kept = SecondLevel("refined", one("openvino"), "art")
    source, earlier = rc._first_moment(report, kept, "single:openvino", "single:onnxruntime")
    assert source == "second level"
    assert earlier == {"single:openvino": _m(2.00, 2.05), "single:onnxruntime": _m(2.15, 2.20)}
    kept = SecondLevel("single:openvino", one("openvino"), "art")  # not moved: the check's
    assert rc._first_moment(report, kept, "single:openvino", "single:onnxruntime")[0] == \
        "end-to-end check"


def test_the_drift_step_measures_moments_of_both_libraries(tmp_path):
    """bench/drift.py, the measurement behind the recheck (one moment: minutes=0)."""
    import json

    from provmap.bench import drift

    said = []
    out = drift.drift("bundled:squeezenet", 0, say=said.append)
    assert out["moments"] == len(out["rows"]) == len(said) == 1
    r = out["rows"][0]
    assert r["ratio_median"] == pytest.approx(r["ort_median"] / r["ov_median"])
    assert out["ratio_min"]["min"] == out["ratio_min"]["max"] == pytest.approx(r["ratio_min"])
    assert drift.main(["bundled:squeezenet", "--minutes", "0", "-o", str(tmp_path / "d.json")]) == 0
    assert json.loads((tmp_path / "d.json").read_text())["moments"] == 1
