"""The command line itself, through the real CLI in a subprocess: --version and every option's
help text; a refusal is one `provmap: error:` line (argparse's too, naming the command), JSON on
stdout under --json, with a did-you-mean for a mistyped command or option; a reader that leaves
early is no error; and a broken installation is one line, not a traceback."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from cli_models import model_file
from cli_runner import one_error, one_line_refusal, provmap, refused_in_process
from onnx import TensorProto, helper

pytestmark = [pytest.mark.usefixtures("own_config"),
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def test_version():
    r = provmap("--version")
    assert r.returncode == 0 and r.stdout.startswith("provmap ")


def test_options_have_help_text():
    from provmap.cli.main import build_parser

    subs = next(a for a in build_parser()._actions if a.dest == "command").choices
    for cmd in ("compile", "run", "inspect", "lookup", "bisect", "compare", "report"):
        for action in subs[cmd]._actions:
            if action.option_strings and action.dest != "help":
                assert action.help, f"provmap {cmd} {action.option_strings[0]} has no help"


def test_a_named_command_builds_its_part_of_the_parser_only():
    """The table of which function adds which command is the full parser's, and `provmap run`
    builds (and imports) run's part only; the root's --help and a mistyped command get all."""
    from provmap.cli.main import COMMANDS, build_parser

    def commands(p):
        return list(next(a for a in p._actions if a.dest == "command").choices)

    every = commands(build_parser())
    assert sorted(every) == sorted(c for cs in COMMANDS.values() for c in cs)
    for cs in COMMANDS.values():
        for c in cs:
            assert commands(build_parser(["-v", c, "x"])) == list(cs)
    for words in (["--help"], ["rnu", "x"], [], ["-v"]):
        assert commands(build_parser(words)) == every


@pytest.mark.parametrize("args, words", [
    (("run", "A", "--repeats", "0", "--json"), ("provmap run: error:", "--repeats", "--help")),
    (("compare", "A", "--atol", "-1", "--json"), ("provmap compare: error:", "--atol")),
    (("compile", "X", "--json"), ("provmap compile: error:", "-o/--output")),
])
def test_argparse_errors_are_one_line_and_json_under_json(args, words):
    r = provmap(*args)
    line = one_line_refusal(r, *words, prog=words[0].split(":")[0])
    obj = json.loads(r.stdout)
    assert obj["code"] == 2 and obj["error"] in line


def test_mistyped_commands_and_options_get_a_did_you_mean():
    r = provmap("inspec", "x.provmap")
    assert "did you mean inspect" in one_line_refusal(r, "inspec") and r.stdout == ""
    r = provmap("run", "A", "--jsn")
    one_line_refusal(r, "--jsn", "did you mean --json?", "provmap run --help", prog="provmap run")


def test_errors_are_json_on_stdout_under_json(tmp_path):
    """Scripts read `--json` output; a failure printed only a stderr line (issue 36)."""
    import json

    for args in (("inspect", tmp_path / "missing.provmap", "--json"),
                 ("map", tmp_path / "missing.onnx", "-o", tmp_path / "m", "--json"),
                 ("backends", "--json", "--options")):
        r = provmap(*args)
        if args[0] == "backends":
            assert r.returncode == 0 and "error" not in json.loads(r.stdout)
            continue
        line = one_error(r, "missing.")
        doc = json.loads(r.stdout)
        assert doc == {"error": line.removeprefix("provmap: error: "), "code": 2}
    r = provmap("inspect", tmp_path / "missing.provmap")  # without --json: stderr only
    assert r.returncode == 2 and r.stdout == ""


def test_lookup_json_answers_with_an_error_object(log_dir):
    r = provmap("lookup", log_dir / "log.provmap", "--onnx-node", "nosuch", "--json")
    assert r.returncode == 2
    ans = json.loads(r.stdout)  # one object, not a second error object after it
    assert ans["results"] == [] and "nosuch" in ans["error"] and ans["code"] == 2


def test_json_into_a_closed_pipe_is_silent(log_relu_dir):
    """`provmap inspect --json | head -c1`: the reader leaves early, which is not an error."""
    p = subprocess.Popen([sys.executable, "-m", "provmap.cli.main", "inspect",
                          str(log_relu_dir / "m.provmap"), "--json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()  # before the interpreter has even imported provmap
    err = p.stderr.read().decode()
    assert p.wait() == 0, err
    assert "Broken pipe" not in err and "error" not in err and "Exception" not in err, err


def test_a_compile_refused_after_the_import_is_one_line(tmp_path):
    """The "imported ..." progress line is held until the build goes on: a refusal right after
    the import was two lines, the progress first (issue 36)."""
    r = provmap("compile", "bundled:squeezenet", "-o", tmp_path / "x.provmap", "--strategy",
                "single:openvino", "--backend-option", "openvino.only_ops=Relu")
    one_error(r, "is not supported by openvino")
    assert r.stderr.strip().count("\n") == 0, r.stderr
    ok = provmap("compile", "bundled:squeezenet", "-o", tmp_path / "y.provmap", "--strategy",
                 "single:onnxruntime")
    assert ok.returncode == 0 and "provmap: imported squeezenet:" in ok.stderr


def test_wording_of_three_refusals(tmp_path):
    """Duplicate node names (ORT refuses the file) are said at compile; `report --model` was
    told "did you mean --help?"; `--pin X=tvm` called TVM unknown when the search just did
    not use it."""
    model = model_file(tmp_path / "m.onnx",
                       [helper.make_node("Relu", ["x"], ["a"], name="dup"),
                        helper.make_node("Sigmoid", ["a"], ["y"], name="dup")],
                       [("x", TensorProto.FLOAT, [2])], [("y", TensorProto.FLOAT, [2])])
    art = tmp_path / "a.provmap"
    r = provmap("compile", model, "-o", art, "--strategy", "single:openvino")
    assert r.returncode == 0 and "node name(s) 'dup' appear more than once" in r.stderr, r.stderr
    r = provmap("report", art, "-o", tmp_path / "r.html", "--model", model)
    assert r.returncode == 2 and "unrecognized arguments: --model" in r.stderr, r.stderr
    assert "--help?" not in r.stderr
    r = provmap("compile", model, "-o", tmp_path / "b.provmap", "--strategy",
                "collage:onnxruntime,openvino", "--pin", "dup=tvm", "--search-budget", "5")
    one_error(r, "a backend this search does not use 'tvm'", "collage:onnxruntime,openvino,tvm")


def test_a_library_failing_to_import_while_the_parser_is_built_is_one_line(capsys,
                                                                          monkeypatch):
    """Building the parser imports the backends' option tables; a broken installation (seen:
    torch's libraries half-installed under TVM's import) printed a traceback."""
    import provmap.cli.main as cli_main

    def broken(words=None):
        raise OSError("libtorch_global_deps.so: cannot open shared object file")
    monkeypatch.setattr(cli_main, "build_parser", broken)
    refused_in_process(capsys, ["inspect", "x.provmap"], "cannot start", "libtorch_global_deps.so")


#: In a fresh interpreter: each command line through main(), then the heavy libraries imported
#: so far (cumulative, so the first case that shows one is the one that imported it).
_IMPORTS_AFTER = """
import contextlib, io, json, sys
from provmap.cli.main import main
heavy = ("tvm", "onnxruntime", "openvino", "torch")
seen = []
for argv in json.loads(sys.argv[1]):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            rc = main(argv)
        except SystemExit as e:  # --help
            rc = e.code
    seen.append([argv, rc, sorted(m for m in heavy if m in sys.modules)])
print(json.dumps(seen))
"""


def test_flag_and_argument_mistakes_are_refused_before_any_backend_is_imported(tmp_path):
    """TVM's import takes seconds (torch comes with it where installed), and `compile` with a
    flag mistake waited for it before saying one line (issue 53).  Checked by what the process
    imported, never by how long it took."""
    art, missing = str(tmp_path / "a.provmap"), str(tmp_path / "missing.onnx")
    cases = [
        ["compile", "--nonsense"],
        ["run", "--help"],
        ["compile", "bundled:squeezenet", "-o", art, "--strategy", "nosuch"],
        ["compile", missing, "-o", art],  # the default strategy, collage
        ["compile", str(tmp_path), "-o", art, "--strategy", "single:onnxruntime"],
        ["compile", "bundled:squeezenett", "-o", art],
        ["compile", "bundled:squeezenet", "-o", art, "--input-shape", "data_0=1xAx3"],
        ["compile", "bundled:squeezenet", "-o", art, "--backend-option", "openvino.threads=abc"],
        ["compile", "bundled:squeezenet", "-o", art, "--strategy", "single:tvm",
         "--backend-option", "tvm.tune=bogus"],
        ["compile", "bundled:squeezenet", "-o", art, "--strategy", "single:tvm", "--tuning-db",
         str(tmp_path / "db")],
        ["compile", "bundled:squeezenet", "-o", art, "--pin", "garbage"],
        ["compile", "bundled:squeezenet", "-o", art, "--measure-on", "garbage"],
        ["compile", "bundled:squeezenet", "-o", art, "--variant", "thred=1"],
        ["map", missing, "-o", str(tmp_path / "m")],
        ["map", "bundled:squeezenet", "-o", str(tmp_path / "m"), "--dim", "bad"],
        ["bisect", missing, "--backend", "openvino"],
        ["run", str(tmp_path / "missing.provmap")],
    ]
    r = subprocess.run([sys.executable, "-c", _IMPORTS_AFTER, json.dumps(cases)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    seen = json.loads(r.stdout)
    assert [rc for _argv, rc, _heavy in seen] == [2, 0] + [2] * (len(cases) - 2), seen
    assert [(argv, heavy) for argv, _rc, heavy in seen if heavy] == [], seen
