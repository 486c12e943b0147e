"""Collage's second level (provmap.partition.refine): proposals are valid plans, the user's
constraints hold, and a change is kept only when the end-to-end numbers it recorded say so.
Real backends (ONNX Runtime and OpenVINO) on SqueezeNet; the budget keeps it to seconds."""

from __future__ import annotations

import numpy as np
import pytest

from provmap.partition.constraints import parse_constraints
from provmap.partition.candidate import Candidate, Estimate
from provmap.partition.refine import propose, refine, suggestions_from, supported_fn
from provmap.partition.strategies import greedy
from provmap.partition.model_source import load_view
from provmap.provenance.bundled import zoo
from provmap.runtime_module.artifact_build import build_artifact
from provmap.runtime_module.module import ArtifactModule
from provmap.runtime_module.plan import order_plan
from provmap.runtime_module.registry import get_backend
from quick_rule import QUICK_RULE


@pytest.fixture(scope="module")
def squeeze(squeezenet_view):
    view = squeezenet_view  # seeded random weights (conftest says why)
    backends = {"openvino": get_backend("openvino", exclude_ops=["Softmax"]),
                "onnxruntime": get_backend("onnxruntime")}
    verdicts = {b: be.verdicts(view) for b, be in backends.items()}
    plan = order_plan(view, greedy(view, [backends["openvino"], backends["onnxruntime"]]))
    return view, backends, verdicts, plan


def _ok(view, verdicts, plan):
    for p in plan.partitions:
        assert all(verdicts[p.backend][i].ok for i in p.ops), (p.backend, p.ops)
    order_plan(view, plan)  # raises on a cycle or an uncovered node


def test_proposals_are_valid_distinct_plans(squeeze):
    view, backends, verdicts, plan = squeeze
    assert [p.backend for p in plan.partitions] == ["openvino", "onnxruntime"]
    props = propose(view, plan, list(backends), supported_fn(view, verdicts))
    kinds = {p.kind for p in props}
    # everything onto ORT (a merge; OpenVINO may not take the Softmax), and boundary nodes moved
    assert "merge" in kinds and "grow" in kinds
    sigs = set()
    for pr in props:
        _ok(view, verdicts, pr.plan)
        covered = sorted(i for p in pr.plan.partitions for i in p.ops)
        assert covered == sorted(view.op_nodes)
        sig = frozenset((p.backend, frozenset(p.ops)) for p in pr.plan.partitions)
        assert sig not in sigs
        sigs.add(sig)
        changed = [p for p in pr.plan.partitions
                   if (p.backend, frozenset(p.ops)) not in
                   {(q.backend, frozenset(q.ops)) for q in plan.partitions}]
        assert changed and all(p.why.startswith("second level") for p in changed)
    # no proposal puts the Softmax on OpenVINO, which excludes it
    softmax = next(i for i in view.op_nodes if view.nodes[i].op_type == "Softmax")
    for pr in props:
        assert all(softmax not in p.ops for p in pr.plan.partitions if p.backend == "openvino")


def test_proposals_respect_pins(squeeze):
    view, backends, verdicts, plan = squeeze
    last_conv = max(i for i in view.op_nodes if view.nodes[i].op_type == "Conv")
    cons = parse_constraints(view, [f"{view.node_ids[last_conv]}=openvino"], [], [],
                             list(backends))
    props = propose(view, plan, list(backends), supported_fn(view, verdicts, cons))
    assert props  # boundary moves after the pinned node are still possible
    for pr in props:
        owner = {i: p.backend for p in pr.plan.partitions for i in p.ops}
        assert owner[last_conv] == "openvino"


def test_first_level_savings_become_carves(squeeze):
    view, backends, verdicts, plan = squeeze
    ops = sorted(plan.partitions[0].ops)
    region = frozenset(ops[:3])  # conv1, its Relu, the pool: a chain at the model input
    est = {Candidate("openvino", region, "combine"): Estimate(0.004),
           Candidate("onnxruntime", region, "combine"): Estimate(0.001),
           Candidate("onnxruntime", frozenset(ops[:1]), "single-op"): Estimate(0.002)}
    sg = suggestions_from(est)
    assert sg == [{"ops": sorted(region), "backend": "onnxruntime", "vs": "openvino",
                   "saving_ms": pytest.approx(3.0)}]
    props = propose(view, plan, list(backends), supported_fn(view, verdicts), suggestions=sg)
    carves = [p for p in props if p.kind == "carve"]
    assert carves
    for pr in carves:  # the region now runs on ORT, in a valid plan
        _ok(view, verdicts, pr.plan)
        owner = {i: p.backend for p in pr.plan.partitions for i in p.ops}
        assert all(owner[i] == "onnxruntime" for i in region)
        assert "cheaper there in isolation" in pr.what


def test_a_carve_from_the_middle_splits_the_rest_around_it(squeeze):
    view, backends, verdicts, _plan = squeeze
    whole = order_plan(view, greedy(view, [backends["onnxruntime"]]))
    middle = sorted(view.op_nodes)[len(view.op_nodes) // 2]
    sg = [{"ops": [middle], "backend": "openvino", "vs": "onnxruntime", "saving_ms": 1.0}]
    [carve] = [p for p in propose(view, whole, list(backends), supported_fn(view, verdicts),
                                  suggestions=sg) if p.kind == "carve"]
    _ok(view, verdicts, carve.plan)
    assert [p.backend for p in order_plan(view, carve.plan).partitions] == [
        "onnxruntime", "openvino", "onnxruntime"]


def test_carves_starting_at_one_node_name_where_they_end(squeeze):
    """Inception's trail listed carves of one branch at several depths as the same
    "carve 9 op(s) from #38": each label names the region's first and last node."""
    view, backends, verdicts, plan = squeeze
    ops = sorted(plan.partitions[0].ops)
    sg = [{"ops": ops[:n], "backend": "onnxruntime", "vs": "openvino", "saving_ms": 1.0}
          for n in (3, 2)]
    carves = [p for p in propose(view, plan, list(backends), supported_fn(view, verdicts),
                                 suggestions=sg) if p.kind == "carve"]
    assert len(carves) == 2
    for pr, n in zip(carves, (3, 2)):
        assert f"{n} op(s) from {view.describe(ops[0])} to {view.describe(ops[n - 1])}" in pr.what


def test_artifacts_built_from_one_view_hash_the_model_once(squeeze, monkeypatch):
    """The second level builds an artifact per proposal; VGG-19's weights took 1.1 s to hash."""
    import provmap.runtime_module.graph_view as gv

    view = load_view(zoo.with_random_weights(zoo.load_light("squeezenet"), seed=0), "squeezenet")
    calls = []
    real = gv.model_sha256
    monkeypatch.setattr(gv, "model_sha256", lambda m: calls.append(1) or real(m))
    be = {"onnxruntime": get_backend("onnxruntime")}
    arts = [build_artifact(view, order_plan(view, greedy(view, [be["onnxruntime"]])), be)
            for _ in range(2)]
    assert len(calls) == 1
    assert arts[0].manifest["model"]["sha256"] == arts[1].manifest["model"]["sha256"] == real(
        view.model)


def test_refine_keeps_only_measured_wins_and_the_result_is_correct(squeeze):
    view, backends, verdicts, plan = squeeze
    blobs: dict = {}
    art = build_artifact(view, plan, backends, blobs=blobs)
    assert len(blobs) == 2  # one per partition, keyed by nodes, backend and options
    res = refine(view, plan, art, "greedy", backends, supported_fn(view, verdicts),
                 budget_s=25, rule=QUICK_RULE, blobs=blobs)
    assert res.trail
    statuses = {t["status"] for t in res.trail}
    assert statuses <= {"kept", "rejected", "build failed", "not tried (budget)"}
    measured = [t for t in res.trail if t["status"] in ("kept", "rejected")]
    assert measured, res.trail
    for t in measured:  # each decided by the one procedure (tests/test_decision.py)
        new, old = t["proposal"], t["incumbent"]
        assert len(new["pass_min_ms"]) == len(old["pass_min_ms"]) == t["passes"] == 6
        iv = t["versus"]["incumbent" if t["status"] == "kept" else "proposal"]
        assert iv["passes"] == 6 and t["reason"].startswith(
            ("proposal" if t["status"] == "kept" else "incumbent") + " kept")
    if any(t["status"] == "kept" for t in res.trail):
        assert res.label == "refined"
    else:
        assert res.plan is plan and res.artifact is art
    # whatever was kept computes what the model computes
    mod = ArtifactModule(res.artifact)
    feeds = mod.random_inputs(0)
    got = mod.run(feeds)
    ref = ArtifactModule(build_artifact(view, order_plan(view, greedy(
        view, [backends["onnxruntime"]])), backends, blobs=blobs)).run(feeds)
    for k in ref:
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-3, atol=1e-4)


def test_the_budget_binds_a_proposal_before_it_begins(squeeze, monkeypatch):
    """A proposal's build cannot be cut short, so one is not begun that would end past the
    budget as the ones before it took (ResNet-50 QDQ's second level ran 150 s of 120); a
    decision under way starts no round past it (decide's `until`)."""
    import types

    import provmap.partition.refine as refine_mod
    from provmap.partition.decision import Decision

    view, backends, verdicts, plan = squeeze
    clock = [0.0]
    untils = []

    def build(*a, **kw):
        clock[0] += 70.0  # a whole-model build
        return object()

    def decide(arts, until=None, **kw):
        untils.append(until)
        clock[0] += 5.0
        return Decision("incumbent", True, "incumbent kept after 6 passes", passes=6)

    # refine's own clock only (patching time.monotonic itself would move every caller's)
    monkeypatch.setattr(refine_mod, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    monkeypatch.setattr(refine_mod, "build_artifact", build)
    monkeypatch.setattr(refine_mod, "decide_artifacts", decide)
    res = refine(view, plan, object(), "greedy", backends, supported_fn(view, verdicts),
                 budget_s=120)
    tried = [t for t in res.trail if t["status"] != "not tried (budget)"]
    # one proposal of 75 s; at 75 s, 45 s are left: the next is not begun
    assert len(tried) == 1 and len(res.trail) > 1 and res.seconds == 75.0
    assert res.stopped == "budget of 120 s: 45 s left, a proposal took 75 s"
    assert untils == [120.0]  # the decision was told when the budget ends
    # each proposal's time and its wait for quiet are kept: where a budget went
    assert (tried[0]["seconds"], tried[0]["waited_s"]) == (75.0, 0.0)
