"""The search's own words (issue 36): the summary names the level (a decision's lines and their
numbers: tests/test_decision.py), budgets are honoured or say what they bound, search flags outside collage are
refused instead of ignored."""

from __future__ import annotations

import pytest

from cli_runner import one_error, provmap
from provmap.cli.main import build_parser
from provmap.workbench.explain import level_words


@pytest.mark.parametrize("level,words", [
    ("first", "first level (the shortest path"), ("second", "second level (end-to-end"),
    ("end-to-end check (single:openvino)", "the end-to-end check (single:openvino)")])
def test_the_summary_names_the_level_in_words(level, words):
    assert words in level_words(level)


def test_both_budgets_take_none():
    p = build_parser()
    a = p.parse_args(["compile", "m.onnx", "-o", "x", "--search-budget", "none",
                      "--refine-budget", "none"])
    assert a.search_budget is None and a.refine_budget is None
    a = p.parse_args(["compile", "m.onnx", "-o", "x"])
    assert not hasattr(a, "search_budget") and not hasattr(a, "refine_budget")  # defaults
    from provmap.cli.compile_flags import collage_options, strategy_of

    a = p.parse_args(["compile", "m.onnx", "-o", "x", "--strategy", "collage", "--quiet-wait",
                      "0"])
    assert collage_options(a, strategy_of(a)).quiet_wait_s == 0.0
    a = p.parse_args(["compile", "m.onnx", "-o", "x", "--strategy", "collage"])
    assert collage_options(a, strategy_of(a)).quiet_wait_s == 120.0
    assert not collage_options(a, strategy_of(a)).accept_contended  # a guess is refused
    a = p.parse_args(["compile", "m.onnx", "-o", "x", "--strategy", "collage",
                      "--accept-contended"])
    assert collage_options(a, strategy_of(a)).accept_contended


@pytest.mark.parametrize("flags,words", [
    (["--search-budget", "30"], "--search-budget applies to --strategy collage only"),
    (["--refine-budget", "none"], "--refine-budget applies"),
    (["--cache", "c.sqlite"], "--cache applies"),
    (["--quiet-wait", "30"], "--quiet-wait applies"),
    (["--accept-contended"], "--accept-contended applies"),
    (["--search-budget", "5", "--pin", "n=openvino"], "--search-budget/--pin apply"),
])
def test_search_flags_outside_collage_are_refused_before_the_model_is_read(tmp_path, flags,
                                                                            words):
    r = provmap("compile", "bundled:squeezenet", "-o", tmp_path / "a.provmap", "--strategy",
                "single:onnxruntime", *flags)
    one_error(r, words, "single:onnxruntime would ignore")
    assert "imported" not in r.stderr and not (tmp_path / "a.provmap").exists()


def test_compare_without_the_model_says_which_model_to_pass(tmp_path):
    """The quick-start artifact (bundled:squeezenet, not embedded): compare said only "no
    --model was given" though the manifest knows the model."""
    art = tmp_path / "a.provmap"
    r = provmap("compile", "bundled:squeezenet", "-o", art, "--strategy", "single:onnxruntime")
    assert r.returncode == 0, r.stderr
    one_error(provmap("compare", art), "no --model was given",
              "pass --model bundled:squeezenet")
    assert provmap("compare", art, "--model", "bundled:squeezenet").returncode == 0
