"""A kept plan decided under contention falls back unless quiet prices confirm it (issue 35,
partition/fallback.py): the rule as a pure function fed chosen windows and prices, and one
search on bundled:transformer beside a real CPU hog whose artifact must follow the rule."""

import pytest

from provmap.partition import fallback
from provmap.partition.measure import hygiene
from provmap.partition.measure.contention import judge, snapshot

from cpu_hog import cpu_hog


def _conditions(contended: bool) -> dict:
    """search_conditions' record of an end-to-end check with chosen counters."""
    e2e = judge(2, 2.4 if contended else 0.1, 0.97 if contended else 0.02, 0.0)
    return hygiene.search_conditions({"e2e": {**e2e.to_dict(), "retried": contended}})


QUIET, BUSY = _conditions(False), _conditions(True)
EST = {"single:onnxruntime": 1.20, "single:openvino": 0.90, "collage": 1.00}


def test_a_quiet_decision_changes_nothing():
    assert fallback.decide("single:openvino[threads=1]", QUIET, {}, EST) is None


def test_contention_that_is_not_acted_on_changes_nothing():
    assert fallback.decide("single:openvino[threads=1]", BUSY, {}, EST, act=False) is None


def test_a_contended_winner_the_quiet_estimates_refute_falls_back_to_the_library_default():
    rec = fallback.decide("single:onnxruntime[threads=1]", BUSY, {}, EST)
    assert rec["kept"] == "single:openvino" and rec["instead_of"] == "single:onnxruntime[threads=1]"
    assert rec["why"].startswith("decision taken under contention (load 2.4/2")
    assert "not confirmed by quiet prices" in rec["why"]
    assert "library default of the backend the quiet prices favour" in rec["why"]
    assert rec["quiet"] == {"source": "first-level prices measured quietly", "measured": {},
                            "estimated": EST, "winner": "single:openvino"}


def test_one_quiet_backend_price_is_not_called_a_preference():
    rec = fallback.decide("collage", BUSY, {}, {"single:openvino": 0.166, "collage": 0.2})
    assert rec["kept"] == "single:openvino" and rec["instead_of"] == "collage"
    assert "the only backend with a quiet whole-model price" in rec["why"]
    assert "favour" not in rec["why"].split(":")[-1]


def test_a_contended_winner_the_quiet_prices_confirm_stays():
    rec = fallback.decide("single:openvino", BUSY, {}, EST)
    assert rec["kept"] == "single:openvino" and rec["instead_of"] is None
    assert "confirmed by quiet prices" in rec["why"] and "not confirmed" not in rec["why"]


def test_a_winner_identical_to_the_quiet_winner_under_another_label_stays():
    est = {"single:openvino": 0.90, "collage": 0.90 - 1e-9}
    rec = fallback.decide("single:openvino", BUSY, {}, est, same={"single:openvino": "collage"})
    assert rec["instead_of"] is None


def test_quiet_end_to_end_medians_outrank_estimates_and_pick_the_best_single_configuration():
    measured = {"collage": 1.5, "single:openvino[threads=1]": 1.1, "single:openvino": 1.3}
    rec = fallback.decide("refined", BUSY, measured, EST)
    assert rec["kept"] == "single:openvino[threads=1]" and rec["instead_of"] == "refined"
    assert rec["quiet"]["source"] == "measured end to end quietly"
    assert "best single configuration measured quietly" in rec["why"]


def test_a_mixed_quiet_winner_still_gives_a_single_configuration():
    rec = fallback.decide("single:onnxruntime", BUSY, {}, {**EST, "collage": 0.5})
    assert rec["quiet"]["winner"] == "collage" and rec["kept"] == "single:openvino"


def test_without_quiet_prices_the_winner_stays_and_says_so():
    rec = fallback.decide("single:openvino[threads=1]", BUSY, {}, {})
    assert rec["instead_of"] is None and "no quiet price is known" in rec["why"]
    assert rec["quiet"]["winner"] is None


def test_without_quiet_prices_the_library_fastest_on_one_thread_beside_the_load_gets_its_default():
    """A hog through the whole search (EfficientNet-B0, 2026-11-28): every price contended, and
    ONNX Runtime on one thread won the check while OpenVINO's default collapsed beside the hog
    (31.9 vs 10.0 ms).  One-thread runs fit the core the load leaves, so they rank the
    libraries; that library's default is kept, a variant or a mixed plan never is."""
    loaded = {"single:onnxruntime[threads=1]": 4.6, "single:onnxruntime": 5.0,
              "single:openvino": 31.9, "collage": 3.9, "single:openvino[threads=1]": 4.3,
              "single:openvino[threads=1;performance_hint=THROUGHPUT]": 1.0}
    for winner in ("single:onnxruntime[threads=1]", "collage", "refined", "single:onnxruntime"):
        rec = fallback.decide(winner, BUSY, {}, {}, contended_measured=loaded)
        assert rec["kept"] == "single:openvino" and rec["instead_of"] == winner
        assert "one-thread run measured fastest" in rec["why"]
        assert rec["quiet"]["loaded"] == {"single:onnxruntime[threads=1]": 4.6,
                                          "single:openvino[threads=1]": 4.3}
    rec = fallback.decide("single:openvino", BUSY, {}, {}, contended_measured=loaded)
    assert rec["instead_of"] is None and "so it stays" in rec["why"]
    rec = fallback.decide("collage", BUSY, {}, {}, same={"collage": "single:openvino"},
                          contended_measured=loaded)
    assert rec["instead_of"] is None
    # one library on one thread ranks nothing: the winner stays, as with no price at all
    rec = fallback.decide("collage", BUSY, {}, {},
                          contended_measured={"single:onnxruntime[threads=1]": 4.6})
    assert rec["instead_of"] is None and "no quiet price is known" in rec["why"]
    # quiet prices, when there are any, still decide alone
    rec = fallback.decide("single:onnxruntime[threads=1]", BUSY,
                          {"single:onnxruntime[threads=1]": 3.0, "single:openvino": 3.5}, {},
                          contended_measured=loaded)
    assert rec["instead_of"] is None


def test_a_decision_on_no_quiet_price_is_a_guess_the_search_refuses_unless_accepted(
        tmp_path, monkeypatch):
    """No quiet price of any kind (a load through the search and its wait): whatever the rule
    picks is marked a guess, and fall_back raises one line naming the load, the wait, the
    guess and the flag that keeps it, instead of writing an artifact; with quiet evidence the
    record is no guess.  (MobileNet-v3, 2026-11-28: the guess measured 6.9-13.2% slower.)"""
    from provmap.provenance.util.errors import ProvmapError

    loaded = {"single:onnxruntime[threads=1]": 3.58, "single:openvino[threads=1]": 7.97,
              "single:onnxruntime": 6.19, "single:openvino": 25.98}
    for quiet_est, ctx in (({}, {"contended_measured": loaded}), ({}, {})):
        rec = fallback.decide("single:onnxruntime[threads=1]", BUSY, {}, quiet_est, **ctx)
        assert rec["guess"] is True
        again = {"waited_s": 119.6, "quiet": False}
        with pytest.raises(ProvmapError) as e:
            fallback.refuse_guess(rec, BUSY, again)
        msg = str(e.value)
        assert "\n" not in msg and "waited" not in msg  # one line, its own words
        for words in ("no artifact written", "120 s of waiting for quiet", "load 2.4/2",
                      f"a guess ({rec['kept']})", "--quiet-wait", "--accept-contended"):
            assert words in msg, words
        with pytest.raises(ProvmapError, match="busy through the search \\(load"):
            fallback.refuse_guess(rec, BUSY, None)  # --quiet-wait 0: no wait to name
    assert "guess" not in fallback.decide("collage", BUSY, {}, EST)
    assert "guess" not in fallback.decide("collage", BUSY, {"single:openvino": 1.0}, {})


@pytest.mark.skipif(not snapshot().known, reason="needs Linux /proc")
def test_a_compile_beside_a_load_that_outlasts_the_wait_writes_nothing_without_consent(
        tmp_path, monkeypatch, capsys):
    """`provmap compile` beside a hog through the search and a 2 s wait, with no quiet price
    (the quiet-evidence lookups return nothing, as with a fresh cache under a load from the
    start; some tiny prices escape the hog otherwise): one line naming the flag, a non-zero
    exit, no file.  With --accept-contended the guess is written and its record says so."""
    import onnx

    from provmap.cli.main import main
    from small_models import conv_relu

    model, out = tmp_path / "m.onnx", tmp_path / "a.provmap"
    onnx.save(conv_relu(), model)
    monkeypatch.setenv("PROVMAP_CONTENTION", "act")
    monkeypatch.setattr(hygiene, "PAUSE_S", 1.0)
    monkeypatch.setattr(fallback, "quiet_measured", lambda *a: {})
    monkeypatch.setattr(fallback, "quiet_estimated", lambda *a: {})
    args = ["compile", str(model), "-o", str(out), "--strategy",
            "collage:onnxruntime,openvino", "--max-size", "2", "--max-depth", "2",
            "--refine-budget", "0", "--quiet-wait", "2"]
    with cpu_hog(240.0):
        code = main([*args, "--cache", str(tmp_path / "k0.sqlite")])
        err = capsys.readouterr().err
        if "decision taken under contention" not in err and code == 0:
            pytest.skip("the end-to-end check escaped the hog")  # nothing to refuse
        assert code != 0 and not out.exists() and "Traceback" not in err
        lines = [ln for ln in err.splitlines() if "no artifact written" in ln]
        assert len(lines) == 1 and lines[0].startswith("provmap: ")
        assert "s of waiting for quiet" in lines[0] and "--accept-contended" in lines[0]
        assert main([*args, "--accept-contended", "--cache", str(tmp_path / "k.sqlite")]) == 0
    from provmap.runtime_module.artifact import read_artifact

    rep = read_artifact(out).manifest["plan_info"]["collage"]
    if rep["conditions"]["contended"]:
        assert rep["fallback"]["guess"] and "a guess, kept as asked" in rep["fallback"]["why"]


def test_when_the_best_quiet_single_is_the_winner_it_stays():
    rec = fallback.decide("single:openvino", BUSY, {}, {**EST, "collage": 0.5})
    assert rec["instead_of"] is None and "is single:openvino itself" in rec["why"]


# -- one search beside a real CPU hog --------------------------------------------------------

def _opts(cache, research=False, quiet_wait_s=2.0):
    from provmap.partition.collage import CollageOptions

    # accept_contended: a repeat that other jobs on this host keep busy ends in a guess, kept
    # here so the record can be checked (test_contention_search.py tests the refusal)
    return CollageOptions(max_depth=2, max_size=2, cache_path=str(cache), e2e_repeats=3,
                          refine_budget_s=0.0, schedules=False, reuse_plan=not research,
                          quiet_wait_s=quiet_wait_s, accept_contended=True)


@pytest.mark.skipif(not snapshot().known, reason="needs Linux /proc")
def test_a_search_beside_a_cpu_hog_is_quiet_or_follows_the_fallback_rule(
        tmp_path, monkeypatch):
    """Whatever the machine did (other jobs share it), the report either says the decision was
    quiet, or carries the rule's verdict on the evidence it recorded, and the artifact is the
    configuration the verdict names.  A first search without the hog, under the suite's
    PROVMAP_CONTENTION=ignore, stores its prices as a quiet machine's would be stored (other
    jobs share this host), so the second has quiet prices to judge its decision by."""
    from provmap.partition.compile import compile_model, load_view

    view = load_view("bundled:transformer")
    cache = tmp_path / "costs.sqlite"
    strategy = "collage:onnxruntime,openvino"
    first = compile_model(view, strategy, collage_options=_opts(cache))
    stored_quiet = not first.manifest["plan_info"]["collage"]["conditions"]["contended"]
    monkeypatch.setenv("PROVMAP_CONTENTION", "act")  # conftest turns the actions off
    monkeypatch.setattr(hygiene, "PAUSE_S", 1.0)     # the hog outlasts any pause
    said = []
    with cpu_hog(600.0):
        art = compile_model(view, strategy, collage_options=_opts(cache, research=True),
                            progress=said.append)
    rep = art.manifest["plan_info"]["collage"]
    cond = rep["conditions"]
    if not cond["contended"]:
        assert "fallback" not in rep
        return
    rec = rep["fallback"]
    print("fallback:", rec)
    # both whole-model prices of the first search are in the cache: quiet evidence exists
    assert {"single:onnxruntime", "single:openvino"} <= set(rec["quiet"]["estimated"])
    winner = rec["instead_of"] or rec["kept"]
    loaded = {k: v["median_ms"] for k, v in ((rep.get("e2e") or {}).get("measured") or {}).items()}
    again = fallback.decide(winner, cond, rec["quiet"]["measured"], rec["quiet"]["estimated"],
                            same=rep.get("e2e_same"), contended_measured=loaded)
    if "waited" in rec:
        # no quiet end-to-end evidence: the first search was itself measured beside other jobs
        # (CI's host), so its plan was stored as contended and the second had to wait
        assert not stored_quiet, rec
        return
    # quiet prices were known, so the search did not wait for quiet to measure again
    assert again == rec
    kept = art.manifest["strategy"]
    assert kept == ("collage" if rec["kept"] == "collage" else f"collage->{rec['kept']}")
    assert sum(1 for m in said if f"kept {rec['kept']}" in m and rec["why"] in m) == 1
    if rec["instead_of"]:
        assert rep["level"] == f"contention fallback ({rec['kept']})"
        assert {p["backend"] for p in art.manifest["partitions"]} == {rec["kept"].split(":", 1)[1]}


def test_quiet_end_to_end_evidence_is_this_search_s_quiet_check_else_a_quiet_stored_plan_s():
    """Where quiet_measured looks (plain records, a real cost cache: no backend involved)."""
    from types import SimpleNamespace

    from provmap.partition.collage_report import CollageReport
    from provmap.partition.measure.cache import CostCache

    def med(**kw):
        return {k.replace("_", ":", 1): {"median_ms": v} for k, v in kw.items()}

    cache = CostCache(":memory:")
    space = SimpleNamespace(cache=cache, plan_keys=("model", "search"))

    def first(e2e_contended: bool):
        rep = CollageReport(e2e={"measured": med(collage=2.0, single_openvino=1.5)})
        return SimpleNamespace(report=rep, phases={"e2e": {"contended": e2e_contended}})

    assert fallback.quiet_measured(space, first(False)) == {"collage": 2.0,
                                                            "single:openvino": 1.5}
    assert fallback.quiet_measured(space, first(True)) == {}  # nothing stored yet
    cache.put_plan("model", "search", {"strategy": "collage", "partitions": []},
                   {"conditions": {"contended": True}, "e2e": {"measured": med(collage=1.0)}})
    assert fallback.quiet_measured(space, first(True)) == {}  # a contended stored plan
    cache.put_plan("model", "search", {"strategy": "collage", "partitions": []},
                   {"conditions": {"contended": False},
                    "e2e": {"measured": med(collage=1.0, single_onnxruntime=1.2)}})
    assert fallback.quiet_measured(space, first(True)) == {"collage": 1.0,
                                                           "single:onnxruntime": 1.2}


def test_a_winner_within_the_drift_of_the_quiet_best_is_not_overturned():
    """One quiet price per configuration overturned a winner 1% behind it (issue 36's fourth
    afternoon); a gap under 5% is within what this machine moves between runs."""
    rec = fallback.decide("collage", BUSY, {}, {"single:openvino": 1.00, "collage": 1.03})
    assert rec["instead_of"] is None and rec["kept"] == "collage"
    assert "within 5% of the fastest" in rec["why"]
    rec = fallback.decide("collage", BUSY, {}, {"single:openvino": 1.00, "collage": 1.08})
    assert rec["instead_of"] == "collage" and rec["kept"] == "single:openvino"


def test_a_quiet_repeat_decides_whatever_the_contended_run_said():
    """quiet_again's record, as fallback reads it (pure: no backend)."""
    again = {"waited_s": 3.0, "quiet": True, "winner": "single:openvino", "why": "fastest median",
             "measured": {"single:openvino": {"median_ms": 1.7, "min_ms": 1.6},
                          "single:onnxruntime[threads=1]": {"median_ms": 3.2, "min_ms": 3.1}}}
    rec = fallback.taken_again("single:onnxruntime[threads=1]", BUSY, again)
    assert rec["kept"] == "single:openvino"
    assert rec["instead_of"] == "single:onnxruntime[threads=1]"
    assert "waiting 3 s for quiet" in rec["why"] and rec["quiet"]["winner"] == "single:openvino"
    # the same plan under another label is the winner itself
    rec = fallback.taken_again("collage", BUSY, again, same={"single:openvino": "collage"})
    assert rec["instead_of"] is None and rec["kept"] == "collage"


@pytest.mark.skipif(not snapshot().known, reason="needs Linux /proc")
def test_a_search_whose_neighbour_ends_while_it_waits_decides_on_a_quiet_repeat(
        tmp_path, monkeypatch):
    """A hog through the decision, gone when the search starts waiting (bench's
    `--search-beside-hog ends`): with no quiet price stored (a fresh cache) the search measures
    its end-to-end check again and keeps that run's pick.  Other jobs share this host, so a
    repeat that was itself contended is allowed; it must then say it waited in vain."""
    import os
    import signal

    from provmap.partition.compile import compile_model, load_view
    from provmap.partition.quiet_again import WAITING

    view = load_view("bundled:transformer")
    monkeypatch.setenv("PROVMAP_CONTENTION", "act")
    monkeypatch.setattr(hygiene, "PAUSE_S", 1.0)
    said = []
    with cpu_hog(600.0) as pid:
        def progress(m):
            said.append(m)
            if WAITING in m:
                os.kill(pid, signal.SIGKILL)
        art = compile_model(view, "collage:onnxruntime,openvino", progress=progress,
                            collage_options=_opts(tmp_path / "c.sqlite", quiet_wait_s=20.0))
    rep = art.manifest["plan_info"]["collage"]
    if not rep["conditions"]["contended"]:
        assert "fallback" not in rep
        return
    rec = rep["fallback"]
    print("fallback:", rec)
    assert sum(WAITING in m for m in said) == 1
    waited = rec["waited"]
    if not waited["quiet"]:
        assert "in vain" in rec["why"]
        assert ("a guess, kept as asked" in rec["why"]) == bool(rec.get("guess"))
        return
    assert rec["quiet"]["source"] == "measured end to end again, quietly"
    # every plan the check measured (identical plans once), measured again
    assert rec["kept"] == waited["winner"]
    assert set(waited["measured"]) >= set(rep["e2e"]["measured"]) >= {"single:openvino"}
    kept = art.manifest["strategy"]
    assert kept == ("collage" if rec["kept"] == "collage" else f"collage->{rec['kept']}")
    if rec["instead_of"]:
        assert rep["level"] == f"quiet repeat of the end-to-end check ({rec['kept']})"
