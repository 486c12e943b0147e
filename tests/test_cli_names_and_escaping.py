"""Names, through the real CLI.  A name the user mistypes (a bundled model, a backend, a strategy
in capitals, a kernel or node for lookup) gets a did-you-mean when one is close, and the list
of bundled models an error gives is the documented one.  A name from a model or an artifact
(someone else's text: a node, a tensor, an output) reaches the terminal escaped in every
command's text, so it can neither drive the terminal nor forge a line; and no library prints
its own raw log line with it (ONNX Runtime's, the reference session's, TVM's Python logger)."""

from __future__ import annotations

import json

import onnx
import pytest
from attack_kit import members, relu_model, repack
from cli_models import relu_file
from cli_runner import one_error, one_line_refusal, provmap, refused
from onnx import TensorProto, helper

pytestmark = [pytest.mark.usefixtures("own_config"),
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]


# -- a mistyped name gets a did-you-mean -----------------------------------------------------

def test_the_bundled_models_the_error_lists_are_the_documented_ones():
    """The error listed models docs/guide.md did not mention."""
    import re
    from pathlib import Path

    r = provmap("compile", "bundled:nosuch", "-o", "x.provmap")
    listed = re.search(r"expected one of ([^(]*)\(", one_line_refusal(r, "nosuch")).group(1)
    listed = {n.strip() for n in listed.split(",")}
    guide = (Path(__file__).parents[1] / "docs" / "guide.md").read_text()
    section = guide.split("## Bundled models", 1)[1].split("\n## ", 1)[0]
    paragraph = section.strip().split("\n\n", 1)[0]  # the one naming the models
    documented = set(re.findall(r"`([a-z_0-9]+)`", paragraph))
    assert listed and listed == documented, (listed, documented)


def test_a_typo_in_a_name_gets_did_you_mean(tmp_path, artifact):
    """Bundled model, backend (bisect --backend, strategies) and lookup names: a close name is
    suggested in the one error line (issue 36's third afternoon found none for these)."""
    one_error(provmap("compile", "bundled:squeezenat", "-o", tmp_path / "x.provmap"),
              "unknown bundled model 'squeezenat'", "did you mean 'squeezenet'?",
              "expected one of")
    one_error(provmap("bisect", "bundled:squeezenet", "--backend", "openvno", "-o",
                      tmp_path / "repro"), "unknown backend 'openvno'",
              "did you mean 'openvino'?")
    from provmap.runtime_module.module import load

    lk = load(artifact, runnable=False).lookup
    kernel = lk.kernel_names()[0]
    one_error(provmap("lookup", artifact, "--kernel", kernel[:-1]), "no kernel",
              f"did you mean {kernel!r}")
    node = lk.node_ids()[0]
    one_error(provmap("lookup", artifact, "--onnx-node", node[:-1] + "z"),
              "no ONNX node named or with ID", f"{node!r}")
    far = one_error(provmap("lookup", artifact, "--onnx-node", "nothing-like-it"), "no ONNX node")
    assert "did you mean" not in far


def test_a_strategy_in_capitals_gets_its_lower_case_spelling_suggested(tmp_path):
    refused(provmap("compile", relu_file(tmp_path), "-o", tmp_path / "a.provmap", "--strategy",
                    "SINGLE:OPENVINO"), "did you mean 'single:openvino'?")


# -- a name from a model or an artifact reaches the terminal escaped ---------------------------

def test_names_from_an_artifact_reach_the_terminal_escaped(tmp_path):
    """A node named with terminal escape sequences recoloured (or retitled) the terminal of
    whoever inspected the artifact; JSON was always escaped."""
    evil = "\x1b]0;owned\x07\x1b[31mred"
    m = relu_model()
    m.graph.node[0].name = evil
    onnx.save(m, tmp_path / "m.onnx")
    art = tmp_path / "e.provmap"
    assert provmap("compile", tmp_path / "m.onnx", "-o", art, "--strategy",
                   "single:onnxruntime").returncode == 0
    outs = [provmap("inspect", art), provmap("lookup", art, "--onnx-node", evil),
            provmap("profile", art, "--repeats", "1")]  # its top ONNX nodes
    kernel = json.loads(provmap("inspect", art, "--json").stdout)["partitions"][0]["kernels"][0]
    outs.append(provmap("lookup", art, "--kernel", kernel))
    for r in outs:
        assert r.returncode == 0, r.stderr
        assert "\x1b" not in r.stdout and "\x07" not in r.stdout, r.stdout
        assert "\\x1b[31mred" in r.stdout, r.stdout
    # explain's text too (a strategy whose reasons name the node: greedy with a refusal)
    art2 = tmp_path / "e2.provmap"
    assert provmap("compile", tmp_path / "m.onnx", "-o", art2, "--strategy",
                   "greedy:openvino,onnxruntime", "--backend-option",
                   "openvino.exclude_ops=Relu").returncode == 0
    r = provmap("explain", art2)
    assert r.returncode == 0 and "\x1b" not in r.stdout and "\x07" not in r.stdout, r.stdout
    assert "\\x1b[31mred" in r.stdout, r.stdout  # the node, named in the greedy reason
    r = provmap("lookup", art, "--onnx-node", evil + "x")  # the error line too
    assert r.returncode == 2 and "\x1b" not in r.stderr and "\\x1b" in r.stderr, r.stderr


NASTY = "/Mul\nok   p0 openvino    k2 (from /Cast): max abs 0\x1b[31mRED"


@pytest.fixture(scope="module")
def nasty_names(tmp_path_factory):
    d = tmp_path_factory.mktemp("names")
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["a"], name="relu"),
         helper.make_node("Mul", ["a", "a"], ["y"], name=NASTY)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = d / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              model)
    art = d / "a.provmap"
    r = provmap("compile", model, "-o", art, "--strategy", "single:openvino", "--embed-model")
    assert r.returncode == 0, r.stderr
    return d, model, art


@pytest.mark.parametrize("argv", [
    ["compare", "{a}", "--seed", "1"],
    ["inspect", "{a}"],
    ["bisect", "{m}", "--backend", "openvino", "-o", "{d}/bis", "--seed", "1"],
])
def test_names_never_drive_the_terminal_nor_forge_a_line(nasty_names, argv):
    """compare and bisect printed an embedded model's node name raw (ESC recoloured the
    terminal, its newline forged an "ok" line under a FAIL); inspect and lookup escaped the
    ESC but kept the newline as a line break."""
    d, model, art = nasty_names
    r = provmap(*[a.format(a=art, m=model, d=d) for a in argv])
    assert r.returncode in (0, 1), r.stderr
    for stream in (r.stdout, r.stderr):
        assert "\x1b" not in stream
        assert not any(ln.startswith("ok   p0 openvino    k2") for ln in stream.splitlines())


def test_explain_prints_a_newline_in_a_node_name_escaped(tmp_path):
    """explain printed a node named "relu\\nFORGED LINE: ..." as two lines (the twelfth
    afternoon; every other command escapes it)."""
    mk = helper.make_node
    g = helper.make_graph([mk("Sigmoid", ["x"], ["a"], name="sig"),
                           mk("Relu", ["a"], ["y"], name="relu\nFORGED LINE: p1 ok\rX")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
    model, art = tmp_path / "m.onnx", tmp_path / "a.provmap"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              model)
    assert provmap("compile", model, "-o", art, "--strategy", "greedy:openvino,onnxruntime",
                   "--backend-option", "openvino.exclude_ops=Relu").returncode == 0
    r = provmap("explain", art)
    assert r.returncode == 0, r.stderr
    assert not any(ln.startswith("FORGED") or ln.startswith("X") for ln in
                   r.stdout.splitlines()), r.stdout
    assert "relu\\x0aFORGED LINE: p1 ok\\x0dX" in r.stdout, r.stdout


def test_run_escapes_an_output_name_as_inspect_does(tmp_path):
    """L1: an output named "out\\nput" split run's summary line in two (a name could forge a
    "latency over ..." line); inspect, compare and lookup showed out\\x0aput."""
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["out\nput"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("out\nput", TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              tmp_path / "m.onnx")
    art = tmp_path / "a.provmap"
    assert provmap("compile", tmp_path / "m.onnx", "-o", art, "--strategy",
                   "single:onnxruntime").returncode == 0
    r = provmap("run", art, "--random")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("out\\x0aput: float32[1, 4]"), r.stdout
    assert len(lines) == 2 and lines[1].startswith("latency over"), r.stdout
    assert "out\\x0aput" in provmap("inspect", art).stdout


def test_onnx_runtime_prints_no_raw_node_names_when_a_run_fails(relu_art, tmp_path):
    """provmap escapes what it prints, but ORT logged the failing node's name itself, colored
    and raw, before provmap's error line: a name holding escape sequences drove the terminal.
    Here a ConstantOfShape of 2^40 floats (a 4 TB allocation ORT refuses) named so."""
    from cli_runner import one_error, provmap

    manifest, files = members(relu_art)
    shape = helper.make_tensor("s", TensorProto.INT64, [2], [1 << 20, 1 << 20])
    g = helper.make_graph(
        [helper.make_node("ConstantOfShape", ["s"], ["big"], name="\x1b]0;pwned\x07\x1b[2J"),
         helper.make_node("ReduceSum", ["big"], ["r"], name="rs", keepdims=0),
         helper.make_node("Add", ["x", "r"], ["y"], name="add")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], [shape])
    files["partitions/p0/model.onnx"] = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()
    manifest["backends"]["onnxruntime"]["options"] = {"optimization": "disable"}
    bad = repack(tmp_path / "cos.provmap", manifest, files)
    r = provmap("run", bad, "--random")
    one_error(r, "run failed", "\\x1b]0;pwned")
    assert "\x1b" not in r.stderr + r.stdout


def test_the_reference_session_prints_no_raw_log_line(tmp_path):
    """compare's reference ONNX Runtime session logged its own ERROR line at severity 3, with
    the failing node's name raw (terminal escapes from a stranger's embedded model) before
    provmap's escaped line.  Only the raised error may speak."""
    import subprocess
    import sys

    code = ("import numpy as np, onnx\n"
            "from onnx import TensorProto, helper\n"
            "from provmap.workbench.compare import reference_run\n"
            "g = helper.make_graph([helper.make_node('Gather', ['t', 'i'], ['y'],\n"
            "                       name='\\x1b[31mEVIL\\x1b]0;pwned\\x07gather')], 'g',\n"
            "    [helper.make_tensor_value_info('i', TensorProto.INT64, [1])],\n"
            "    [helper.make_tensor_value_info('y', TensorProto.FLOAT, [1, 2])],\n"
            "    [helper.make_tensor('t', TensorProto.FLOAT, [3, 2], [0.0] * 6)])\n"
            "m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)], ir_version=8)\n"
            "try:\n"
            "    reference_run(m, {'i': np.array([50], np.int64)}, [])\n"
            "except Exception as e:\n"
            "    print('raised', type(e).__name__)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert "raised" in r.stdout, (r.stdout, r.stderr)
    assert "\x1b" not in r.stderr and "EVIL" not in r.stderr, r.stderr


def test_tvms_python_log_lines_stay_off_the_terminal():
    from provmap.cli.native_log import _NATIVE

    assert _NATIVE.match(b"2026-11-27 08:18:43.427 WARNING Cannot connect to tracker "
                         b"('127.0.0.1', 1), retry in 5 secs...")
    assert not _NATIVE.match(b"provmap: error: 2026-11-27 is no tracker")
