"""Bad numbers, bad paths, bad options and Ctrl-C through the real CLI in a subprocess: each is
one `provmap: error:` line (or `provmap: interrupted`), a non-zero exit, no traceback and no
output file, and each is caught before the work it would otherwise end."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from cli_runner import one_error, provmap

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def art(tmp_path_factory):
    """x[4] -> Relu -> y, compiled for ONNX Runtime (fast to build and to run)."""
    d = tmp_path_factory.mktemp("rob")
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(m, d / "relu.onnx")
    r = provmap("compile", d / "relu.onnx", "-o", d / "relu.provmap", "--strategy",
                "single:onnxruntime", "--embed-model")
    assert r.returncode == 0, r.stderr
    np.savez(d / "in.npz", x=np.array([-1.0, 0.0, 1.0, 2.0], np.float32))
    return d


@pytest.mark.parametrize("flag,value", [("--max-depth", 0), ("--max-size", -1)])
def test_collage_search_limits_must_be_positive(tmp_path, flag, value):
    r = provmap("compile", "bundled:squeezenet", "-o", tmp_path / "a.provmap", "--strategy",
                "collage", flag, value)
    line = one_error(r, flag, str(value))
    assert "imported" not in r.stderr, line  # refused before the import
    assert not (tmp_path / "a.provmap").exists()


@pytest.mark.parametrize("shape,dim", [("1x-5", 1), ("-1x3", 0)])
def test_a_negative_input_dimension_is_refused(tmp_path, shape, dim):
    """-1 is a dynamic dimension, not a size; zero is a size (tests/test_zero_size.py)."""
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "C"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "C"])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              tmp_path / "dyn.onnx")
    r = provmap("compile", tmp_path / "dyn.onnx", "-o", tmp_path / "a.provmap", "--strategy",
                "single:openvino", "--input-shape", f"x={shape}")
    one_error(r, "--input-shape", "'x'", f"dimension {dim}")
    assert not (tmp_path / "a.provmap").exists()


def test_outputs_a_kernel_directory_refuses_are_caught_before_any_work(art):
    """/proc refuses new files even to root, for whom os.access says yes to everything."""
    a = art / "relu.provmap"
    for args in (("compile", "bundled:squeezenet", "-o", "/proc/x.provmap", "--strategy",
                  "single:onnxruntime"),
                 ("map", "bundled:squeezenet", "-o", "/proc/x.map"),
                 ("run", a, "--random", "-o", "/proc/x.npz"),
                 ("report", a, "-o", "/proc/x.html"),
                 ("annotate", a, "-o", "/proc/x.onnx"),
                 ("profile", a, "--inputs", art / "in.npz", "--trace", "/proc/x.json")):
        r = provmap(*args)
        line = one_error(r, "/proc/x.", "not writable")
        assert ".tmp" not in line, line  # names the user's path, not a temp file
        assert "imported" not in r.stderr and "loaded" not in r.stderr, (args, r.stderr)
        assert "profile: " not in r.stderr, (args, r.stderr)  # no repeat ran first


@pytest.mark.parametrize("option,strategy,words", [
    ("openvno.exclude_ops=Softmax", "greedy:openvino,onnxruntime",
     ("'openvno'", "did you mean 'openvino'")),
    ("openvino.exclude_ops=Softmx", "greedy:openvino,onnxruntime",
     ("openvino.exclude_ops", "'Softmx'", "did you mean 'Softmax'")),
    ("openvino.exclude_op=Softmax", "greedy:openvino,onnxruntime",
     ("'exclude_op'", "did you mean 'exclude_ops'")),
    ("openvino.precision=bf16", "single:onnxruntime", ("does not use backend 'openvino'",)),
    ("tvm.tune=metaschedule", "collage", ("does not use backend 'tvm'",)),
])
def test_backend_option_typos_are_refused_before_the_build(tmp_path, option, strategy, words):
    """Each of these used to build a different partition than the one asked for, exit 0."""
    r = provmap("compile", "bundled:squeezenet", "-o", tmp_path / "a.provmap", "--strategy",
                strategy, "--backend-option", option)
    one_error(r, "--backend-option", *words)
    assert "building" not in r.stderr and not (tmp_path / "a.provmap").exists()


@pytest.mark.parametrize("options,strategy,words", [
    ({"openvno": {"exclude_ops": "Softmax"}}, "greedy:openvino,onnxruntime", ("'openvno'",)),
    ({"openvino": {"exclude_ops": ["Rleu"]}}, "greedy:openvino,onnxruntime",
     ("'Rleu'", "did you mean 'Relu'")),
    ({"openvino": {"threads": 1}}, "single:onnxruntime", ("does not use backend 'openvino'",)),
])
def test_python_api_refuses_the_backend_options_the_cli_refuses(tmp_path, options, strategy,
                                                                 words):
    """provmap.compile() used to take them and build a plan without them."""
    from provmap.partition.compile import compile_model
    from provmap.provenance.util.errors import ProvmapError
    from small_models import conv_relu

    with pytest.raises(ProvmapError) as e:
        compile_model(conv_relu(), strategy, out=tmp_path / "a.provmap", backend_options=options)
    assert all(w in str(e.value) for w in words), str(e.value)
    assert not (tmp_path / "a.provmap").exists()


def test_backend_options_that_apply_are_still_taken(tmp_path):
    """A contrib op the model has is a valid exclude_ops entry though onnx.defs lacks it."""
    from provmap.partition.backend_options import check_op_lists

    check_op_lists({"onnxruntime": {"exclude_ops": ["FusedConv"]}}, {"FusedConv"})
    r = provmap("compile", "bundled:squeezenet", "-o", tmp_path / "a.provmap", "--strategy",
                "collage:onnxruntime,openvino", "--backend-option",
                "openvino.exclude_ops=Softmax,Concat", "--no-e2e-check", "--max-size", "1",
                "--cache", tmp_path / "c.sqlite")
    assert r.returncode == 0, r.stderr


def test_python_api_refuses_a_negative_input_size_too():
    from provmap.partition.compile import load_view
    from provmap.provenance.util.errors import ProvmapError
    from small_models import conv_relu

    name = conv_relu().graph.input[0].name
    with pytest.raises(ProvmapError, match=f"input '{name}' dimension 0 is -1; sizes must be >= 0"):
        load_view(conv_relu(), input_shapes={name: (-1, 3, 8, 8)})


@pytest.fixture(scope="module")
def greedy(tmp_path_factory):
    """SqueezeNet with Concat kept off OpenVINO: 17 partitions, so the executor's time between
    the partition calls is a visible share of the run."""
    d = tmp_path_factory.mktemp("greedy")
    r = provmap("compile", "bundled:squeezenet", "-o", d / "g.provmap", "--strategy",
                "greedy:openvino,onnxruntime", "--backend-option", "openvino.exclude_ops=Concat")
    assert r.returncode == 0, r.stderr
    r = provmap("profile", d / "g.provmap", "--repeats", "3", "--json", "--trace", d / "t.json")
    assert r.returncode == 0, r.stderr
    (d / "g.json").write_text(r.stdout)
    return d


def test_profile_rows_add_up_to_end_to_end(greedy):
    import json

    p = json.loads((greedy / "g.json").read_text())
    assert len(p["partitions"]) == 17
    parts = sum(r["ms"] for r in p["partitions"])
    assert parts + p["between_partitions_ms"] == pytest.approx(p["e2e_ms"], rel=1e-9)
    events = json.loads((greedy / "t.json").read_text())["traceEvents"]
    assert any(e["name"] == "between partitions" for e in events)
    text = provmap("profile", greedy / "g.provmap", "--repeats", "2").stdout
    assert "between partitions" in text, text


def test_report_takes_one_source_of_costs_and_only_its_own_profile(greedy, art, tmp_path):
    r = provmap("report", greedy / "g.provmap", "--profile", greedy / "g.json", "--measure",
                "-o", tmp_path / "r.html")
    one_error(r, "--profile", "--measure", "not both")
    r = provmap("report", art / "relu.provmap", "--profile", greedy / "g.json", "-o",
                tmp_path / "r.html")
    one_error(r, "g.json", "another artifact", "relu.provmap")
    assert not (tmp_path / "r.html").exists()
    r = provmap("report", greedy / "g.provmap", "--profile", greedy / "g.json", "-o",
                tmp_path / "r.html")
    assert r.returncode == 0 and (tmp_path / "r.html").exists(), r.stderr


@pytest.mark.parametrize("delay", [0.5, 2.0])
def test_ctrl_c_during_a_tvm_build_exits_130_and_writes_nothing(tmp_path, delay):
    """TVM turned the KeyboardInterrupt raised in its pass callbacks into a RuntimeError: the
    build failed as 'tvm: build failed: RuntimeError', or went on (exit 0, artifact written).
    ResNet-50's TVM build takes ~6 s here, so both delays land inside it."""
    import signal
    import time

    out = tmp_path / "k.provmap"
    p = subprocess.Popen([sys.executable, "-m", "provmap.cli.main", "compile",
                          "bundled:resnet50", "-o", str(out), "--strategy", "single:tvm"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        seen = []
        for line in p.stderr:  # bounded: the command ends whether or not it says so
            seen.append(line)
            if "building p0 on tvm" in line:
                break
        assert any("building" in ln for ln in seen), "".join(seen)
        time.sleep(delay)
        p.send_signal(signal.SIGINT)
        _, rest = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    err = "".join(seen) + rest
    assert p.returncode == 130, err
    assert err.rstrip().endswith("provmap: interrupted") and "Traceback" not in err, err
    assert "error" not in err, err
    assert list(tmp_path.iterdir()) == [], list(tmp_path.iterdir())  # no artifact, no temp
