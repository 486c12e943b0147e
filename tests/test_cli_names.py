"""Issue 26's habits, through the real CLI in a subprocess: one name for one idea across
subcommands, numbers refused when the command line is read, messages that say what is wrong."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from cli_runner import provmap

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def art(tmp_path_factory):
    """x -> Log -> Relu -> y, split over two backends of different name lengths (Relu excluded
    from OpenVINO), so columns of compare and profile have something to misalign."""
    d = tmp_path_factory.mktemp("names")
    g = helper.make_graph([helper.make_node("Log", ["x"], ["t"], name="log"),
                           helper.make_node("Relu", ["t"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(m, d / "m.onnx")
    r = provmap("compile", d / "m.onnx", "-o", d / "m.provmap", "--strategy",
                "greedy:openvino,onnxruntime", "--backend-option", "openvino.exclude_ops=Relu",
                "--embed-model")
    assert r.returncode == 0, r.stderr
    (d / "compile.stderr").write_text(r.stderr)
    np.savez(d / "in.npz", x=np.array([0.5, 1.0, 2.0, 3.0], np.float32))
    (d / "inputs.txt").write_text("x = 1.0, 2.0, 3.0, 4.0\n")
    return d


def test_counts_of_one_are_singular(art):
    err = (art / "compile.stderr").read_text()
    assert "(1 op node)" in err and "op nodes)" not in err, err  # not "1 op nodes"


def test_run_names_its_timed_runs_repeats_and_keeps_the_old_spellings(art):
    for flag in ("--repeats", "--iterations", "--repeat"):
        r = provmap("run", art / "m.provmap", flag, "3", "--json")
        assert r.returncode == 0, (flag, r.stderr)
        assert len(json.loads(r.stdout)["run_ms"]) == 3
    assert "--repeats" in provmap("run", "--help").stdout
    assert "--iterations" not in provmap("run", "--help").stdout  # hidden alias


def test_random_inputs_are_the_default_and_random_is_accepted_everywhere(art):
    r = provmap("run", art / "m.provmap")  # used to demand --random
    assert r.returncode == 0 and "latency over 1 run after" in r.stdout, r.stderr
    for args in (("run", art / "m.provmap", "--random", "--seed", "3"),
                 ("compare", art / "m.provmap", "--random"),
                 ("profile", art / "m.provmap", "--random", "--repeats", "2")):
        r = provmap(*args)
        assert r.returncode == 0, (args, r.stderr)
    r = provmap("compare", art / "m.provmap", "--random", "--inputs", art / "in.npz")
    assert r.returncode == 2 and "not both" in r.stderr


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
def test_numbers_are_refused_when_the_command_line_is_read(art, args, option):
    r = provmap(*[a.format(a=art / "m.provmap", d=art) for a in args])
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"argument {option}" in r.stderr, r.stderr
    assert "loaded" not in r.stderr and "imported" not in r.stderr
    assert not (art / "x.provmap").exists()


def test_inputs_are_checked_before_the_artifact_loads(art, tmp_path):
    # The artifact does not exist: a bad inputs file is still what is said, first.
    for cmd in ("run", "compare", "profile"):
        r = provmap(cmd, tmp_path / "nothing.provmap", "--inputs", art / "inputs.txt")
        assert r.returncode == 2 and "inputs.txt: not a valid .npz file" in r.stderr, r.stderr
        assert "a text file" in r.stderr and "Python objects" not in r.stderr


def test_an_onnx_model_given_for_an_artifact_points_at_compile(art, tmp_path):
    (tmp_path / "model.bin").write_bytes((art / "m.onnx").read_bytes())
    for args in (("run", art / "m.onnx"), ("inspect", art / "m.onnx"),
                 ("compare", tmp_path / "model.bin")):
        r = provmap(*args)
        assert r.returncode == 2 and "Traceback" not in r.stderr
        assert "an ONNX model, not a provmap artifact" in r.stderr, r.stderr
        assert "provmap compile" in r.stderr and "zip" not in r.stderr


def test_backends_that_contradict_the_strategy_are_refused(art):
    r = provmap("compile", art / "m.onnx", "-o", art / "c.provmap", "--strategy",
                "collage:onnxruntime", "--backends", "openvino")
    assert r.returncode == 2 and "different backends" in r.stderr, r.stderr
    assert not (art / "c.provmap").exists()


def test_json_into_a_closed_pipe_is_silent(art):
    """`provmap inspect --json | head -c1`: the reader leaves early, which is not an error."""
    p = subprocess.Popen([sys.executable, "-m", "provmap.cli.main", "inspect",
                          str(art / "m.provmap"), "--json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()  # before the interpreter has even imported provmap
    err = p.stderr.read().decode()
    assert p.wait() == 0, err
    assert "Broken pipe" not in err and "error" not in err and "Exception" not in err, err


def test_lookup_prints_expression_shapes_as_numbers(art):
    info = json.loads(provmap("inspect", art / "m.provmap", "--json").stdout)
    nid = info["partitions"][0]["onnx_nodes"][0]["id"]
    node = json.loads(provmap("lookup", art / "m.provmap", "--onnx-node", nid, "--json").stdout)
    mod = provmap("inspect", art / "m.provmap", "--relax").stdout
    eid = re.search(r'"provmap.exprs": \["(e[0-9a-f]+)"', mod).group(1)
    r = provmap("lookup", art / "m.provmap", "--expr", eid)
    assert r.returncode == 0 and node["results"], r.stderr
    assert "float32[4]" in r.stdout and "T.int64" not in r.stdout, r.stdout
    ans = json.loads(provmap("lookup", art / "m.provmap", "--expr", eid, "--json").stdout)
    assert ans["results"][0]["shape"] == "4"


def _column(lines, word):
    return {ln.index(word) for ln in lines if word in ln}


def test_compare_and_profile_columns_line_up(art):
    r = provmap("compare", art / "m.provmap", "--inputs", art / "in.npz")
    assert r.returncode == 0, r.stderr
    rows = [ln for ln in r.stdout.splitlines() if ln.startswith(("ok", "FAIL"))]
    assert len(rows) == 2 and {"openvino", "onnxruntime"} <= set(r.stdout.split())
    # the tensor names start in one column whatever the backend's name length
    assert len({ln.index(" t (") if " t (" in ln else ln.index(" y (") for ln in rows}) == 1, rows
    r = provmap("profile", art / "m.provmap", "--inputs", art / "in.npz", "--repeats", "2")
    assert r.returncode == 0, r.stderr
    rows = [ln for ln in r.stdout.splitlines() if re.match(r"  p\d ", ln)]
    assert len(rows) == 2 and len(_column(rows, " ms ")) == 1, rows
    assert "1 kernels" not in r.stdout


def test_profile_text_says_the_attributed_share_and_the_unattributed_rows(art):
    """Issue 35's attribution reached --json only: the text output listed the top nodes as if
    they were all of the time.  After them: one line with the share, then the rest by row."""
    r = provmap("profile", art / "m.provmap", "--inputs", art / "in.npz", "--repeats", "2")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    head = [i for i, ln in enumerate(lines) if ln.startswith("attributed to ONNX nodes: ")]
    assert len(head) == 1 and head[0] > lines.index("top ONNX nodes:"), r.stdout
    m = re.fullmatch(r"attributed to ONNX nodes: (\d+\.\d)% of the partitions' (\d+\.\d{3}) ms; "
                     r"unattributed (-?\d+\.\d{3}) ms(:?)", lines[head[0]])
    assert m and 0 <= float(m.group(1)) <= 100, lines[head[0]]
    rows = lines[head[0] + 1:]
    # both partitions spend some time outside their kernels (the library's per-call time)
    assert m.group(4) == ":" and 1 <= len(rows) <= 5, r.stdout
    assert all(re.match(r"  +\d+\.\d{4} ms  p\d \[(openvino|onnxruntime)\]  \w", ln)
               for ln in rows), rows


def test_profile_text_escapes_the_unattributed_rows(art, monkeypatch, capsys):
    """The rows name partitions and backends from the artifact (someone else's text), as the
    other lines do: a control character is shown, not acted on by the terminal."""
    from provmap.cli.main import main as cli_main
    from provmap.workbench import profile

    real = profile.profile_artifact

    def hostile(*a, **kw):
        res = real(*a, **kw)
        res["unattributed"]["rows"] = [{"partition": "p0", "backend": "\x1b[31mred", "ms": 1.0,
                                        "what": "outside kernels"}] * 7
        return res

    monkeypatch.setattr(profile, "profile_artifact", hostile)
    assert cli_main(["profile", str(art / "m.provmap"), "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and out.count("\\x1b[31mred") == 5, out
    assert "  ... 2 more (--json lists them)" in out, out


def test_the_plugin_walkthrough_in_docs_backends_shows_what_inspect_prints(tmp_path):
    """docs/backends.md's inspect example, compared line by line with the real command (it had
    gone stale: "op node(s)", a missing ORT option, a run summary the CLI no longer prints)."""
    import os
    from pathlib import Path

    from test_plugin_backend import EXAMPLE, _install_dist

    site = tmp_path / "site"
    _install_dist(site, "provmap-numpy-backend", "0.1",
                  {"numpyref": "provmap_numpy_backend:NumpyBackend"})
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(EXAMPLE)]))

    def run(*args):
        r = subprocess.run([sys.executable, "-m", "provmap.cli.main", *args], cwd=tmp_path,
                           env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return r.stdout

    run("compile", "bundled:transformer", "-o", "t.provmap", "--strategy",
        "greedy:numpyref,onnxruntime")
    doc = (Path(__file__).resolve().parents[1] / "docs" / "backends.md").read_text()
    shown = re.search(r"```bash\nprovmap inspect t.provmap\n```\n\n```\n(.*?)```", doc,
                      re.S).group(1)
    real = run("inspect", "t.provmap").splitlines()
    for line in shown.splitlines():
        if line.strip() and line != "...":
            assert line in real, f"docs/backends.md shows {line!r}; inspect prints:\n" + \
                "\n".join(real)
    ran = re.search(r"```bash\nprovmap run t.provmap\n```\n\n```\n(.*?)```", doc, re.S).group(1)
    out = run("run", "t.provmap")
    for doc_line, line in zip(ran.splitlines(), out.splitlines(), strict=True):
        assert re.sub(r"[\d.]+ ms", "", doc_line.split(" min ")[0]) == \
            re.sub(r"[\d.]+ ms", "", line.split(" min ")[0]), (doc_line, line)


def test_map_says_what_its_pass_check_found_in_words(tmp_path):
    from small_models import conv_relu

    onnx.save(conv_relu(), tmp_path / "m.onnx")
    r = provmap("map", tmp_path / "m.onnx", "-o", tmp_path / "m")
    assert r.returncode == 0, r.stderr
    assert "debugify" not in r.stdout and "0 places where a TVM pass lost the link" in r.stdout


def test_a_search_without_a_budget_gets_the_stated_default(art, tmp_path):
    """compile and provmap.compile() used to search with no time limit at all."""
    from provmap.partition.collage import DEFAULT_SEARCH_BUDGET_S

    api = __import__("provmap")

    assert f"default {DEFAULT_SEARCH_BUDGET_S:g} s" in provmap_help("compile")
    r = provmap("compile", art / "m.onnx", "-o", tmp_path / "c.provmap", "--strategy", "collage",
                "--no-e2e-check", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["search"]["measure_budget_s"] == DEFAULT_SEARCH_BUDGET_S
    assert f"measuring budget {DEFAULT_SEARCH_BUDGET_S:g} s" in r.stderr
    # Counted before explain priced the kept partitions again ("priced 8 of 6 candidates").
    asked, total = map(int, re.search(r"asked for (\d+) of (\d+) candidates", r.stderr).groups())
    assert asked <= total, r.stderr
    r = provmap("compile", art / "m.onnx", "-o", tmp_path / "n.provmap", "--strategy", "collage",
                "--no-e2e-check", "--search-budget", "none", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["search"]["measure_budget_s"] is None
    a = api.compile(str(art / "m.onnx"), "collage", out=str(tmp_path / "api.provmap"))
    assert a.manifest["plan_info"]["collage"]["measure_budget_s"] == DEFAULT_SEARCH_BUDGET_S


def provmap_help(cmd):
    return " ".join(provmap(cmd, "--help").stdout.split())


def test_explain_says_which_rule_tied_the_plans_and_shows_minimums(art, tmp_path):
    """The tie-break holds a plan tied when its median is within the margin *or* its minimum
    is lower; explain said "within 3%" next to medians 43% apart and showed no minimum.  A wide
    margin makes a real tie-break certain on a two-node model."""
    from provmap.partition.collage import CollageOptions

    api = __import__("provmap")

    out = tmp_path / "t.provmap"
    api.compile(str(art / "m.onnx"), "collage", out=str(out), collage_options=CollageOptions(
        e2e_tie_margin=10.0, refine_budget_s=0, cache_path=str(tmp_path / "c.sqlite")))
    r = provmap("explain", out)
    assert r.returncode == 0, r.stderr
    x = json.loads(provmap("explain", out, "--json").stdout)["end_to_end"]
    assert x["tie_break"] and set(x["measured_min_ms"]) == set(x["measured_ms"])
    check = next(ln for ln in r.stdout.splitlines() if ln.startswith("end-to-end check"))
    for k, med in x["measured_ms"].items():
        assert f"{k} {med:.3f} / {x['measured_min_ms'][k]:.3f}" in check, check
    tie = next(ln for ln in r.stdout.splitlines() if "first pick" in ln)
    w = x["tie_break"]["first_pick"]
    for k in x["tie_break"]["tied"]:
        assert f"{k} (median {x['measured_ms'][k]:.3f} within 1000% of " \
               f"{x['measured_ms'][w]:.3f})" in tie, tie


def test_bench_times_openvino_directly_the_way_provmap_calls_it(art):
    """The container-overhead table compared provmap's pybind call with OpenVINO's Python
    wrapper (an input copy and an OVDict more per call): the artifact looked 25-33% faster than
    the library on sub-ms models.  The direct call is now the pybind one, on the same inputs."""
    import openvino as ov

    from provmap.bench.suite import _direct, direct_openvino_call

    model = onnx.load(art / "m.onnx")
    x = {"x": np.array([0.5, 1.0, 2.0, 3.0], np.float32)}
    core = ov.Core()
    compiled = core.compile_model(core.read_model(model.SerializeToString(), b""), "CPU",
                                  {"INFERENCE_PRECISION_HINT": "f32"})
    want = np.maximum(np.log(x["x"]), 0)
    d = _direct("openvino", model)  # opened for its own blocks (rooms), closed after
    d.open()
    for call in (direct_openvino_call(compiled), d.call):
        (y,) = [np.asarray(v) for v in call(x).values()]
        np.testing.assert_allclose(y, want, rtol=1e-6)
    assert d.call.__qualname__.startswith("direct_openvino_call")
    d.close()
    assert d.call is None
