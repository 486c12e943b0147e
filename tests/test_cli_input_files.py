"""Files a command reads, through the real CLI: a FIFO, a device or a directory is refused
unread; a malformed model, .npz or artifact is one line naming it, for every subcommand and
every file it reads; the wrong kind of file (an ONNX model for an artifact, an artifact for a
model, Polygraphy's JSON inputs) is said as such, with what to give; an inputs file is checked
before the artifact loads; an input array under another name is suggested."""

from __future__ import annotations

import os
import zipfile

import numpy as np
import pytest
from cli_models import qdq_cnn, relu_file
from cli_runner import one_error, one_line_refusal, provmap, refused, refused_in_process

pytestmark = [pytest.mark.usefixtures("own_config"),
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


# -- special files ---------------------------------------------------------------------------

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
        one_line_refusal(r, f"{path}: not a regular file ({kind})")
    assert not (tmp_path / "x.provmap").exists()


def test_special_files_are_refused_up_front(tmp_path):
    fifo = tmp_path / "pipe.provmap"
    os.mkfifo(fifo)
    one_error(provmap("inspect", fifo, timeout=120), "pipe.provmap", "FIFO")
    one_error(provmap("inspect", "/dev/zero", timeout=120), "/dev/zero", "device")
    one_error(provmap("lookup", tmp_path, "--kernel", "k", timeout=120), "directory")


# -- malformed files, one line naming them ----------------------------------------------------

@pytest.mark.parametrize("make", ["missing", "truncated", "random", "empty"])
def test_compile_of_a_bad_model_file_is_one_line_naming_it(tmp_path, make):
    from small_models import conv_relu

    path = tmp_path / f"{make}.onnx"
    data = conv_relu().SerializeToString()
    if make == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif make == "random":
        path.write_bytes(np.random.default_rng(0).bytes(200))
    elif make == "empty":
        path.write_bytes(b"")
    r = provmap("compile", path, "-o", tmp_path / "a.provmap", "--strategy", "single:onnxruntime")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("provmap: error:")]
    assert len(lines) == 1 and f"{make}.onnx" in lines[0], r.stderr
    assert not (tmp_path / "a.provmap").exists()


def test_garbage_npz_is_named_as_not_an_npz(log_dir, tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"garbage")
    r = provmap("run", log_dir / "log.provmap", "--inputs", bad)
    assert r.returncode == 2 and "bad.npz: not a valid .npz file" in r.stderr
    assert "Traceback" not in r.stderr


def test_inputs_are_checked_before_the_artifact_loads(log_relu_dir, tmp_path):
    # The artifact does not exist: a bad inputs file is still what is said, first.
    for cmd in ("run", "compare", "profile"):
        r = provmap(cmd, tmp_path / "nothing.provmap", "--inputs", log_relu_dir / "inputs.txt")
        assert r.returncode == 2 and "inputs.txt: not a valid .npz file" in r.stderr, r.stderr
        assert "a text file" in r.stderr and "Python objects" not in r.stderr


def test_run_checks_the_inputs_file_before_loading_the_partitions(tmp_path, artifact):
    """`run --inputs` named a missing input only after 4-10 s of loading OpenVINO/TVM code."""
    bad = tmp_path / "bad.npz"
    np.savez(bad, nope=np.zeros(3, np.float32))
    r = provmap("run", artifact, "--inputs", bad)
    refused(r, "missing input")
    assert "loaded" not in r.stderr


@pytest.fixture(scope="module")
def junk(tmp_path_factory):
    d = tmp_path_factory.mktemp("junk")
    (d / "empty.bin").write_bytes(b"")
    (d / "text.txt").write_text("hello\n")
    (d / "deep.json").write_text("[" * 1_000_000)
    (d / "garbage.onnx").write_bytes(b"\x08\x07\xff\xfe garbage that is no protobuf" * 10)
    with zipfile.ZipFile(d / "list.provmap", "w") as z:
        z.writestr("manifest.json", "[]")
    (d / "dir").mkdir()
    return {k: d / v for k, v in (("empty", "empty.bin"), ("text", "text.txt"),
                                  ("deep", "deep.json"), ("garbage", "garbage.onnx"),
                                  ("zip", "list.provmap"), ("dir", "dir"),
                                  ("missing", "missing.provmap"))}


_COMMANDS = [
    ("map", "{f}", "-o", "{o}/m"),
    ("compile", "{f}", "-o", "{o}/c.provmap", "--strategy", "single:onnxruntime"),
    ("run", "{f}", "--random"),
    ("trust", "{f}"),
    ("inspect", "{f}"),
    ("inspect", "{f}", "--json"),
    ("lookup", "{f}", "--kernel", "k"),
    ("compare", "{f}"),
    ("bisect", "{f}", "--backend", "openvino"),
    ("profile", "{f}"),
    ("report", "{f}", "-o", "{o}/r.html"),
    ("annotate", "{f}", "-o", "{o}/a.onnx"),
    ("explain", "{f}"),
    ("overlays", "{f}", "-o", "{o}/ov"),
    ("bench", "{f}", "-o", "{o}/b", "--strategies", "single:onnxruntime"),
    # the second file a command reads
    ("report", "{a}", "-o", "{o}/r.html", "--profile", "{f}"),
    ("overlays", "{a}", "-o", "{o}/ov", "--profile", "{f}"),
    ("run", "{a}", "--inputs", "{f}"),
    ("inspect", "{a}", "--model", "{f}"),
    ("compare", "{a}", "--model", "{f}"),
]


def test_every_command_refuses_malformed_files_in_one_line(capsys, relu_art, junk, tmp_path):
    """One walk over every subcommand and every malformed file (all reported together)."""
    wrong = []
    for cmd in _COMMANDS:
        for kind, f in junk.items():
            argv = [x.format(f=f, o=tmp_path, a=relu_art) for x in cmd]
            try:
                refused_in_process(capsys, argv, str(f))
            except AssertionError as e:  # noqa: PERF203 - collected, reported below
                wrong.append(f"{kind}: {' '.join(cmd)}: {str(e).splitlines()[0][:300]}")
    assert not wrong, "\n".join(wrong)


# -- the wrong kind of file, and arrays under other names -------------------------------------

def test_an_onnx_model_given_for_an_artifact_points_at_compile(log_relu_dir, tmp_path):
    (tmp_path / "model.bin").write_bytes((log_relu_dir / "m.onnx").read_bytes())
    for args in (("run", log_relu_dir / "m.onnx"), ("inspect", log_relu_dir / "m.onnx"),
                 ("compare", tmp_path / "model.bin")):
        r = provmap(*args)
        assert r.returncode == 2 and "Traceback" not in r.stderr
        assert "an ONNX model, not a provmap artifact" in r.stderr, r.stderr
        assert "provmap compile" in r.stderr and "zip" not in r.stderr


def test_an_artifact_given_where_the_onnx_model_goes_is_named_as_such(tmp_path):
    """`bisect x.provmap` said "not a readable ONNX model (DecodeError: ... Wire format was
    corrupt)" (tenth afternoon)."""
    from cli_runner import provmap, refused

    model = qdq_cnn(tmp_path)
    art = tmp_path / "a.provmap"
    assert provmap("compile", model, "-o", art, "--strategy", "single:onnxruntime",
                   "--input-shape", "img=1x3x32x32").returncode == 0
    for argv in (("bisect", art, "--backend", "openvino"),
                 ("compile", art, "-o", tmp_path / "b.provmap")):
        refused(provmap(*argv), f"{art}: a provmap artifact, not an ONNX model; give the "
                    "ONNX model it was compiled from")


def test_polygraphy_inputs_json_fed_back_says_what_to_use(int64_artifact, tmp_path):
    _d, art, _ = int64_artifact
    (tmp_path / "in.json").write_text('[{"x": {"array": "..."}}]')
    refused(provmap("run", art, "--inputs", tmp_path / "in.json"),
            "a JSON file", "--save-inputs FILE.npz")


def test_an_input_array_under_another_name_is_suggested(tmp_path):
    """An array named `X` for input `x` got only "missing input 'x'; the model takes x"."""
    import numpy as np

    art = tmp_path / "a.provmap"
    assert provmap("compile", relu_file(tmp_path), "-o", art, "--strategy",
                   "single:onnxruntime").returncode == 0
    np.savez(tmp_path / "in.npz", X=np.ones((1, 8), np.float32))
    r = provmap("run", art, "--inputs", tmp_path / "in.npz", "-o", tmp_path / "o.npz")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "did you mean 'X' for 'x'?" in r.stderr, r.stderr
