"""The vendor's workbench: compare, bisect, profile, report (in headless Chromium), annotate,
explain -- on real backends, with a deliberately wrong kernel injected (test only)."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import onnx
import pytest

import crashing_backend as cb
import small_models
from provmap.workbench.bisect import bisect, check_reproducer
from provmap.cli.main import main as cli_main
from provmap.partition.compile import compile_model, load_view
from provmap.provenance.bundled import zoo
from provmap.workbench.compare import Tolerance, compare_artifact
from provmap.runtime_module.module import load
from provmap.runtime_module.registry import get_backend
from browser import chromium


@pytest.fixture(scope="module")
def mixed_art(tmp_path_factory, transformer_model):
    """Transformer block, ORT with Softmax excluded and OpenVINO picking it up: 3 partitions."""
    path = tmp_path_factory.mktemp("wb") / "mixed.provmap"
    compile_model(transformer_model, "greedy:onnxruntime,openvino", out=path, embed_model=True,
                  backend_options={"onnxruntime": {"exclude_ops": ["Softmax"]}})
    return path


def _perturb(mod, pid: str, delta: float = 0.5):
    part = next(p for p in mod.partitions if p.id == pid)
    part._runner = cb._Perturbed(part.runner, delta)
    mod._plan = None


def test_compare_clean_artifact_matches(mixed_art):
    mod = load(mixed_art)
    assert len(mod.partitions) >= 3
    model = mod.artifact.source_model()
    res = compare_artifact(mod, model, mod.random_inputs(0))
    assert res["match"] and res["first_divergent_partition"] is None
    produced = {t["tensor"] for t in res["tensors"]}
    boundary = {t["name"] for p in mod.manifest["partitions"] for t in p["outputs"]}
    assert produced == boundary  # every tensor crossing a boundary, and the outputs
    for t in res["tensors"]:
        assert t["onnx_node"] and t["cosine"] > 0.999999


def test_close_releases_partitions_and_run_reloads(mixed_art):
    mod = load(mixed_art)
    feeds = mod.random_inputs(0)
    first = mod.run(feeds)
    mod.close()
    assert all(p._runner is None for p in mod.partitions)
    again = mod.run(feeds)  # loads the code again on demand
    for k, v in first.items():
        np.testing.assert_array_equal(again[k], v)


def test_compare_points_at_the_perturbed_partition(mixed_art):
    mod = load(mixed_art)
    victim = mod.manifest["partitions"][1]
    _perturb(mod, victim["id"])
    res = compare_artifact(mod, mod.artifact.source_model(), mod.random_inputs(0))
    assert not res["match"]
    c = res["first_divergent_partition"]
    assert c["partition"] == victim["id"] and c["backend"] == victim["backend"]
    names = {n.id: n.name for n in mod.lookup.map.nodes}
    assert set(c["onnx_nodes"]) == {names[i] for i in victim["ops"]}
    # Upstream tensors still match; the victim's and everything downstream differ.
    first = next(t for t in res["tensors"] if t["partition"] == mod.manifest["partitions"][0]["id"])
    assert first["ok"]
    bad = [t for t in res["tensors"] if t["partition"] == victim["id"]]
    assert bad and all(not t["ok"] and t["max_abs"] == pytest.approx(0.5, rel=1e-3) for t in bad)


def test_compare_cli_exit_codes(mixed_art, tmp_path, monkeypatch, capsys):
    assert cli_main(["compare", str(mixed_art), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["match"]
    # 1: mismatch (the perturbed kernel injected into the loaded module).
    import provmap.runtime_module.module as rm

    real = rm.load

    def perturbed_load(path, runnable=True, trust=False):
        m = real(path, runnable, trust)
        _perturb(m, m.manifest["partitions"][-1]["id"])
        return m

    monkeypatch.setattr(rm, "load", perturbed_load)
    assert cli_main(["compare", str(mixed_art)]) == 1
    assert "first divergent partition" in capsys.readouterr().out
    monkeypatch.setattr(rm, "load", real)
    # 2: cannot evaluate -- no embedded model and none given, or the wrong model.
    plain = tmp_path / "plain.provmap"
    compile_model(zoo.transformer_block(), "single:onnxruntime", out=plain)
    assert cli_main(["compare", str(plain)]) == 2
    assert "--embed-model" in capsys.readouterr().err
    assert cli_main(["compare", str(plain), "--model", "bundled:squeezenet"]) == 2
    assert "not the model this artifact was compiled from" in capsys.readouterr().err


def test_bisect_finds_the_wrong_node_and_reproducer_fails_alone(tmp_path, transformer_model):
    view = load_view(transformer_model, "transformer")
    target = view.nodes[view.op_nodes[len(view.op_nodes) // 2]].name
    cb.NodePerturbingBackend.TARGET = target
    backend = cb.NodePerturbingBackend()
    inputs = zoo.random_inputs(transformer_model, seed=0)
    res = bisect(view, backend, inputs, Tolerance(), out_dir=tmp_path / "repro")
    assert res["diverges"] and res["node"] == target
    n = len(view.op_nodes)
    assert res["runs"] <= int(np.ceil(np.log2(n))) + 3  # O(log n) builds, and the whole model
    assert res["reproducer_diverges"]
    r = res["reproducer"]
    rep = onnx.load(r["model"])
    assert [nd.name for nd in rep.graph.node if nd.name == target] == [target]
    assert check_reproducer(r["model"], r["inputs"], r["expected"], backend)
    assert not check_reproducer(r["model"], r["inputs"], r["expected"], get_backend("onnxruntime"))


def test_bisect_clean_backend_reports_no_divergence(transformer_model):
    view = load_view(transformer_model, "transformer")
    res = bisect(view, get_backend("openvino"), zoo.random_inputs(transformer_model, seed=0))
    # the whole model with every intermediate exposed, and as compare runs it (nothing exposed)
    assert not res["diverges"] and res["runs"] == 2
    assert res["outputs"] and all(t["ok"] for t in res["outputs"])


@pytest.mark.parametrize("backend", ["openvino", "tvm"])
def test_bisect_cli_ignores_a_tensor_nothing_reads(tmp_path, capsys, backend):
    """Dropout's mask differs on OpenVINO and TVM (ONNX Runtime's opset-9 mask is float zeros)
    but nothing reads it: bisect once named SqueezeNet's Dropout for it (issue 25)."""
    path = tmp_path / "drop.onnx"
    onnx.save(small_models.conv_dropout(read_mask=False), str(path))
    assert cli_main(["bisect", str(path), "--backend", backend, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["diverges"] is False


def test_bisect_cli_names_the_diverging_tensor(tmp_path, capsys):
    """When the mask is read, the Dropout is the culprit for that tensor, not its data output:
    bisect names it and the reproducer checks it, and it fails alone."""
    path = tmp_path / "drop.onnx"
    onnx.save(small_models.conv_dropout(read_mask=True), str(path))
    repro = tmp_path / "repro"
    assert cli_main(["bisect", str(path), "--backend", "openvino", "-o", str(repro)]) == 1
    out = capsys.readouterr().out
    assert "first diverging node: drop (Dropout" in out
    assert "diverging tensor mask: bool[1, 4, 8, 8] vs reference float32[1, 4, 8, 8]" in out
    assert "checks mask; fails alone: True" in out
    assert cli_main(["bisect", str(path), "--backend", "openvino", "--json"]) == 1
    res = json.loads(capsys.readouterr().out)
    assert res["node"] == "drop" and res["tensor"] == "mask"
    assert [t["tensor"] for t in res["tensors"]] == ["mask"]
    assert [t["tensor"] for t in res["reproducer_tensors"]] == ["mask"]
    assert res["reproducer_diverges"]
    r = {k: str(repro / f"reproducer{s}") for k, s in
         (("model", ".onnx"), ("inputs", "_inputs.npz"), ("expected", "_expected.npz"))}
    assert list(np.load(r["expected"])) == ["mask"]
    assert check_reproducer(r["model"], r["inputs"], r["expected"], get_backend("openvino")) \
        == ["mask"]


def test_compare_cli_single_openvino_passes_on_bundled_squeezenet(tmp_path, capsys):
    """bundled: models carry seeded random weights: the constant originals' logits (~6.8e9)
    made a correct OpenVINO fail compare on rounding noise (issue 25)."""
    art = tmp_path / "sq.provmap"
    assert cli_main(["compile", "bundled:squeezenet", "-o", str(art), "--strategy",
                     "single:openvino", "--embed-model"]) == 0
    capsys.readouterr()
    assert cli_main(["compare", str(art), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["match"] and len(res["tensors"]) == 1
    [t] = res["tensors"]
    assert t["backend"] == "openvino" and t["model_output"] and t["cosine"] > 0.999999
    # The model given again by its spec is the same model (same SHA-256) in this process too.
    assert cli_main(["compare", str(art), "--model", "bundled:squeezenet"]) == 0


@pytest.mark.slow
@pytest.mark.parametrize("name", ["squeezenet", "bvlc_alexnet", "inception_v1", "resnet50",
                                  pytest.param("vgg19", marks=pytest.mark.heavy)])
def test_profile_sums_to_end_to_end(tmp_path, name):
    from provmap.workbench.profile import profile_artifact

    model = zoo.with_random_weights(zoo.load_light(name), seed=0)
    art = compile_model(model, "greedy:onnxruntime,openvino",
                        backend_options={"onnxruntime": {"exclude_ops": ["MaxPool"]}})
    art.save(tmp_path / "a.provmap")
    mod = load(tmp_path / "a.provmap")
    assert {p.backend for p in mod.partitions} == {"onnxruntime", "openvino"}
    res = profile_artifact(mod, mod.random_inputs(0), repeats=10, kernel_repeats=3)
    # Behaviour, not wall time (a loaded machine breaks any timing bound; the ratio of the
    # partitions' sum to end to end is bench material): every partition is timed and reported,
    # and the sum is reported beside the end-to-end time.
    assert [p["partition"] for p in res["partitions"]] == [m.id for m in mod.partitions]
    assert all(p["ms"] > 0 for p in res["partitions"])
    assert res["partitions_total_ms"] == pytest.approx(sum(p["ms"] for p in res["partitions"]))
    assert res["e2e_ms"] > 0
    for p in res["partitions"]:
        assert p["kernel_times"] == "profiler", p
        assert 0 <= p["outside_kernels_ms"] <= p["ms"] + 1e-9
    # Node attribution adds up to the kernels' time.
    assert sum(r["ms"] for r in res["onnx_nodes"]) == pytest.approx(
        sum(k["ms"] for k in res["kernels"]), rel=1e-6)
    assert any(r.get("shared_with") for r in res["onnx_nodes"])  # fused kernels say so
    ev = res["trace"]["traceEvents"]
    assert {e["cat"] for e in ev} == {"partition", "kernel", "executor"}  # + between calls
    assert res["partitions_total_ms"] + res["between_partitions_ms"] == pytest.approx(
        res["e2e_ms"])


def test_profile_tvm_and_cli_trace(tmp_path, transformer_model, capsys):
    art = tmp_path / "tvm.provmap"
    compile_model(transformer_model, "greedy:tvm,onnxruntime", out=art,
                  backend_options={"tvm": {"exclude_ops": ["Softmax"]}})
    trace = tmp_path / "trace.json"
    assert cli_main(["profile", str(art), "--repeats", "5", "--trace", str(trace), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    by_backend = {p["backend"]: p for p in res["partitions"]}
    assert by_backend["tvm"]["kernel_times"] == "profiler"
    assert any(k["backend"] == "tvm" and k["ms"] > 0 for k in res["kernels"])
    assert json.loads(trace.read_text())["traceEvents"]




def test_report_renders_in_headless_chromium(tmp_path):
    from provmap.bench.scaling import synthetic_model

    from provmap.runtime_module.artifact_build import build_artifact
    from provmap.runtime_module.plan import PartitionSpec, Plan

    view = load_view(synthetic_model(1200), "synthetic1200")
    half = len(view.op_nodes) // 2
    plan = Plan("manual", [PartitionSpec("onnxruntime", view.op_nodes[:half]),
                           PartitionSpec("openvino", view.op_nodes[half:])])
    art = tmp_path / "big.provmap"
    build_artifact(view, plan, {b: get_backend(b) for b in ("onnxruntime", "openvino")}).save(art)
    html_path = tmp_path / "report.html"
    assert cli_main(["report", str(art), "-o", str(html_path)]) == 0
    page = html_path.read_text()
    assert "<script src" not in page and "http://" not in page.replace(
        "http://www.w3.org/2000/svg", "")  # self-contained
    exe = chromium()
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--virtual-time-budget=10000", "--window-size=1400,900"]
    dom = subprocess.run([exe, *flags, "--dump-dom", html_path.as_uri()], capture_output=True,
                         text=True, timeout=120)
    assert 'data-rendered="ok"' in dom.stdout, dom.stderr[-2000:]
    assert "data-error" not in dom.stdout
    assert 'data-nodes="1200"' in dom.stdout
    shot = tmp_path / "shot.png"
    subprocess.run([exe, *flags, f"--screenshot={shot}", html_path.as_uri()],
                   capture_output=True, timeout=120)
    import matplotlib.image as mpimg

    img = mpimg.imread(shot)
    assert img.shape[0] >= 800 and img.shape[1] >= 1300
    # Backend colors are on screen: ORT blue and OpenVINO green pixels both present.
    rgb = (img[..., :3] * 255).round().astype(int)
    for color in ((0x4e, 0x79, 0xa7), (0x59, 0xa1, 0x4f)):
        assert (np.abs(rgb - np.array(color)).sum(axis=-1) < 6).sum() > 100, color


def test_annotate_writes_placement_into_the_model(mixed_art, tmp_path, transformer_model):
    out = tmp_path / "annotated.onnx"
    assert cli_main(["annotate", str(mixed_art), "-o", str(out)]) == 0
    m = onnx.load(out)
    mod = load(mixed_art, runnable=False)
    placed = {}
    for node in m.graph.node:
        props = {p.key: p.value for p in node.metadata_props}
        if "provmap.backend" in props:
            placed[node.name] = props
    by_part = {p["id"]: p for p in mod.manifest["partitions"]}
    names = {n.id: n.name for n in mod.lookup.map.nodes}
    for pid, p in by_part.items():
        for i in p["ops"]:
            assert placed[names[i]]["provmap.partition"] == pid
            assert placed[names[i]]["provmap.backend"] == p["backend"]
            assert placed[names[i]]["provmap.kernels"]
    softmax = [n for n in m.graph.node if n.op_type == "Softmax"]
    assert all({p.key: p.value for p in n.metadata_props}["provmap.backend"] == "openvino"
               for n in softmax)
    # Still the same model: it runs and gives the same output.
    import onnxruntime as ort

    feeds = zoo.random_inputs(transformer_model, seed=1)
    a = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    b = ort.InferenceSession(transformer_model.SerializeToString(),
                             providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_array_equal(a[0], b[0])


def test_explain_collage_artifact(tmp_path, transformer_model, capsys):
    from provmap.partition.collage import CollageOptions

    art = tmp_path / "c.provmap"
    compile_model(transformer_model, "collage:onnxruntime,openvino", out=art,
                  collage_options=CollageOptions(cache_path=str(tmp_path / "c.sqlite"),
                                                 max_size=4, max_depth=2, refine_budget_s=8))
    assert cli_main(["explain", str(art), "--json"]) == 0
    x = json.loads(capsys.readouterr().out)
    assert x["searched"] and x["partitions"]
    for r in x["partitions"]:
        assert set(r["alternatives_ms"]) == {"onnxruntime", "openvino"}
        assert r["alternatives_ms"][r["backend"]] is not None or r["from_candidates"]
        assert r["greedy_backend"] in ("onnxruntime", "openvino")
    assert x["end_to_end"]["winner"] and x["end_to_end"]["measured_ms"]
    assert cli_main(["explain", str(art)]) == 0
    text = capsys.readouterr().out
    assert "end-to-end check" in text and "as one partition" in text
    assert x["second_level"]["trail"] is not None and "second level" in text
    assert "kept plan found by" in text
    # predicted vs measured: the number bench's column shows, and the end-to-end median
    from provmap.bench.baseline import gains
    from provmap.partition.collage_report import kept_label

    pm = x["predicted_vs_measured"]
    assert pm["label"] == kept_label(x["strategy"])
    search = {"kept": x["strategy"], "estimated_ms": x["estimated_ms"]}
    assert pm["predicted_ms"] == gains([], search)["predicted_ms"]
    if pm["label"] != "refined":
        assert pm["predicted_ms"] is None or pm["predicted_ms"] == x["estimated_ms"][pm["label"]]
        assert pm["measured_ms"] == x["end_to_end"]["measured_ms"][pm["label"]]
    assert f"kept plan {pm['label']}: " in text
    # A rule-based artifact says there was no search.
    plain = tmp_path / "p.provmap"
    compile_model(transformer_model, "single:openvino", out=plain)
    assert cli_main(["explain", str(plain), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["searched"] is False


def test_explain_and_bench_read_one_predicted_vs_measured():
    """The kept plan's first-level estimate against its end-to-end median, from the report
    alone (issue 35): explain's line and --json, and bench's predicted column, agree."""
    from provmap.bench.baseline import gains
    from provmap.partition.collage_report import predicted_vs_measured
    from provmap.workbench.explain import _predicted_line

    rep = {"estimated_ms": {"collage": 4.0, "single:openvino": 5.0},
           "e2e": {"measured": {"collage": {"median_ms": 5.0}, "single:openvino": {
               "median_ms": 4.5}}}}
    pm = predicted_vs_measured(rep, "collage")
    assert pm == {"label": "collage", "predicted_ms": 4.0, "measured_ms": 5.0, "ratio": 0.8}
    assert _predicted_line(pm) == ("kept plan collage: predicted 4.000 ms (first level's "
                                   "estimate) vs measured 5.000 ms (end-to-end median); "
                                   "predicted / measured 0.80")
    other = predicted_vs_measured(rep, "collage->single:openvino")
    assert (other["predicted_ms"], other["measured_ms"]) == (5.0, 4.5)
    for strategy in ("collage", "collage->single:openvino", "collage->refined"):
        assert gains([], {**rep, "kept": strategy})["predicted_ms"] == \
            predicted_vs_measured(rep, strategy)["predicted_ms"]
    variant = predicted_vs_measured(rep, "collage->single:openvino[threads=1]")
    assert variant["predicted_ms"] is None and variant["ratio"] is None
    assert "no prediction" in _predicted_line(variant)
    # a plan the second level found has no estimate: bench takes the median it was kept on
    # (GPT-2 small's 2-partition plan had "-" there, so its 15% check could not be read)
    refined = {**rep, "kept": "collage->refined", "refine": {"trail": [
        {"status": "kept", "proposal": {"median_ms": 4.2}}]}}
    assert predicted_vs_measured(refined, "collage->refined")["predicted_ms"] is None
    g = gains([], refined)
    assert (g["predicted_ms"], g["predicted_basis"]) == (4.2, "second level's measurement")
    assert gains([], {**rep, "kept": "collage"})["predicted_basis"] == "estimate"


def test_profile_gives_time_only_to_nodes_that_compute(tmp_path):
    """SqueezeNet's ConstantOfShape weights (the constant original's) are folded into the
    convolutions that read them: a profile must not split a convolution's time with them
    (issue 16)."""
    from provmap.workbench.profile import profile_artifact

    path = tmp_path / "sq.provmap"
    compile_model("bundled:squeezenet:original", "greedy:openvino,onnxruntime", out=path,
                  backend_options={"openvino": {"exclude_ops": ["Concat"]}})
    mod = load(path)
    res = profile_artifact(mod, mod.random_inputs(0), repeats=2, kernel_repeats=1)
    by_id = {n.id: n for n in mod.lookup.map.nodes}
    timed = {r["id"] for r in res["onnx_nodes"] if r["ms"] > 0}
    assert timed
    folded = {i for i in timed if by_id[i].op_type in ("ConstantOfShape", "Constant")}
    assert not folded, sorted(by_id[i].op_type for i in folded)
    computing = {n.id for n in mod.lookup.map.nodes if not n.elided}
    assert timed <= computing


def test_quantized_tensors_match_within_one_step_and_no_more():
    """int8/uint8 tensors are quantized activations: one rounding step between libraries is
    agreement (ORT vs OpenVINO on a QOperator ResNet-18 boundary), two steps are not, and
    --quant-steps 0 asks for bit-exact.  Other integer tensors (indices) stay exact."""
    from provmap.workbench.compare import Tolerance, metrics

    ref = np.array([0, 17, 128, 255], np.uint8)
    one = np.array([1, 17, 127, 255], np.uint8)
    assert metrics(one, ref, Tolerance())["ok"]
    assert not metrics(one, ref, Tolerance(quant_steps=0))["ok"]
    assert not metrics(np.array([2, 17, 128, 255], np.uint8), ref, Tolerance())["ok"]
    assert metrics(np.array([-128, 3, 127], np.int8), np.array([-127, 3, 126], np.int8),
                   Tolerance())["ok"]
    assert not metrics(one.astype(np.int64), ref.astype(np.int64), Tolerance())["ok"]


def test_compare_names_a_quantization_the_model_leaves_undefined(tmp_path, capsys):
    """BERT quantized by ORT's static quantizer: calibration saw the attention mask's -inf, so
    QuantizeLinear's scale is inf and x / inf is 0 or NaN.  ONNX leaves that undefined, and
    plain ONNX Runtime and plain OpenVINO give different int8 values.  compare reports the
    difference and says the model causes it."""
    from onnx import TensorProto, helper, numpy_helper

    c = numpy_helper.from_array
    nodes = [
        helper.make_node("Greater", ["x", "zero"], ["masked"], name="is_masked"),
        helper.make_node("Where", ["masked", "neg_inf", "zero"], ["bias"], name="mask_bias"),
        helper.make_node("QuantizeLinear", ["bias", "scale", "zp"], ["bias_q"], name="bias_quant"),
        helper.make_node("DequantizeLinear", ["bias_q", "one", "zp"], ["out"], name="bias_dq"),
    ]
    inits = [c(np.array(0.0, np.float32), "zero"), c(np.array(-np.inf, np.float32), "neg_inf"),
             c(np.array(np.inf, np.float32), "scale"), c(np.array(0, np.int8), "zp"),
             c(np.array(1.0, np.float32), "one")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 4])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path = tmp_path / "mask_quant.onnx"
    onnx.save(model, path)
    art = tmp_path / "mq.provmap"
    assert cli_main(["compile", str(path), "-o", str(art), "--strategy",
                     "greedy:openvino,onnxruntime", "--backend-option",
                     "openvino.exclude_ops=DequantizeLinear"]) == 0
    x = np.array([[1, -1, 2, -2], [0.5, -0.5, 3, -3]], np.float32)
    np.savez(tmp_path / "x.npz", x=x)
    capsys.readouterr()
    rc = cli_main(["compare", str(art), "--model", str(path), "--inputs", str(tmp_path / "x.npz"),
                   "--quant-steps", "0"])
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if "bias_q" in ln)
    assert rc == 1 and line.startswith("FAIL") and "openvino" in line, out
    assert "QuantizeLinear 'bias_quant' has scale inf in the model" in line, out
