"""Issue 36, "a vendor's day without surprises": the defects a new-user check found, each driven
through the real CLI (a fresh process, as a user types it)."""

from __future__ import annotations

import json
import os

import pytest

from cli_runner import provmap

pytestmark = pytest.mark.usefixtures("own_config")


def _refused(r, *words, prog="provmap"):
    """Exit 2, one `PROG: error:` line holding every word, no traceback; the line."""
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and "usage:" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith(f"{prog}: error:")]
    assert len(lines) == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    for w in words:
        assert w in lines[0], (w, r.stderr)
    return lines[0]


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


@pytest.fixture(scope="module")
def artifact(squeezenet_cli_artifact):
    return squeezenet_cli_artifact


def test_a_fifo_or_device_as_an_input_is_refused_not_read(fifo, tmp_path, artifact):
    """`compile FIFO` and `run A --inputs FIFO` hung until killed; /dev/zero read forever."""
    for args in (("compile", fifo, "-o", tmp_path / "x.provmap"),
                 ("compile", "/dev/zero", "-o", tmp_path / "x.provmap"),
                 ("map", fifo, "-o", tmp_path / "m"),
                 ("run", artifact, "--inputs", fifo),
                 ("compare", artifact, "--inputs", fifo),
                 ("compare", artifact, "--model", fifo),
                 ("inspect", artifact, "--model", fifo),
                 ("overlays", artifact, "-o", tmp_path / "ov", "--profile", fifo)):
        r = provmap(*args, timeout=60)
        kind = "a device" if "/dev/zero" in args else "a FIFO"
        path = "/dev/zero" if "/dev/zero" in args else str(fifo)
        _refused(r, f"{path}: not a regular file ({kind})")
    assert not (tmp_path / "x.provmap").exists()


@pytest.mark.parametrize("args, words", [
    (("run", "A", "--repeats", "0", "--json"), ("provmap run: error:", "--repeats", "--help")),
    (("compare", "A", "--atol", "-1", "--json"), ("provmap compare: error:", "--atol")),
    (("compile", "X", "--json"), ("provmap compile: error:", "-o/--output")),
])
def test_argparse_errors_are_one_line_and_json_under_json(args, words):
    r = provmap(*args)
    line = _refused(r, *words, prog=words[0].split(":")[0])
    obj = json.loads(r.stdout)
    assert obj["code"] == 2 and obj["error"] in line


def test_mistyped_commands_and_options_get_a_did_you_mean():
    r = provmap("inspec", "x.provmap")
    assert "did you mean inspect" in _refused(r, "inspec") and r.stdout == ""
    r = provmap("run", "A", "--jsn")
    _refused(r, "--jsn", "did you mean --json?", "provmap run --help", prog="provmap run")


def test_outputs_are_checked_before_any_work(tmp_path, artifact):
    """`-o ""` was refused after the whole build, naming a temp file."""
    for args in (("compile", "bundled:squeezenet", "-o", "", "--strategy", "single:onnxruntime"),
                 ("map", "bundled:squeezenet", "-o", ""),
                 ("run", artifact, "--save-inputs", ""),
                 ("bisect", "bundled:squeezenet", "--backend", "onnxruntime", "-o", "")):
        r = provmap(*args, timeout=120)
        _refused(r, "an empty name")
        assert "imported" not in r.stderr and "building" not in r.stderr


def test_the_replaced_notice_follows_the_work_not_an_error(tmp_path, artifact):
    out = tmp_path / "o.npz"
    out.write_bytes(b"old")
    r = provmap("run", artifact, "-o", out, "--inputs", tmp_path / "missing.npz")
    _refused(r, "missing.npz")
    assert "exists" not in r.stderr and out.read_bytes() == b"old"


def test_an_unknown_llvm_cpu_is_refused_before_any_work(tmp_path):
    """`tvm.mcpu=bogus` was accepted: LLVM's C++ line reached the terminal, generic code was
    built and inspect recorded `mcpu: bogus`."""
    for args in (("--backend-option", "tvm.mcpu=skylak", "--strategy", "single:tvm"),
                 ("--strategy", "single:tvm[mcpu=bogus]")):
        r = provmap("compile", "bundled:squeezenet", "-o", tmp_path / "t.provmap", *args)
        line = _refused(r, "'tvm'", "mcpu", "an LLVM CPU name", "x86-64")
        assert ("did you mean skylake" in line) == ("skylak" in args[1])
        assert "imported" not in r.stderr
    assert not (tmp_path / "t.provmap").exists()


def test_an_unusable_trust_list_is_said_before_a_native_build(tmp_path):
    """PROVMAP_TRUST naming a text file made compile skip recording the build silently, and
    `run` then refused the user's own artifact."""
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    env = {**os.environ, "PROVMAP_TRUST": str(notes)}
    r = provmap("compile", "bundled:squeezenet", "-o", tmp_path / "t.provmap", "--strategy",
                "single:tvm", env=env)
    _refused(r, str(notes), "not a trust list", "nothing was built")
    assert not (tmp_path / "t.provmap").exists() and notes.read_text() == "my notes\n"


def test_mistyped_backends_and_contradicting_op_lists_are_refused_up_front(tmp_path):
    out = tmp_path / "t.provmap"
    r = provmap("compile", "bundled:squeezenet", "-o", out, "--strategy",
                "greedy:openvno,onnxruntime")
    _refused(r, "unknown backend 'openvno'", "did you mean 'openvino'?")
    r = provmap("compile", "bundled:squeezenet", "-o", out, "--strategy", "single:onnxruntime",
                "--backend-option", "onnxruntime.only_ops=Conv,Relu",
                "--backend-option", "onnxruntime.exclude_ops=Conv")
    _refused(r, "Conv is in both only_ops and exclude_ops")
    assert "imported" not in r.stderr and not out.exists()


def test_inspect_json_relax_is_json_and_profile_counts_agree(artifact):
    r = provmap("inspect", artifact, "--json", "--relax")
    assert r.returncode == 0, r.stderr
    obj = json.loads(r.stdout)
    assert "partitions" in obj and "def main" in obj["relax"]
    r = provmap("profile", artifact, "--repeats", "1")
    assert r.returncode == 0 and "1 end-to-end run " in r.stderr, r.stderr


def test_the_bundled_models_the_error_lists_are_the_documented_ones():
    """The error listed models docs/guide.md did not mention."""
    import re
    from pathlib import Path

    r = provmap("compile", "bundled:nosuch", "-o", "x.provmap")
    listed = re.search(r"expected one of ([^(]*)\(", _refused(r, "nosuch")).group(1)
    listed = {n.strip() for n in listed.split(",")}
    guide = (Path(__file__).parents[1] / "docs" / "guide.md").read_text()
    section = guide.split("## Bundled models", 1)[1].split("\n## ", 1)[0]
    paragraph = section.strip().split("\n\n", 1)[0]  # the one naming the models
    documented = set(re.findall(r"`([a-z_0-9]+)`", paragraph))
    assert listed and listed == documented, (listed, documented)
