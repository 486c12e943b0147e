"""explain, through the real CLI: why each node went where (greedy's refusals, a --pin the user
gave, the tie-break rule with the minimums it used), and `--headroom` at the shapes the
artifact was compiled at, timing a kept single configuration by its own profile."""

from __future__ import annotations

import json

import onnx
import pytest
from cli_runner import provmap
from onnx import TensorProto, helper
from quick_rule import QUICK_RULE

pytestmark = [pytest.mark.usefixtures("own_config"),
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def test_explain_on_a_greedy_artifact_says_why_each_node_went_where(tmp_path):
    out = tmp_path / "g.provmap"
    r = provmap("compile", "bundled:squeezenet", "-o", out, "--strategy",
                "greedy:openvino,onnxruntime", "--backend-option", "openvino.exclude_ops=Concat")
    assert r.returncode == 0, r.stderr
    text = provmap("explain", out).stdout
    assert "(Concat) -> onnxruntime because openvino: Concat is excluded by this backend's " \
           "exclude_ops option" in text
    data = json.loads(provmap("explain", out, "--json").stdout)
    declined = [d for p in data["partitions"] for d in p["nodes_declined_elsewhere"]]
    assert len(declined) == 8 and all(d["backend"] == "onnxruntime" for d in declined)


def test_explain_names_the_pin_that_placed_a_partition():
    """explain guessed "it wins through its boundaries" for a node the user had pinned."""
    from provmap.workbench.explain import explain_artifact, format_explain

    region = {"op_ids": ["n4"], "backend": "openvino", "ops": 1, "first": "#4 'n4' (Relu)",
              "searched_ms": 0.068, "greedy_backend": "onnxruntime",
              "alternatives": {"onnxruntime": {"ms": 0.016}, "openvino": {"ms": 0.068}}}
    manifest = {"strategy": "collage", "partitions": [{"id": "p1", "backend": "openvino",
                                                       "ops": ["n4"], "inputs": [],
                                                       "outputs": []}],
                "plan_info": {"collage": {
                    "backends": ["onnxruntime", "openvino"], "explain": [region],
                    "constraint_flags": [{"node": "n4", "kind": "pin",
                                          "flag": "--pin n4=openvino"}]}}}
    row = explain_artifact(manifest)["partitions"][0]
    assert row["verdict"].startswith("placed on openvino by --pin n4=openvino")
    assert row["constraints"] == ["--pin n4=openvino"]
    assert "wins through its boundaries" not in format_explain(explain_artifact(manifest))


def test_explain_says_what_decided_the_kept_plan_and_shows_minimums(log_relu_dir, tmp_path):
    """explain prints the end-to-end check's medians and minimums, how many paired passes
    decided, and why each alternative left (partition/decision.py's record)."""
    from provmap.partition.collage import CollageOptions

    api = __import__("provmap")

    out = tmp_path / "t.provmap"
    api.compile(str(log_relu_dir / "m.onnx"), "collage", out=str(out),
                collage_options=CollageOptions(rule=QUICK_RULE, refine_budget_s=0,
                                               cache_path=str(tmp_path / "c.sqlite")))
    r = provmap("explain", out)
    assert r.returncode == 0, r.stderr
    x = json.loads(provmap("explain", out, "--json").stdout)["end_to_end"]
    assert set(x["measured_min_ms"]) == set(x["measured_ms"])
    check = next(ln for ln in r.stdout.splitlines() if ln.startswith("end-to-end check"))
    for k, med in x["measured_ms"].items():
        assert f"{k} {med:.3f} / {x['measured_min_ms'][k]:.3f}" in check, check
    dec = x["decision"]
    assert f"  {dec['passes']} paired passes, judged by the median over paired passes" in r.stdout
    for k, why in dec["left"].items():
        assert f"  {k} left: {why}" in r.stdout
    assert f"  kept {x['winner']}: {x['why']}" in r.stdout



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


def test_explain_headroom_times_a_kept_single_configuration_by_its_own_profile(tmp_path,
                                                                               monkeypatch):
    """L3: the kept plan "collage->single:onnxruntime[threads=1]" is that configuration, yet it
    was profiled a second time, and the noise between the two read "captured 9% of the
    headroom".  Its time is now that configuration's own profile (kept_is)."""
    import argparse

    import provmap.workbench.headroom as headroom
    from provmap.cli.explain_headroom import headroom_of
    from provmap.partition.compile import compile_model
    from provmap.runtime_module.module import load

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    compile_model(model, "single:onnxruntime", out=tmp_path / "a.provmap")
    seen = {}

    def oracle(view, backends, **kw):
        seen.update(kw, backends=sorted(backends))
        return {"headroom_share": None}

    monkeypatch.setattr(headroom, "node_oracle", oracle)
    args = argparse.Namespace(artifact=str(tmp_path / "a.provmap"), trust=True, repeats=3,
                              oracle_plans=False)
    mod = load(tmp_path / "a.provmap", trust=True)
    for strategy, kept_is in (("collage->single:onnxruntime", "onnxruntime"),
                              ("collage->refined", None), ("collage", None)):
        mod.manifest["strategy"] = strategy
        headroom_of(args, mod, model)
        assert seen["kept_is"] == kept_is and (seen["kept"] is None) == (kept_is is not None)


def test_explain_headroom_profiles_what_the_search_tries_on_the_model():
    """Without --backends the oracle profiles compile's search backends and the variants its
    end-to-end check tries on this model: ONNX Runtime's disable_quant_qdq where the model
    dequantizes a constant (GPT-2's tied int8 LM head), as bench's limit does."""
    from provmap.cli.explain_headroom import headroom_backends
    from provmap.provenance.importer import import_onnx
    from provmap.runtime_module.graph_view import GraphView
    from small_models import tied_weight_model

    tied = headroom_backends(None, GraphView(import_onnx(tied_weight_model())))
    plain = headroom_backends(None, GraphView(import_onnx(tied_weight_model(False))))
    assert "onnxruntime[disable_quant_qdq=1]" in tied and "onnxruntime[threads=1]" in tied
    assert set(tied) - set(plain) == {"onnxruntime[disable_quant_qdq=1]"}
