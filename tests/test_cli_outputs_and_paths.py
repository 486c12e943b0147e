"""Where an output may be written (issue 36; docs/cli.md): `-o` and its kin write only a regular
file in an existing, writable directory, reached through a link to its target (never replacing
the link), checked before any work; an existing file is replaced only on success, with a word;
and nothing is written besides (no temp file left, nothing under $HOME).  As root, `compile -o
/dev/full` used to turn the device into a 120 KB regular file, and `-o /nonexist/dir/x.provmap`
created the directories silently.  A FIFO stands in for a device here: the same test (not a
regular file), without risking the machine's /dev/null.  What an output may never replace (an
input, provmap's own files) is in test_cli_outputs_keep_inputs.py."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import onnx
import pytest
from attack_kit import relu_model
from cli_models import relu_add_model
from cli_runner import one_error, one_line_refusal, provmap, refused
from small_models import conv_relu

# Builds record their digest in the trust list and their prices in the cache: this test's own.
pytestmark = [pytest.mark.usefixtures("own_config"),
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]


@pytest.fixture
def readonly_dir(tmp_path):
    """A directory nobody may create files in: chmod works for users; root bypasses modes, so
    there a kernel directory that refuses new files stands in."""
    import os

    if os.geteuid() != 0:
        d = tmp_path / "ro"
        d.mkdir()
        d.chmod(0o555)
        yield d
        d.chmod(0o755)
    else:
        yield __import__("pathlib").Path("/proc/sys")


def _compile(out, *extra):
    return provmap("compile", "bundled:squeezenet", "-o", out, "--strategy", "single:onnxruntime",
                   *extra)


# -- a regular file, reached through links ----------------------------------------------------

def test_a_special_file_is_refused_and_left_as_it_is(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    one_error(_compile(fifo), str(fifo), "device or special file", "only regular files")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    for dev in ("/dev/null", "/dev/full"):  # refused by the check alone: never written
        r = provmap("run", tmp_path / "missing.provmap", "--random", "-o", dev)
        one_error(r, dev, "device or special file")
        assert stat.S_ISCHR(os.stat(dev).st_mode)


def test_a_link_to_a_fifo_or_device_is_refused_and_left_alone(tmp_path, artifact):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for target in (fifo, "/dev/null"):
        link = tmp_path / "lk"
        link.unlink(missing_ok=True)
        link.symlink_to(target)
        one_error(provmap("run", artifact, "-o", link), f"{link}: a link to a device or "
                  "special file")
        assert link.is_symlink()
    r = provmap("report", artifact, "-o", "/dev/stdout")  # stdout is a pipe here
    one_error(r, "/dev/stdout: a link to a device or special file")
    assert os.path.islink("/dev/stdout")


def test_an_output_through_a_link_replaces_the_target_never_the_link(tmp_path, artifact):
    """`compile -o lk.provmap` and `run -o lk.npz` replaced the link itself with a regular file
    (as root, `report -o /dev/stdout > f` replaced the system's /dev/stdout)."""
    target, link = tmp_path / "target.npz", tmp_path / "lk.npz"
    target.write_bytes(b"old")
    link.symlink_to(target.name)
    r = provmap("run", artifact, "-o", link)
    assert r.returncode == 0, r.stderr
    assert link.is_symlink() and os.readlink(link) == target.name
    assert target.read_bytes()[:2] == b"PK"  # the .npz went to the target

    art_target, art_link = tmp_path / "real.provmap", tmp_path / "lk.provmap"
    art_link.symlink_to(art_target)  # a dangling link: its target is a new path
    r = provmap("compile", "bundled:squeezenet", "-o", art_link, "--strategy",
                "single:onnxruntime")
    assert r.returncode == 0, r.stderr
    assert art_link.is_symlink() and art_target.is_file()

    report = tmp_path / "report.html"
    with open(report, "w") as out:  # `report -o /dev/stdout > report.html`
        r = subprocess.run([sys.executable, "-m", "provmap.cli.main", "report", str(artifact),
                            "-o", "/dev/stdout"], stdout=out, stderr=subprocess.PIPE, text=True,
                           timeout=600)
    assert r.returncode == 0, r.stderr
    assert os.path.islink("/dev/stdout") and report.read_text().lstrip().startswith("<")


def test_a_loop_of_links_is_refused_not_replaced(tmp_path, artifact):
    os.symlink("loop2", tmp_path / "loop1")
    os.symlink("loop1", tmp_path / "loop2")
    r = provmap("run", artifact, "--random", "-o", tmp_path / "loop1")
    refused(r, "loop1", "a loop of symbolic links")
    assert os.path.islink(tmp_path / "loop1") and os.path.islink(tmp_path / "loop2")


def test_a_fifo_among_a_directory_outputs_files_is_refused_before_any_is_written(tmp_path):
    d = tmp_path / "bis"
    d.mkdir()
    os.mkfifo(d / "reproducer_expected.npz")
    m = tmp_path / "m.onnx"
    onnx.save(conv_relu(), m)
    r = provmap("bisect", m, "--backend", "tvm", "-o", d)
    refused(r, "reproducer_expected.npz", "special file")
    assert sorted(os.listdir(d)) == ["reproducer_expected.npz"]


# -- in an existing, writable directory, checked before any work ------------------------------

def test_a_missing_directory_is_refused_not_created(tmp_path):
    out = tmp_path / "no" / "such" / "x.provmap"
    one_error(_compile(out), "directory", "does not exist; create it first")
    assert not (tmp_path / "no").exists()


def test_missing_parent_directories_are_refused_not_created(tmp_path, artifact):
    """`map -o`, `overlays -o` and PROVMAP_TRUST naming a directory that does not exist: one
    line, nothing created (overlays and the trust list used to create the directories)."""
    gone = tmp_path / "nonexist"
    one_error(provmap("map", "bundled:squeezenet", "-o", gone / "m"),
              f"directory {gone} does not exist")
    one_error(provmap("overlays", artifact, "--model", "bundled:squeezenet", "-o",
                      gone / "sub" / "ov"), f"directory {gone / 'sub'} does not exist")
    env = {**os.environ, "PROVMAP_TRUST": str(gone / "t.sqlite")}
    model = relu_add_model(tmp_path / "m.onnx")
    one_error(provmap("compile", model, "-o", tmp_path / "t.provmap", "--strategy",
                      "single:tvm", env=env), f"PROVMAP_TRUST={gone / 't.sqlite'}",
              f"directory {gone} does not exist")
    one_error(provmap("trust", artifact, env=env), "PROVMAP_TRUST=", "does not exist")
    assert not gone.exists() and not (tmp_path / "t.provmap").exists()


def test_unwritable_outputs_are_refused_before_any_work(log_dir, readonly_dir):
    for args in (("compile", "bundled:squeezenet", "-o", readonly_dir / "a.provmap"),
                 ("map", "bundled:squeezenet", "-o", readonly_dir / "m"),
                 ("run", log_dir / "log.provmap", "--random", "-o", readonly_dir / "o.npz"),
                 ("report", log_dir / "log.provmap", "-o", readonly_dir / "r.html"),
                 ("annotate", log_dir / "log.provmap", "-o", readonly_dir / "a.onnx"),
                 ("profile", log_dir / "log.provmap", "--trace", readonly_dir / "t.json"),
                 ("bisect", "bundled:squeezenet", "--backend", "openvino", "-o",
                  readonly_dir / "repro")):
        r = provmap(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert "Traceback" not in r.stderr and "not writable" in r.stderr, (args, r.stderr)
        assert "imported" not in r.stderr and "loaded" not in r.stderr  # refused first


def test_outputs_a_kernel_directory_refuses_are_caught_before_any_work(relu_embedded_dir):
    """/proc refuses new files even to root, for whom os.access says yes to everything."""
    a = relu_embedded_dir / "relu.provmap"
    for args in (("compile", "bundled:squeezenet", "-o", "/proc/x.provmap", "--strategy",
                  "single:onnxruntime"),
                 ("map", "bundled:squeezenet", "-o", "/proc/x.map"),
                 ("run", a, "--random", "-o", "/proc/x.npz"),
                 ("report", a, "-o", "/proc/x.html"),
                 ("annotate", a, "-o", "/proc/x.onnx"),
                 ("profile", a, "--inputs", relu_embedded_dir / "in.npz", "--trace",
                  "/proc/x.json")):
        r = provmap(*args)
        line = one_error(r, "/proc/x.", "not writable")
        assert ".tmp" not in line, line  # names the user's path, not a temp file
        assert "imported" not in r.stderr and "loaded" not in r.stderr, (args, r.stderr)
        assert "profile: " not in r.stderr, (args, r.stderr)  # no repeat ran first


def test_outputs_are_checked_before_any_work(tmp_path, artifact):
    """`-o ""` was refused after the whole build, naming a temp file."""
    for args in (("compile", "bundled:squeezenet", "-o", "", "--strategy", "single:onnxruntime"),
                 ("map", "bundled:squeezenet", "-o", ""),
                 ("run", artifact, "--save-inputs", ""),
                 ("bisect", "bundled:squeezenet", "--backend", "onnxruntime", "-o", "")):
        r = provmap(*args, timeout=120)
        one_line_refusal(r, "an empty name")
        assert "imported" not in r.stderr and "building" not in r.stderr


# -- an existing file replaced only on success, with a word --------------------------------------

def test_the_replaced_notice_follows_the_work_not_an_error(tmp_path, artifact):
    out = tmp_path / "o.npz"
    out.write_bytes(b"old")
    r = provmap("run", artifact, "-o", out, "--inputs", tmp_path / "missing.npz")
    one_line_refusal(r, "missing.npz")
    assert "exists" not in r.stderr and out.read_bytes() == b"old"


def test_an_existing_file_is_replaced_with_a_word_only_on_success(tmp_path):
    out = tmp_path / "a.provmap"
    r = _compile(out)
    assert r.returncode == 0 and "exists" not in r.stderr, r.stderr
    before = out.read_bytes()
    r = provmap("compile", "bundled:squeezenet", "-o", out, "--strategy", "single:nosuch")
    assert r.returncode == 2 and out.read_bytes() == before  # a failed command keeps it
    r = _compile(out, "--backend-option", "onnxruntime.threads=1")
    assert r.returncode == 0, r.stderr
    assert f"{out} existed: replaced" in r.stderr
    assert out.read_bytes() != before


def test_overlays_over_an_existing_directory_says_so(tmp_path, artifact):
    out = tmp_path / "ov"
    r = provmap("overlays", artifact, "--model", "bundled:squeezenet", "-o", out)
    assert r.returncode == 0 and "existed: replaced" not in r.stderr, r.stderr
    r = provmap("overlays", artifact, "--model", "bundled:squeezenet", "-o", out)
    assert r.returncode == 0, r.stderr        # each file it rewrote is named
    for f in ("model.onnx", "partition.json"):
        assert f"provmap: {out / f} existed: replaced" in r.stderr, r.stderr


def test_inspect_sqlite_with_relax_writes_the_file(tmp_path, artifact):
    """`inspect --sqlite X --relax` printed the Relax module, said "X existed: replaced" and
    wrote nothing."""
    out = tmp_path / "x.sqlite"
    out.write_bytes(b"old")
    r = provmap("inspect", artifact, "--sqlite", out, "--relax")
    assert r.returncode == 0, r.stderr
    assert "R.function" in r.stdout or "relax" in r.stdout
    assert out.read_bytes()[:16] == b"SQLite format 3\0"


# -- nothing written besides ------------------------------------------------------------------

def test_backends_write_nothing_under_home(tmp_path):
    """OpenVINO's import wrote ~/intel/openvino_ga_cid and sent an event; ONNX Runtime wrote a
    device id under ~/.cache/Microsoft.  provmap turns both off (their own switches)."""
    home = tmp_path / "home"
    home.mkdir()
    onnx.save(relu_model(), tmp_path / "m.onnx")
    env = {k: v for k, v in os.environ.items()
           if k not in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "ORT_DISABLE_TELEMETRY")}
    env.update(HOME=str(home), PROVMAP_TRUST=str(tmp_path / "list"),
               PROVMAP_CACHE=str(tmp_path / "c.sqlite"))
    art = tmp_path / "m.provmap"
    r = provmap("compile", tmp_path / "m.onnx", "-o", art, "--strategy",
                "greedy:openvino,onnxruntime", "--backend-option", "openvino.exclude_ops=Add",
                env=env)
    assert r.returncode == 0, r.stderr
    assert provmap("run", art, "--random", env=env).returncode == 0
    assert sorted(p.name for p in home.rglob("*")) == []
