"""`--strategy collage` end to end with real, measured backends (small models, small bounds).

The whole-model claims (every test model no slower than its best single backend) are measured by
`provmap bench` (bench/suite.py), not here: a cold search takes minutes per model.
"""

import json
import re
import sqlite3
import subprocess
import sys
import time

import numpy as np
import onnxruntime as ort
import pytest

from provmap.partition.collage import CollageOptions
from provmap.partition.compile import compile_model
from provmap.provenance.bundled import zoo
from provmap.provenance.util.errors import ProvmapError
from provmap.runtime_module.module import load
from provmap.partition.measure.evidence import Rule
from quick_rule import QUICK_RULE


def ort_ref(model, feeds):
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


def _opts(cache, **kw):
    kw.setdefault("refine_budget_s", 0.0)  # the second level has its own tests (test_refine.py)
    kw.setdefault("rule", QUICK_RULE)
    return CollageOptions(max_depth=3, max_size=4, cache_path=str(cache), **kw)


@pytest.mark.slow
def test_collage_matches_reference_and_second_run_measures_nothing(transformer_model,
                                                                   transformer_view, tmp_path):
    model, view = transformer_model, transformer_view
    cache = tmp_path / "costs.sqlite"
    # Without one-thread variants: a plan kept on one would store its in-context price under
    # the variant, which this first-level search never asks about (checked below).
    art_path = tmp_path / "c.provmap"
    art = compile_model(view, "collage:onnxruntime,openvino", out=art_path,
                        collage_options=_opts(cache, e2e_variants=()))
    rep = art.manifest["plan_info"]["collage"]
    assert rep["estimator"]["measured"] > 0
    assert rep["candidates"]["generated"] >= rep["candidates"]["after_pruning"] > 0
    assert set(rep["estimated_ms"]) >= {"collage", "single:onnxruntime", "single:openvino"}
    assert rep["e2e"]["winner"] in rep["e2e"]["measured"]
    # Identical plans are measured once, under the simplest name (collage, then single:).
    for dup, kept in rep["e2e_same"].items():
        assert dup not in rep["e2e"]["measured"] and kept in rep["e2e"]["measured"]
        assert not (dup.startswith("single:") and kept.startswith("greedy:"))
    # Greedy over ORT first gives the whole block to ORT: the same plan as single:onnxruntime.
    greedy = [k for k in rep["e2e_same"] if k.startswith("greedy:")]
    if "single:onnxruntime" in rep["e2e"]["measured"] and greedy:
        assert rep["e2e_same"][greedy[0]] in ("single:onnxruntime", "collage")
    feeds = zoo.random_inputs(model, 5)
    out = load(art_path).run(feeds)
    # f32 everywhere (OpenVINO pinned to f32); see tests/test_e2e_models.py for the tolerance.
    np.testing.assert_allclose(out["y"], ort_ref(model, feeds)["y"], atol=1e-4, rtol=1e-3)

    # Without the in-context prices the first run fed back, the second search asks the same
    # questions and every answer is in the cache.
    art2 = compile_model(view, "collage:onnxruntime,openvino",
                         collage_options=_opts(cache, e2e_variants=(), in_context=False))
    rep2 = art2.manifest["plan_info"]["collage"]
    assert rep2["estimator"]["measured"] == 0
    assert rep2["estimator"]["cache_hits"] == rep["estimator"]["measured"] + rep["estimator"]["cache_hits"]
    # The first run stored each kept partition's time inside the running plan...
    assert {r["partition"] for r in rep["in_context"]} == {p["id"] for p in art.manifest["partitions"]}
    assert all(r["in_context_ms"] > 0 for r in rep["in_context"])
    # ...and a search that uses them prices those regions from it (new prices may lead the
    # search to ask about candidates the first run never needed: those are measured).
    before3 = time.time()
    art3 = compile_model(view, "collage:onnxruntime,openvino",
                         collage_options=_opts(cache, e2e_variants=(), reuse_plan=False))
    assert art3.manifest["plan_info"]["collage"]["estimator"]["in_context"] >= 1
    # --research stores what it kept (it replaces the first search's plan under the same key)
    con = sqlite3.connect(cache)
    stored = [json.loads(p)["strategy"] for p, in con.execute(
        "SELECT plan FROM plans WHERE created >= ?", (before3,))]
    con.close()
    assert stored == [art3.manifest["strategy"]]
    # The same search again reuses the plan the last search (art3, --research) kept and
    # stored: nothing is measured, same plan.
    art4 = compile_model(view, "collage:onnxruntime,openvino", out=tmp_path / "c4.provmap",
                         collage_options=_opts(cache, e2e_variants=()))
    rep4 = art4.manifest["plan_info"]["collage"]
    assert rep4["plan_cache"]["reused"] is True
    assert art4.manifest["strategy"] == art3.manifest["strategy"]
    assert [(p["backend"], sorted(p["ops"])) for p in art4.manifest["partitions"]] == \
        [(p["backend"], sorted(p["ops"])) for p in art3.manifest["partitions"]]
    # art3's plan may differ from the first one (other backends, other fp32 summation order):
    # judged against ORT as the first was, not bit for bit against it.
    np.testing.assert_allclose(load(tmp_path / "c4.provmap").run(feeds)["y"],
                               ort_ref(model, feeds)["y"], atol=1e-4, rtol=1e-3)
    # Other search settings are another key: searched, not reused.
    art5 = compile_model(view, "collage:onnxruntime,openvino",
                         collage_options=_opts(cache, e2e_variants=(),
                                               rule=Rule(max_passes=6, min_gain=0.05)))
    assert "plan_cache" not in art5.manifest["plan_info"]["collage"]


def test_the_end_to_end_check_keeps_one_plan_by_the_one_procedure_and_says_how(
        transformer_model, transformer_view, tmp_path):
    from provmap.workbench.explain import explain_artifact, format_explain

    model, view = transformer_model, transformer_view
    said: list = []
    art = compile_model(view, "collage:onnxruntime,openvino", out=tmp_path / "t.provmap",
                        progress=said.append, collage_options=CollageOptions(
                            max_depth=2, max_size=2, cache_path=str(tmp_path / "k.sqlite"),
                            rule=QUICK_RULE, refine_budget_s=0.0, in_context=False))
    e2e = art.manifest["plan_info"]["collage"]["e2e"]
    dec = e2e["decision"]
    assert dec["kept"] == e2e["winner"] and dec["passes"] == QUICK_RULE.max_passes
    assert dec["rule"] == QUICK_RULE.key() and "paired passes" in dec["statistic"]
    # every other alternative measured has its interval against the kept one, or left in warm-up
    others = set(e2e["measured"]) - {e2e["winner"]}
    assert others <= set(dec["versus"]) | set(dec["left"])
    for iv in dec["versus"].values():
        assert iv["low"] <= iv["median"] <= iv["high"] and iv["passes"] == dec["passes"]
    assert all(len(v["pass_min_ms"]) == dec["passes"] for v in e2e["measured"].values())
    kept = art.manifest["strategy"]
    assert kept == ("collage" if e2e["winner"] == "collage" else f"collage->{e2e['winner']}")
    # one line says the decision, and it names the plan the artifact got
    lines = [m for m in said if m.startswith("collage: end-to-end check: ")]
    assert len(lines) == 1 and lines[0].split(": ", 2)[2].startswith(f"{e2e['winner']} kept")
    text = format_explain(explain_artifact(art.manifest))
    assert f"{dec['passes']} paired passes, judged by the" in text
    assert f"kept {e2e['winner']}: {e2e['why']}" in text
    feeds = zoo.random_inputs(model, 5)
    np.testing.assert_allclose(load(tmp_path / "t.provmap").run(feeds)["y"],
                               ort_ref(model, feeds)["y"], atol=1e-4, rtol=1e-3)


def test_e2e_variants_derive_from_the_searched_backends():
    from provmap.partition.variants import e2e_variants
    from provmap.runtime_module.registry import get_backend

    backends = {"onnxruntime": get_backend("onnxruntime", optimization="basic"),
                "openvino[precision=f32]": get_backend("openvino[precision=f32]"),
                "onnxruntime[threads=2]": get_backend("onnxruntime[threads=2]"),
                "tvm": get_backend("tvm")}
    got = e2e_variants(backends, ("threads=1",))
    # TVM takes no thread option; a backend that sets threads itself is the user's choice
    assert sorted(got) == ["onnxruntime[threads=1]", "openvino[precision=f32;threads=1]"]
    origin, be = got["onnxruntime[threads=1]"]
    assert origin == "onnxruntime" and be.name == "onnxruntime[threads=1]"
    assert be.options() == {"threads": "1", "optimization": "basic"}  # the searched one's options kept
    assert got["openvino[precision=f32;threads=1]"][1].options() == {"precision": "f32", "threads": "1"}
    assert e2e_variants(backends, ()) == {}
    with pytest.raises(ProvmapError, match=r"variant 'thred=1': no searched backend takes "
                                           r"option 'thred' .*did you mean 'threads'"):
        e2e_variants(backends, ("thred=1",))


def test_a_thread_variant_that_wins_end_to_end_is_kept_saved_and_reused(transformer_model,
                                                                        transformer_view, tmp_path,
                                                                        monkeypatch):
    """The plumbing of a variant win: built, kept, saved under its name, reloaded from the file
    and rebuilt from the plan cache.  Measured for real; the variant's samples are then halved
    (a host where one thread is twice as fast), so which plan wins does not depend on this one."""
    import provmap.partition.decision as decision_mod

    real = decision_mod.measure_interleaved

    def one_thread_faster(fns, **kw):
        lat = real(fns, **kw)
        for k, v in lat.items():
            if k.endswith("[threads=1]"):
                v.samples_s = [x / 2 for x in v.samples_s]
                v.pass_medians_s = [x / 2 for x in v.pass_medians_s]
                v.pass_mins_s = [x / 2 for x in v.pass_mins_s]
        return lat

    monkeypatch.setattr(decision_mod, "measure_interleaved", one_thread_faster)
    model, view = transformer_model, transformer_view
    opts = _opts(tmp_path / "k.sqlite", e2e_single_factor=1e9)
    art = compile_model(view, "collage:onnxruntime,openvino", out=tmp_path / "v.provmap",
                        collage_options=opts)
    rep = art.manifest["plan_info"]["collage"]
    assert rep["e2e_variants"] == ["onnxruntime[threads=1]", "openvino[threads=1]"]
    assert {"single:onnxruntime[threads=1]", "single:openvino[threads=1]"} <= set(rep["e2e"]["measured"])
    kept = rep["e2e"]["winner"]
    assert kept.startswith("single:") and kept.endswith("[threads=1]")
    assert rep["level"] == f"end-to-end check ({kept})"
    variant = kept.split(":", 1)[1]
    assert [p["backend"] for p in art.manifest["partitions"]] == [variant]
    assert art.manifest["backends"][variant]["options"]["threads"] == "1"
    # its time inside the running plan is stored under the variant, not the searched backend
    assert [r["backend"] for r in rep["in_context"]] == [variant]
    feeds = zoo.random_inputs(model, 3)
    want = ort_ref(model, feeds)["y"]
    np.testing.assert_allclose(load(tmp_path / "v.provmap").run(feeds)["y"], want, atol=1e-4, rtol=1e-3)
    # the same compile again: the kept plan comes from the cost cache, built on the variant
    monkeypatch.setattr(decision_mod, "measure_interleaved", real)
    again = compile_model(view, "collage:onnxruntime,openvino", out=tmp_path / "w.provmap",
                          collage_options=opts)
    assert again.manifest["plan_info"]["collage"]["plan_cache"]["reused"]
    assert [p["backend"] for p in again.manifest["partitions"]] == [variant]
    np.testing.assert_allclose(load(tmp_path / "w.provmap").run(feeds)["y"], want, atol=1e-4, rtol=1e-3)


@pytest.mark.slow
def test_cli_collage_json_summary(tmp_path):
    out = tmp_path / "c.provmap"
    r = subprocess.run([sys.executable, "-m", "provmap.cli.main", "compile", "bundled:transformer",
                        "-o", str(out), "--strategy", "collage", "--backends",
                        "onnxruntime,openvino", "--cache", str(tmp_path / "k.sqlite"),
                        "--max-size", "3", "--max-depth", "2", "--refine-budget", "15", "--json"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert {"candidates", "estimator", "estimated_ms", "e2e"} <= set(s["search"])
    assert "collage: measured" in r.stderr  # progress with counts/ETA on stderr
    # ...and where the running count stops, what became of the rest (issue 16).
    line = next(ln for ln in r.stderr.splitlines() if "the search asked for" in ln)
    assert "it never needed the other" in line and "left unpriced by the measuring budget" in line
    # the parts add up: asked + never needed = all candidates (issue 36's fifth afternoon)
    asked, total = map(int, re.search(r"asked for (\d+) of (\d+)", line).groups())
    other = int(re.search(r"never needed the other (\d+)", line).group(1))
    assert asked + other == total, line
    # the second level ran within its budget and recorded every proposal (issue 12)
    ref = s["search"]["refine"]
    assert ref["budget_s"] == 15 and ref["proposals"] == len(ref["trail"])
    assert all(t["status"] in ("kept", "rejected", "build failed", "not tried (budget)")
               for t in ref["trail"])
    assert "collage: second level" in r.stderr
    assert s["search"]["level"] in ("first", "second") or s["search"]["level"].startswith(
        "end-to-end")
    assert bool(ref["kept"]) == (s["search"]["level"] == "second"), ref


def test_a_kept_plan_that_fails_to_build_falls_back_to_its_measured_candidates(
        transformer_view):
    """Coalescing joins neighbouring candidates on one library into a partition nobody built;
    OpenVINO 2026.4 failed to compile one of ViT-B/16 QDQ's, and a compile without the
    end-to-end check ended there.  The plan of the measured candidates is built instead."""
    from provmap.partition.collage_report import CollageReport
    from provmap.partition.collage_types import CollageResult
    from provmap.partition.compile import _collage_artifact
    from provmap.runtime_module.plan import PartitionSpec, Plan
    from provmap.runtime_module.registry import get_backend

    view = transformer_view
    bad = Plan("collage", [PartitionSpec("nosuch", list(view.op_nodes))])
    good = Plan("collage", [PartitionSpec("onnxruntime", list(view.op_nodes))])
    said: list = []
    art = _collage_artifact(view, CollageResult(bad, CollageReport(), fallback=good),
                            {"onnxruntime": get_backend("onnxruntime")}, said.append)
    assert [p["backend"] for p in art.manifest["partitions"]] == ["onnxruntime"]
    assert any("failed to build" in s and "measured candidates" in s for s in said)
    with pytest.raises(ProvmapError):  # nothing to fall back to: the error as before
        _collage_artifact(view, CollageResult(bad, CollageReport()), {}, said.append)
