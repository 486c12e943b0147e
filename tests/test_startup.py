"""Start-up (issue 36): the commands that only read an artifact, and the help, import no backend
library (tvm, onnxruntime, openvino), nor onnx or sqlite_utils, and Ctrl-C while the command starts is one line.  Checked
on the modules a fresh process holds at exit, never on time (bench/startup.py times them)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import small_models

# The CLI run as the console script runs it, reporting which backend libraries it imported:
# the same probe bench/startup.py times.
from provmap.bench.startup import HEAVY, _PROBE  # noqa: E402


def _probe(*args):
    r = subprocess.run([sys.executable, "-c", _PROBE, *map(str, args)], capture_output=True,
                       text=True, timeout=300)
    line = [ln for ln in r.stderr.splitlines() if ln.startswith("HEAVY=")]
    assert line, r.stderr[-2000:]
    return r, json.loads(line[-1][len("HEAVY="):])


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    import provmap

    path = tmp_path_factory.mktemp("startup") / "small.provmap"
    provmap.compile(small_models.conv_relu(), out=path, strategy="single:onnxruntime")
    return path


@pytest.mark.parametrize("argv", [
    ["--help"], ["--version"], ["compile", "--help"], ["map", "--help"], ["trust", "--list"],
    ["inspect", "{a}"], ["inspect", "--json", "{a}"], ["lookup", "{a}", "--onnx-node", "relu"],
    ["lookup", "--json", "{a}", "--kernel", "nope"], ["explain", "{a}"],
], ids=lambda a: " ".join(a).replace("{a}", "ART"))
def test_offline_commands_import_no_backend_library(artifact, argv):
    r, heavy = _probe(*[x.replace("{a}", str(artifact)) for x in argv])
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == (2 if "nope" in argv else 0), r.stderr  # an unknown kernel: one line
    assert heavy == [], (argv, heavy)


@pytest.mark.parametrize("argv", [["inspect", "{a}"], ["lookup", "{a}", "--onnx-node", "relu"],
                                  ["explain", "{a}"], ["trust", "--forget", "{a}"]],
                         ids=lambda a: a[0])
def test_offline_commands_on_a_tvm_artifact_import_no_backend_library(tmp_path_factory, argv):
    """Reading an artifact with a TVM partition imported tvm (and torch with it: inspect 2.4 s
    instead of 0.17) to ask whether its partitions are native code (the twelfth afternoon)."""
    import provmap

    path = tmp_path_factory.mktemp("startup_tvm") / "tvm.provmap"
    provmap.compile(small_models.conv_relu(), out=path, strategy="single:tvm")
    r, heavy = _probe(*[x.replace("{a}", str(path)) for x in argv])
    assert "Traceback" not in r.stderr, r.stderr
    assert heavy == [], (argv, heavy, r.stderr[-500:])


def test_the_native_code_table_is_the_backends_own():
    from provmap.runtime_module.registry import backend_class
    from provmap.runtime_module.trust import BUILTIN_NATIVE

    for name, native in BUILTIN_NATIVE.items():
        assert backend_class(name).loads_native_code is native, name


def test_compile_still_imports_what_it_needs(artifact, tmp_path):
    """The lazy imports are lazy, not missing: a compile imports the backend it builds with."""
    import onnx

    model = tmp_path / "m.onnx"
    onnx.save(small_models.conv_relu(), model)
    r, heavy = _probe("compile", model, "-o", tmp_path / "m.provmap", "--strategy",
                      "single:onnxruntime")
    assert r.returncode == 0, r.stderr
    assert "onnxruntime" in heavy


def test_a_tvm_compile_does_not_import_torch(tmp_path):
    """TVM's packages import torch when it is installed (1.4 s of `import tvm`, about 0.3 GB);
    the CLI imports them without it (import_guard._no_torch_for), and a TVM build still works."""
    pytest.importorskip("torch")  # without torch there is nothing to keep out
    import onnx

    model = tmp_path / "m.onnx"
    onnx.save(small_models.conv_relu(), model)
    probe = _PROBE.replace(repr(HEAVY), repr(("tvm", "torch")))
    r = subprocess.run([sys.executable, "-c", probe, "compile", str(model), "-o",
                        str(tmp_path / "m.provmap"), "--strategy", "single:tvm"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    line = [ln for ln in r.stderr.splitlines() if ln.startswith("HEAVY=")]
    assert json.loads(line[-1][len("HEAVY="):]) == ["tvm"], r.stderr[-2000:]


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_running_an_artifact_without_tvm_partitions_imports_no_tvm(tmp_path, backend):
    """OpenVINO's backend module imported Subgraph, and with it TVM (and through tvm_ffi,
    torch where installed): `run` of an OpenVINO artifact took 2-2.8 s to start."""
    import provmap

    art = tmp_path / "a.provmap"
    provmap.compile(small_models.conv_relu(), out=art, strategy=f"single:{backend}")
    r, heavy = _probe("run", art, "--random")
    assert r.returncode == 0, r.stderr
    assert backend in heavy and "tvm" not in heavy, heavy


def _interrupted(setup: str, argv: list[str], cwd=None) -> str:
    """Run `setup` (which arranges a SIGINT at one moment), then the CLI on `argv`; the command
    must exit 130 with no traceback.  Returns its stderr.  The argv goes in sys.argv, as the
    console script passes it, so the process also leaves the way the console script does."""
    code = (f"{setup}\nimport sys\nimport provmap.cli.main as m\n"
            f"sys.argv = ['provmap', *{argv!r}]\nraise SystemExit(m.main())\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       cwd=cwd)
    assert r.returncode == 130, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and "Exception ignored" not in r.stderr, r.stderr
    return r.stderr


def test_ctrl_c_while_the_parser_is_built_is_one_line():
    setup = ("import os, signal\n"
             "import provmap.cli.main as m\n"
             "build = m.build_parser\n"
             "def interrupted(words=None):\n"
             "    os.kill(os.getpid(), signal.SIGINT)\n"
             "    return build(words)\n"
             "m.build_parser = interrupted\n")
    err = _interrupted(setup, ["inspect", "x.provmap"])
    assert err.strip().splitlines() == ["provmap: interrupted"], err


def test_the_import_guard_installs_in_a_bare_interpreter():
    """The guard imported `signal` inside its own guard: in an interpreter where nothing had
    imported it yet, that import went through the guard again, until RecursionError."""
    code = ("import sys; assert 'signal' not in sys.modules\n"
            "from provmap.provenance.util.import_guard import guard_imports\n"
            "guard_imports(None)\n"
            "import decimal, fractions\n"
            "print('imported')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "imported", r.stderr[-500:]


def test_ctrl_c_while_numpy_imports_is_one_line():
    """numpy's C extension prints the traceback of any exception raised while it imports its
    Python helpers (issue 36: Ctrl-C 0.2 s after start printed 14-30 lines).  The signal is
    sent from inside that import, deterministically."""
    setup = ("import os, signal, sys\n"
             "class Hook:\n"
             "    def find_spec(self, name, path=None, target=None):\n"
             "        if name == 'numpy._utils._inspect':\n"
             "            os.kill(os.getpid(), signal.SIGINT)\n"
             "        return None\n"
             "sys.meta_path.insert(0, Hook())\n")
    err = _interrupted(setup, ["inspect", "x.provmap"])
    assert err.strip().splitlines() == ["provmap: interrupted"], err


def test_ctrl_c_while_a_finished_command_exits_is_one_line(tmp_path):
    """A Ctrl-C in a finished command's teardown killed it silently by SIGINT (status -2, bisect
    had printed its verdict) or printed an "Exception ignored in atexit" block.  The signal is
    sent from an exit handler, deterministically."""
    setup = ("import atexit, os, signal, time\n"
             "def late():\n"
             "    os.kill(os.getpid(), signal.SIGINT)\n"
             "    time.sleep(0.2)\n"
             "atexit.register(late)\n")
    err = _interrupted(setup, ["inspect", "nothing-here.provmap"], cwd=tmp_path)
    assert err.strip().splitlines()[-1] == "provmap: interrupted", err
