"""Option values and flags, refused when the command line is read, before any work: numbers out
of range, not whole or not ASCII digits; a flag or a single-valued option given twice; an empty
or malformed list; an option that acts only beside another, or would be ignored or misread, or
contradicts the strategy.  Backend options (`--backend-option`, `backend[opt=val]`) are in
test_backend_option_values.py, the search's in test_cli_compile.py, --input-shape in
test_cli_input_shapes.py."""

from __future__ import annotations

import json

import pytest
from cli_models import external_data_model
from cli_runner import provmap, refused

pytestmark = [pytest.mark.usefixtures("own_config"),
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def _usage_error(r, *words):
    """argparse's refusals: one `provmap COMMAND: error:` line, exit 2, no traceback."""
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and ": error:" in lines[0], r.stderr
    for w in words:
        assert w in lines[0], (w, r.stderr)


@pytest.mark.parametrize("args,option", [
    (("run", "{a}", "--repeats", "0"), "--repeats"),
    (("run", "{a}", "--iterations", "-2"), "--iterations"),
    (("run", "{a}", "--warmup", "-1"), "--warmup"),
    (("run", "{a}", "--seed", "-1"), "--seed"),
    (("profile", "{a}", "--repeats", "0"), "--repeats"),
    (("profile", "{a}", "--top", "-3"), "--top"),
    (("report", "{a}", "-o", "{d}/r.html", "--measure", "--repeats", "0"), "--repeats"),
    (("inspect", "{a}", "--limit", "-1"), "--limit"),
    (("compare", "{a}", "--atol", "-1"), "--atol"),
    (("compare", "{a}", "--rtol", "nan"), "--rtol"),
    (("compare", "{a}", "--quant-steps", "-1"), "--quant-steps"),
    (("compile", "{d}/m.onnx", "-o", "{d}/x.provmap", "--search-budget", "-5"),
     "--search-budget"),
    (("compile", "{d}/m.onnx", "-o", "{d}/x.provmap", "--refine-budget", "inf"),
     "--refine-budget"),
    (("bench", "-o", "{d}/b", "--repeats", "0"), "--repeats"),
    (("rpc-server", "--tracker", "127.0.0.1:1", "--key", "k", "--port", "70000"), "--port"),
    (("rpc-server", "--tracker", "127.0.0.1:1", "--key", "k", "--stop-after", "-1"),
     "--stop-after"),
])
def test_numbers_are_refused_when_the_command_line_is_read(log_relu_dir, args, option):
    r = provmap(*[a.format(a=log_relu_dir / "m.provmap", d=log_relu_dir) for a in args])
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"argument {option}" in r.stderr, r.stderr
    assert "loaded" not in r.stderr and "imported" not in r.stderr
    assert not (log_relu_dir / "x.provmap").exists()


def test_counts_are_ascii_and_bounded(artifact):
    """`profile --repeats 99999999999999999999` ran until killed; `threads=٣` (an Arabic-Indic
    digit) passed int()."""
    r = provmap("profile", artifact, "--repeats", "99999999999999999999")
    assert r.returncode == 2 and "from 1 to 1000000" in r.stderr, r.stderr
    r = provmap("run", artifact, "--random", "--repeats", "٣")
    assert r.returncode == 2 and "'٣' is not a whole number" in r.stderr, r.stderr


def test_warmup_is_bounded_like_repeats(tmp_path):
    """`run --warmup 100000000` was accepted and started three days of untimed runs."""
    r = provmap("run", tmp_path / "any.provmap", "--warmup", "100000000")
    assert r.returncode == 2 and "a whole number from 0 to 1000000" in r.stderr, r.stderr


@pytest.mark.parametrize("argv", [
    ["inspect", "--json", "--json", "{a}"],
    ["lookup", "{a}", "--json", "--onnx-node", "x", "--json"],
    ["run", "{a}", "--random", "--trust", "--trust"],
])
def test_a_flag_given_twice_is_refused_like_an_option_given_twice(artifact, argv):
    """`--json --json` was taken without a word, where `-o a -o b` is refused."""
    r = provmap(*[str(artifact) if x == "{a}" else x for x in argv])
    flag = "--json" if "--json" in argv else "--trust"
    assert r.returncode == 2 and r.stderr == (
        f"provmap {argv[0]}: error: argument {flag}: given twice; give it once "
        f"(see `provmap {argv[0]} --help`)\n"), r.stderr
    if flag == "--json":  # the refusal is JSON too, as every error under --json
        assert json.loads(r.stdout)["code"] == 2


def test_repeated_single_valued_options_and_empty_backends_are_refused(tmp_path, artifact):
    """`-o a -o b` kept the last value without a word; `--backends ""` searched the default
    backends."""
    one_error = _usage_error
    one_error(provmap("run", artifact, "-o", tmp_path / "a.npz", "-o", tmp_path / "b.npz"),
              "-o/--output: given twice")
    one_error(provmap("run", artifact, "--repeats", "2", "--repeats=3"), "--repeats: given twice")
    for value in ("", "onnxruntime,,tvm"):
        one_error(provmap("compile", "m.onnx", "-o", tmp_path / "x.provmap", "--backends", value),
                  "--backends", "comma-separated list of backends")
    assert not list(tmp_path.iterdir())
    help_text = provmap("compile", "--help").stdout
    assert "precision=bf16" not in help_text  # refused on hosts without bf16


@pytest.mark.parametrize("argv, words", [
    (("report", "{a}", "-o", "{d}/r.html", "--repeats", "50"), "--repeats applies only with "
     "--measure"),
    (("report", "{a}", "-o", "{d}/r.html", "--trust"), "--trust applies only with --measure"),
    (("explain", "{a}", "--model", "{d}/m.onnx"), "--model applies only with --headroom"),
    (("explain", "{a}", "--repeats", "3", "--trust"), "--repeats/--trust apply only with "
     "--headroom"),
])
def test_options_that_act_only_beside_another_are_refused_alone(tmp_path, artifact, argv,
                                                                 words):
    """`report --repeats 50` profiled nothing and `explain --model m.onnx` read nothing, exit 0
    (issue 36's fourth afternoon)."""
    r = provmap(*(str(x).format(a=artifact, d=tmp_path) for x in argv))
    refused(r, words)
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("argv, words", [
    (("run", "{a}", "--inputs", "{d}/in.npz", "--seed", "4"), "--seed applies to random inputs"),
    (("inspect", "{a}", "--json", "--limit", "2"), "--limit trims the text listing"),
    (("compile", "{m}", "-o", "{d}/x.provmap", "--strategy", "single:onnxruntime",
      "--tuning-db", "{d}/db"), "--tuning-db applies to TVM backends"),
    (("compile", "{m}", "-o", "{d}/x.provmap", "--strategy", "single:onnxruntime",
      "--input-shape", "x=\u0664x16"), "dimensions must be integers"),
])
def test_options_that_would_be_ignored_or_misread_are_refused(tmp_path, artifact, argv, words):
    """Each was taken, exit 0: a seed beside --inputs, --limit under --json, --tuning-db with
    no TVM backend, an Arabic-Indic digit read as 4 (issue 36's fifth afternoon)."""
    model = external_data_model(tmp_path / "m.onnx")
    assert provmap("run", artifact, "--random", "--save-inputs", tmp_path / "in.npz"
                   ).returncode == 0
    r = provmap(*(str(x).format(a=artifact, d=tmp_path, m=model) for x in argv))
    refused(r, words)
    assert not (tmp_path / "x.provmap").exists()


def test_backends_that_contradict_the_strategy_are_refused(log_relu_dir):
    r = provmap("compile", log_relu_dir / "m.onnx", "-o", log_relu_dir / "c.provmap",
                "--strategy", "collage:onnxruntime", "--backends", "openvino")
    assert r.returncode == 2 and "different backends" in r.stderr, r.stderr
    assert not (log_relu_dir / "c.provmap").exists()
