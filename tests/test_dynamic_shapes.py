"""Dynamic shapes end to end: a shape profile given as the user states it, one artifact that runs
every shape of it on every backend, the profile checked on every run, and the map of a dynamic
model without any shape.

The models are exports nobody here wrote the graphs of: a TorchScript attention block with
dynamic batch and sequence axes, and transformers' GPT-2 and Llama (grouped-query attention)
decoders exported with a KV cache (tests/data/make_*.py say how each was made)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from attack_kit import members, repack
from cli_runner import one_error, provmap, refused
from onnx import TensorProto, helper
from small_models import two_inputs

from provmap.bench.kv_decode import profile_flags, run_loop
from provmap.partition.compile import compile_model
from provmap.provenance.profile import DimRange, parse_dim
from provmap.provenance.util.errors import ProvmapError
from provmap.runtime_module.module import load
from quick_rule import QUICK_RULE

DATA = Path(__file__).parent / "data"
ATTENTION = DATA / "torchscript_attention_dynamic.onnx"      # x [batch, seq, 16]
KV_DECODERS = [DATA / "gpt2_kv_decoder.onnx", DATA / "llama_gqa_kv_decoder.onnx"]
PROFILE = {"batch": (1, 2, 4), "seq": (1, 8, 32)}
#: min, opt, max and two sizes between
SHAPES = [(1, 1), (2, 8), (4, 32), (3, 17), (1, 5)]


def _ort(path, feeds):
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


# ---- the profile as the user states it ----------------------------------------------------------
def test_sizes_and_ranges_parse_as_openvino_and_trtexec_users_write_them():
    assert parse_dim("16", "x") == 16
    assert parse_dim("1..512", "x") == DimRange(1, 512, 512)          # opt defaults to max
    assert parse_dim("1..512@128", "x") == DimRange(1, 128, 512)
    for bad, why in [("512..1", "above MAX"), ("1..8@9", "outside"), ("a..b", "not a size"),
                     ("-1", "not a size"), ("4@2", "follows a range")]:
        with pytest.raises(ProvmapError, match=why):
            parse_dim(bad, "--dim seq")


def test_a_size_given_for_one_input_holds_for_every_input_naming_it(tmp_path):
    """ONNX reads one symbol as one size: input_ids=1x16 sizes attention_mask's S too (the
    hint once suggested 1x1 for it, which gives S two sizes)."""
    out = tmp_path / "a.provmap"
    r = provmap("compile", two_inputs(tmp_path), "-o", out, "--strategy", "single:onnxruntime",
                "--input-shape", "input_ids=1x16")
    assert r.returncode == 0, r.stderr
    specs = {t["name"]: t["shape"] for t in load(out, runnable=False).manifest["model"]["inputs"]}
    assert specs == {"input_ids": [1, 16], "attention_mask": [1, 16]}


def test_an_open_dimension_is_one_line_naming_it_and_both_ways_to_close_it(tmp_path):
    out = tmp_path / "a.provmap"
    line = refused(provmap("compile", ATTENTION, "-o", out, "--strategy", "single:onnxruntime",
                           "--dim", "seq=1..64"),
                   "'x'", "0 ('batch')", "--input-shape x=1x1x16", "--dim batch=1..64")
    assert "seq" not in line.split("give them")[0].split("dimension")[1], line  # seq has a range
    assert not out.exists()


def test_a_dim_the_model_does_not_name_and_a_range_on_a_fixed_axis_are_refused(tmp_path):
    out = tmp_path / "a.provmap"
    refused(provmap("compile", ATTENTION, "-o", out, "--dim", "batch=1", "--dim", "seq=4",
                    "--dim", "heads=1..4"), "--dim", "'heads'")
    refused(provmap("compile", ATTENTION, "-o", out, "--input-shape", "x=1x1..8x1..16"),
            "'x'", "dimension 2", "fixed at 16")
    assert not out.exists()


def test_an_unnamed_open_axis_given_a_range_gets_a_symbol_of_its_own(tmp_path):
    """paddle2onnx's -1 and a bare `?` have no name: the range names it INPUT_AXIS."""
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              path)
    art = compile_model(str(path), "single:openvino", input_shapes={"x": (DimRange(1, 2, 8), 4)})
    assert art.manifest["model"]["shape_profile"] == {"inputs": {"x": ["x_0", 4]},
                                                      "symbols": {"x_0": [1, 2, 8]}}


# ---- one artifact, every shape -----------------------------------------------------------------
@pytest.mark.parametrize("strategy", ["single:onnxruntime", "single:openvino", "single:tvm",
                                      "greedy:openvino,onnxruntime", "greedy:tvm,onnxruntime"])
def test_one_artifact_runs_every_shape_of_its_profile(tmp_path, strategy):
    art = compile_model(str(ATTENTION), strategy, out=tmp_path / "a.provmap", dims=PROFILE)
    assert art.manifest["model"]["shape_profile"]["symbols"] == {
        "batch": [1, 2, 4], "seq": [1, 8, 32]}
    mod = load(tmp_path / "a.provmap", trust=True)
    rng = np.random.default_rng(0)
    for b, s in SHAPES:
        x = rng.standard_normal((b, s, 16)).astype(np.float32)
        got, ref = mod.run({"x": x}), _ort(ATTENTION, {"x": x})
        for name, want in ref.items():
            np.testing.assert_allclose(got[name], want, rtol=1e-3, atol=1e-5,
                                       err_msg=f"{strategy} at {b}x{s}")


def test_a_shape_outside_the_profile_is_one_line_and_exit_2(tmp_path):
    art = tmp_path / "a.provmap"
    assert provmap("compile", ATTENTION, "-o", art, "--strategy", "single:onnxruntime",
                   "--dim", "batch=1", "--dim", "seq=1..32@8").returncode == 0
    np.savez(tmp_path / "long.npz", x=np.zeros((1, 40, 16), np.float32))
    refused(provmap("run", art, "--inputs", tmp_path / "long.npz", "-o", tmp_path / "o.npz"),
            "input 'x' dimension 1 ('seq') is 40", "1..32")
    np.savez(tmp_path / "batch.npz", x=np.zeros((2, 4, 16), np.float32))
    refused(provmap("run", art, "--inputs", tmp_path / "batch.npz", "-o", tmp_path / "o.npz"),
            "input 'x'", "[1, seq(1..32), 16]", "[2, 4, 16]")
    assert not (tmp_path / "o.npz").exists()
    r = provmap("run", art, "--random", "-o", tmp_path / "o.npz")  # at the opt sizes
    assert r.returncode == 0, r.stderr
    assert np.load(tmp_path / "o.npz")[load(art, runnable=False).output_names[0]].shape[1] == 8
    info = provmap("inspect", art)
    assert "shape profile: seq=1..32@8" in info.stdout, info.stdout
    assert "in   x: float32[1, seq, 16]" in info.stdout, info.stdout  # boundaries in its symbols


def test_a_strangers_profile_is_checked_before_anything_runs(tmp_path):
    art = tmp_path / "a.provmap"
    compile_model(str(ATTENTION), "single:onnxruntime", out=art, dims=PROFILE)
    manifest, files = members(art)
    for bad in ({"inputs": {"x": ["batch", "seq", 16]}, "symbols": {"batch": [4, 2, 1],
                                                                    "seq": [1, 8, 32]}},
                {"inputs": {"x": ["nosuch", 1, 16]}, "symbols": {}},
                {"inputs": {"y": [1]}, "symbols": {}}, [1, 2]):
        manifest["model"]["shape_profile"] = bad
        one_error(provmap("inspect", repack(tmp_path / "b.provmap", manifest, files)),
                  "model.shape_profile")
    manifest, files = members(art)
    manifest["partitions"][0]["outputs"][0]["symbols"] = [None, "\x1b[2J$(id)", None]
    one_error(provmap("inspect", repack(tmp_path / "b.provmap", manifest, files)),
              "partitions[0].outputs[0].symbols[1]")


# ---- the spine keeps symbols --------------------------------------------------------------------
@pytest.mark.parametrize("path", [ATTENTION, *KV_DECODERS], ids=lambda p: p.stem)
def test_a_dynamic_map_keeps_the_ids_and_maps_what_a_static_map_maps(path):
    """`map` without a shape: TVM compiles the symbols; every node a static map of the same file
    maps to a kernel is mapped, under the same ID, and nothing more is "elided"."""
    from provmap.partition.model_source import map_model

    static_shapes = {"x": (2, 8, 16)} if path == ATTENTION else {
        "input_ids": (1, 4), "attention_mask": (1, 9),
        **{i.name: (1, i.type.tensor_type.shape.dim[1].dim_value, 5, 8)
           for i in onnx.load(str(path)).graph.input if i.name.startswith("past")}}
    dyn, fixed = map_model(str(path)).pmap, map_model(str(path), input_shapes=static_shapes).pmap

    from provmap.provenance.model import ROLE_PRODUCED

    def mapped(pmap):
        reached = {e for _s, e, *_r in pmap.site_exprs}
        return {nid for nid, e, r in pmap.node_exprs if e in reached and r == ROLE_PRODUCED}

    assert [n.id for n in dyn.nodes] == [n.id for n in fixed.nodes]
    lost = {n.name for n in fixed.nodes if n.id in mapped(fixed) - mapped(dyn)}
    assert not lost, lost
    assert sum(bool(n.elided) for n in dyn.nodes) <= sum(bool(n.elided) for n in fixed.nodes)


@pytest.mark.parametrize("make", ["fpn_dynamic", "se_gate_dynamic"])
def test_an_open_image_size_maps_and_runs_whole_on_tvm(tmp_path, make):
    """A feature pyramid's upsampled map and its skip connection: their sizes, computed two
    ways, are stated equal (ONNX Runtime's inference merges them), so the Concat and the Add
    after it compile, and the kernels whose shapes hold the Resize's float arithmetic keep their
    IDs through FuseOps.  An SE gate read first broadcasts to the feature map's size."""
    import small_models

    from provmap.bench.shape_sweep import check_outputs
    from provmap.partition.model_source import map_model
    from provmap.provenance.profile import ShapeProfile

    path = tmp_path / "m.onnx"
    onnx.save(getattr(small_models, make)(), path)
    pmap = map_model(str(path)).pmap
    reached = {e for _s, e, *_r in pmap.site_exprs}
    assert {nid for nid, e, _r in pmap.node_exprs if e in reached} == {n.id for n in pmap.nodes}
    assert not any(n.elided for n in pmap.nodes)
    art = compile_model(str(path), "single:tvm", dims={"batch": (1, 1, 2), "height": (32, 64, 96),
                                                      "width": (32, 64, 128)})
    for point, _ in ShapeProfile.from_json(art.manifest["model"]["shape_profile"]).points():
        got = check_outputs(str(path), {"tvm": art}, point)["tvm"]
        assert got["ok"], (point, got)


# ---- decoders with a KV cache -------------------------------------------------------------------
@pytest.mark.parametrize("strategy", ["single:onnxruntime", "single:openvino", "single:tvm"])
@pytest.mark.parametrize("path", KV_DECODERS, ids=lambda p: p.stem)
def test_one_artifact_serves_the_prefill_and_every_decode_step(tmp_path, path, strategy):
    """A 128-token prefill (the cache empty) and 32 decode steps, each fed the cache the last
    returned, from one artifact, matching ONNX Runtime's logits at every step."""
    art = tmp_path / "kv.provmap"
    r = provmap("compile", path, "-o", art, "--strategy", strategy, *profile_flags(128, 32))
    assert r.returncode == 0, r.stderr
    rep = run_loop(str(path), load(art, trust=True), prompt=128, steps=32)
    assert rep.steps == 33
    assert rep.worst_abs < 1e-4, rep.worst_abs


@pytest.mark.parametrize("fixed", [{"seq": (8, 16, 32), "past": 0, "total": (8, 16, 32)},
                                   {"seq": 1, "past": (0, 8, 31), "total": (1, 9, 32)}],
                         ids=["prefill_cache_empty", "decode_one_token"])
@pytest.mark.parametrize("path", KV_DECODERS, ids=lambda p: p.stem)
def test_tvm_builds_a_profile_that_fixes_the_cache_empty_or_the_step_at_one_token(path, fixed):
    """A profile per phase, as users split prefill and decode: the frontend read a fixed 0 as
    an open dimension (the scores' broadcast against the mask then could not be legalized) and
    turned `[0] + past` into a scalar (the position ids lost their axis)."""
    from provmap.bench.shape_sweep import check_outputs
    from provmap.provenance.profile import ShapeProfile

    art = compile_model(str(path), "single:tvm", dims={"batch": 1, **fixed})
    for point, _ in ShapeProfile.from_json(art.manifest["model"]["shape_profile"]).points():
        got = check_outputs(str(path), {"tvm": art}, point)["tvm"]
        assert got["ok"] and got["max_abs"] < 1e-4, (point, got)


# ---- Collage with a profile ---------------------------------------------------------------------
def test_collage_searches_at_opt_and_reports_every_point(tmp_path):
    """The search runs on the opt sizes; the kept plan is built for the whole range, runs at
    every point, and explain says how it and each library's default fare at min, opt and max."""
    from provmap.partition.collage_types import CollageOptions

    art_path = tmp_path / "c.provmap"
    opts = CollageOptions(max_depth=2, max_size=3, cache_path=str(tmp_path / "c.sqlite"),
                          rule=QUICK_RULE, refine_budget_s=0.0, e2e_variants=(),
                          accept_contended=True, quiet_wait_s=2.0)
    art = compile_model(str(ATTENTION), "collage:onnxruntime,openvino", out=art_path,
                        dims=PROFILE, collage_options=opts)
    rows = art.manifest["plan_info"]["profile_points"]
    assert [r["point"] for r in rows] == ["min", "opt", "max"]
    assert rows[1]["shapes"] == {"x": [2, 8, 16]}
    for r in rows:
        assert set(r["median_ms"]) == {"kept", "single:onnxruntime", "single:openvino"}
        assert r["best_single"] in ("single:onnxruntime", "single:openvino")
        assert set(r["outputs_vs"]) == {"single:onnxruntime", "single:openvino"}
        assert all(v["ok"] for v in r["outputs_vs"].values()), r
    mod = load(art_path, trust=True)
    for b, s in SHAPES:
        x = np.random.default_rng(b * 100 + s).standard_normal((b, s, 16)).astype(np.float32)
        np.testing.assert_allclose(mod.run({"x": x})[mod.output_names[0]],
                                   _ort(ATTENTION, {"x": x})[mod.output_names[0]],
                                   rtol=1e-3, atol=1e-5)
    text = provmap("explain", art_path).stdout
    assert "searched at opt" in text and "max (x=4x32x16): kept" in text, text
    assert text.count("outputs match every library's") == 3, text


# ---- the bench's shape sweep -------------------------------------------------------------------
def test_the_shape_sweep_times_each_strategy_at_each_point_and_checks_its_numbers():
    from provmap.bench.shape_sweep import markdown, sweep

    res = sweep(str(ATTENTION), PROFILE, lambda m: None, repeats=3,
                strategies=["single:onnxruntime", "greedy:openvino,onnxruntime"])
    assert not res["failed"]
    assert [r["point"] for r in res["points"]] == ["min", "opt", "max"]
    for r in res["points"]:
        assert r["best_single"] == "single:onnxruntime"
        assert r["ratio_to_best"]["single:onnxruntime"] == 1.0
        assert max(r["max_abs_vs_ort"].values()) < 1e-4, r
        assert all(r["matches_ort"].values()) and r["one_call"] == [], r
    text = markdown({"date": "d", "host": "h", "models": {"attention": res}})
    assert "| max {'x': [4, 32, 16]} |" in text, text
