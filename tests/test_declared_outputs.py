"""Declared graph-output shapes are hints, not run-time contracts (issue 32).

A published CRNN OCR model (ddddocr's common.onnx) declares its output [1, seqlen] and computes
[T, 1, classes]; shape inference cannot see through its LSTM, so nothing contradicts the
declaration before the model runs.  ONNX Runtime returns what it computes and warns; provmap
must too, under every strategy whose backends run the model, with ORT's numbers, while a tensor
another partition reads keeps its check.  `bench/user_models.crnn_declared_output` is the same
head built with onnx.helper (ORT's symbolic shape inference computes its output), and its
`quantize_dynamic` copy is common_old.onnx's case (nothing computes it before it runs); the real
files are used when the ddddocr package is installed.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from cli_runner import provmap as cli

import provmap
from provmap.bench.user_corpus import tolerance
from provmap.bench.user_models import crnn_declared_output, quantize
from provmap.provenance.util.errors import ProvmapError, ProvmapWarning
from provmap.runtime_module.module import ArtifactModule

WIDTH = 9
SHAPES = {"x": (1, 1, 1, WIDTH)}


@pytest.fixture(scope="module")
def crnn(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("crnn") / "crnn.onnx"
    onnx.save(crnn_declared_output(), path)
    return path


@pytest.fixture(scope="module")
def qcrnn(tmp_path_factory) -> Path:
    """The CRNN through `quantize_dynamic`, as ddddocr's common_old.onnx was made: its LSTM
    becomes com.microsoft DynamicQuantizeLSTM, which neither ONNX's nor ONNX Runtime's shape
    inference sees through, so the declared [1, seqlen] is all provmap has before it runs."""
    root = logging.getLogger()
    level, root.level = root.level, logging.ERROR
    try:
        m = quantize(crnn_declared_output(), "dynamic", [])
    finally:
        root.setLevel(level)
    path = tmp_path_factory.mktemp("qcrnn") / "qcrnn.onnx"
    onnx.save(m, path)
    return path


def _feeds(seed=0, shape=SHAPES["x"], name="x"):
    return {name: np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}


def _ort(path, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 3  # ORT's own warning about the declared shape
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def test_what_shape_inference_can_and_cannot_fix(crnn, qcrnn, tmp_path, monkeypatch):
    """ORT runs both to [W, 1, classes].  ONNX's inference stops at the LSTM's Reshapes; ORT's
    symbolic shape inference computes the float model's output (a compile warning, as for any
    wrong declaration) but not the quantized one's: there the declaration is only a hint."""
    from provmap.partition.compile import load_view

    for path in (crnn, qcrnn):
        assert _ort(path, _feeds())[0].shape == (WIDTH, 1, 7)
    view = load_view(str(crnn), input_shapes=SHAPES)
    assert view.spec("y").shape == (WIDTH, 1, 7) and view.imported.output_hints == []
    [said] = view.imported.warnings
    assert "declared float32[1, seqlen] but the model computes float32[9, 1, 7]" in said
    monkeypatch.chdir(tmp_path)  # ORT's symbolic inference saves files where it gives up
    view = load_view(str(qcrnn), input_shapes=SHAPES)
    assert list(tmp_path.iterdir()) == []
    assert view.spec("y").shape == (1, None) and view.imported.output_hints == ["y"]
    assert "com.microsoft" in {n.domain for n in view.nodes}
    assert view.imported.warnings == []  # nothing to say before it runs


STRATEGIES = ["single:onnxruntime", "single:openvino", "greedy:openvino,onnxruntime",
              "greedy:tvm,onnxruntime"]  # TVM around the LSTM: a TVM partition returns a Shape


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("which", ["crnn", "qcrnn"])
def test_every_strategy_runs_it_with_orts_numbers(request, tmp_path, which, strategy):
    path = request.getfixturevalue(which)
    out = tmp_path / "a.provmap"
    # qcrnn under greedy with TVM: greedy once cut at a tensor nothing typed (after
    # DynamicQuantizeLSTM) and refused; it now keeps such a tensor inside one unit (issue 32).
    art = provmap.compile(str(path), strategy, out=out, input_shapes=SHAPES)
    [o] = art.manifest["model"]["outputs"]
    mod = provmap.load(out)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runs = [mod.run(_feeds(s))["y"] for s in (0, 1)]
    heard = [str(w.message) for w in caught if issubclass(w.category, ProvmapWarning)]
    assert heard == mod.warnings
    if which == "crnn":  # computed at compile: said then, and the run holds to it
        assert o["shape"] == [WIDTH, 1, 7] and "shape_from" not in o and heard == []
        assert len(art.manifest["warnings"]) == 1
        rtol, atol = 1e-4, 1e-5
    else:  # a hint: the run returns what the backend computed, said once, not once per run
        assert o["shape"] == [1, None] and o["shape_from"] == "declaration"
        assert len(heard) == 1 and "graph output 'y' is declared float32[1, ?] but partition" \
            in heard[0] and "returned float32[9, 1, 7]" in heard[0]
        rtol, atol = tolerance("int8", {"y": _ort(path, _feeds(0))[0]})
    for s, got in zip((0, 1), runs):
        (want,) = _ort(path, _feeds(s))
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def test_cli_run_warns_once_per_output(qcrnn, tmp_path):
    art = tmp_path / "a.provmap"
    r = cli("compile", qcrnn, "-o", art, "--input-shape", f"x=1x1x1x{WIDTH}",
            "--strategy", "single:onnxruntime")
    assert r.returncode == 0, r.stderr
    np.savez(tmp_path / "in.npz", **_feeds())
    r = cli("run", art, "--inputs", tmp_path / "in.npz", "-o", tmp_path / "out.npz",
            "--repeats", "3", "--json")
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("provmap: warning:")]
    assert len(lines) == 1 and "returned float32[9, 1, 7]" in lines[0], r.stderr
    assert json.loads(r.stdout)["outputs"]["y"]["shape"] == [WIDTH, 1, 7]
    got = np.load(tmp_path / "out.npz")["y"]
    np.testing.assert_allclose(got, _ort(qcrnn, _feeds())[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("which", ["crnn", "qcrnn"])
def test_map_completes(request, tmp_path, which):
    res = provmap.map(str(request.getfixturevalue(which)), out=str(tmp_path / "m"),
                      input_shapes=SHAPES)
    cov = res.coverage
    assert cov["onnx_nodes_unaccounted"] == 0 and cov["kernels_mapped"] == cov["kernels_total"]


def _two_partitions(tmp_path, also_output: bool):
    """Conv -> Relu (p0, TVM) -> Sigmoid (p1, ORT); `h` (the Relu) is a graph output too when
    `also_output`: read by p1, it is a boundary."""
    from onnx import TensorProto as T, helper as h

    outs = [h.make_tensor_value_info("y", T.FLOAT, [1, 2, 4, 4])]
    if also_output:
        outs.append(h.make_tensor_value_info("h", T.FLOAT, [1, 2, 4, 4]))
    g = h.make_graph(
        [h.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[1, 1]),
         h.make_node("Relu", ["c"], ["h"]), h.make_node("Sigmoid", ["h"], ["y"])],
        "two", [h.make_tensor_value_info("x", T.FLOAT, [1, 1, 4, 4])], outs,
        [onnx.numpy_helper.from_array(np.ones((2, 1, 1, 1), np.float32), "w")])
    path = tmp_path / "two.onnx"
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8), path)
    return provmap.compile(str(path), "greedy:tvm,onnxruntime",
                           backend_options={"tvm": {"exclude_ops": ["Sigmoid"]}})


def _with_spec(art, pid, name, shape):
    """The artifact with partition `pid`'s spec of `name` changed in memory, as if the model
    declared it so and nothing computed it (a hint)."""
    for t in art.partition(pid)["outputs"] + art.manifest["model"]["outputs"]:
        if t["name"] == name:
            t["shape"] = list(shape)
            t["shape_from"] = "declaration"
    return ArtifactModule(art, trust=True)


def test_a_boundary_keeps_its_check_and_a_graph_output_does_not(tmp_path):
    art = _two_partitions(tmp_path, also_output=True)
    assert [p["backend"] for p in art.manifest["partitions"]] == ["tvm", "onnxruntime"]
    feeds = {"x": np.ones((1, 1, 4, 4), np.float32)}
    # `h` is read by p1: a wrong shape there would poison it, so it is still refused.
    mod = _with_spec(art, "p0", "h", [1, 2, 4, 5])
    with pytest.raises(ProvmapError, match=r"partition p0 \(tvm\) returned 'h' as "
                                           r"float32\[1, 2, 4, 4\], expected float32\[1, 2, 4, 5\]"):
        mod.run(feeds)
    # `y` is only a graph output: the result is returned, with one warning.
    mod = _with_spec(_two_partitions(tmp_path, also_output=True), "p1", "y", [1, 8])
    heard = []
    mod.on_warning = heard.append
    for _ in range(2):
        out = mod.run(feeds)
    assert out["y"].shape == (1, 2, 4, 4) and len(heard) == 1
    assert "partition p1 (onnxruntime) returned float32[1, 2, 4, 4]" in heard[0]


def test_a_shape_tvm_fixed_at_build_or_inference_computed_stays_a_check(tmp_path):
    """TVM's output shapes come from its build, not the data: where one contradicts even a
    hint it is more likely a wrong lowering (issue 32's Expand), so it is refused; and an
    output whose shape inference computed is held to it on every backend."""
    art = _two_partitions(tmp_path, also_output=False)
    for t in art.partition("p1")["outputs"]:  # ORT's `y`, computed by inference: no hint
        t["shape"] = [1, 8]
    with pytest.raises(ProvmapError, match=r"partition p1 \(onnxruntime\) returned 'y'"):
        ArtifactModule(art, trust=True).run({"x": np.ones((1, 1, 4, 4), np.float32)})
    from onnx import TensorProto as T, helper as h

    g = h.make_graph([h.make_node("Relu", ["x"], ["y"])], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                     [h.make_tensor_value_info("y", T.FLOAT, [2, 3])])
    art = provmap.compile(h.make_model(g, opset_imports=[h.make_opsetid("", 17)],
                                       ir_version=8), "single:tvm")
    mod = _with_spec(art, "p0", "y", [3, 2])
    with pytest.raises(ProvmapError, match=r"partition p0 \(tvm\) returned 'y' as "
                                           r"float32\[2, 3\], expected float32\[3, 2\]"):
        mod.run({"x": np.ones((2, 3), np.float32)})


def test_a_wrong_dtype_is_still_refused_on_a_graph_output(tmp_path):
    art = _two_partitions(tmp_path, also_output=False)
    for t in art.partition("p1")["outputs"]:
        t["dtype"] = "float16"
    with pytest.raises(ProvmapError, match="returned 'y' as float32"):
        ArtifactModule(art, trust=True).run({"x": np.ones((1, 1, 4, 4), np.float32)})


def _ddddocr_models() -> list[Path]:
    """ddddocr's own files: from the installed package, or $PROVMAP_DDDDOCR_DIR (a folder the
    wheel was unpacked into: README's test command, tests/run, fetches the pinned wheel and
    unpacks its two recognisers there).  Never downloaded by the tests themselves."""
    where = os.environ.get("PROVMAP_DDDDOCR_DIR")
    if not where:
        spec = importlib.util.find_spec("ddddocr")
        if spec is None or not spec.submodule_search_locations:
            return []
        where = list(spec.submodule_search_locations)[0]
    return [p for p in (Path(where) / n for n in ("common.onnx", "common_old.onnx")) if p.is_file()]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["common.onnx", "common_old.onnx"])
# greedy:tvm,onnxruntime once cut common_old.onnx at a Cast's output after DynamicQuantizeLSTM
# that no inference types ("has no known tensor type or rank"): greedy now keeps a tensor's
# producer and consumers together when its type cannot be known.
@pytest.mark.parametrize("strategy", ["single:onnxruntime", "single:openvino",
                                      "greedy:openvino,onnxruntime", "greedy:tvm,onnxruntime"])
def test_the_published_ocr_models(tmp_path, name, strategy):
    path = next((p for p in _ddddocr_models() if p.name == name), None)
    if path is None:
        pytest.skip("ddddocr is not installed (pip install ddddocr, or set PROVMAP_DDDDOCR_DIR "
                    "to the folder its wheel was unpacked into)")
    shapes = {"input1": (1, 1, 64, 160)}
    out = tmp_path / "ocr.provmap"
    provmap.compile(str(path), strategy, out=out, input_shapes=shapes)
    feeds = _feeds(0, shapes["input1"], "input1")
    mod = provmap.load(out)
    mod.on_warning = lambda _line: None
    got = mod.run(feeds)["387"]
    assert bool(mod.warnings) == (name == "common_old.onnx")  # common.onnx: computed at compile
    (want,) = _ort(path, feeds)
    assert got.shape == want.shape == (20, 1, 8210)
    if name == "common.onnx" or strategy == "single:onnxruntime":
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    else:  # dynamic int8 (22 DynamicQuantizeLinear in a chain) on OpenVINO or TVM: judged
        # as OCR is, by the class each time step decodes to
        assert (got.argmax(-1) == want.argmax(-1)).mean() >= 0.95
