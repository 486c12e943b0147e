"""Going through provmap must not lose what the plain library gets right, on ONNX's own node tests.

A fixed-seed sample plus NAMED problem cases runs in the default suite (bench/conformance.py's
worker pool: isolated, 2 workers, 60 s per case); for each provmap pipeline, a case its plain
library passes must pass through provmap too, or be listed in conformance.EXCEPTIONS (reported as
xfail with the reason).  The whole collection is `-m conformance` (about 25 minutes).
"""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest

from provmap.bench import conformance as conf

SAMPLE, SEED = 30, 20240611
# Known problem areas: reductions with default axes, constants and shapes folded at import,
# resize, top-k/cumsum/split with tensor-valued attributes, layer norm's extra outputs, float64,
# dynamic output shapes (NonZero, Unique), expanded functions, RNNs, control flow, sequences.
NAMED = ["test_reduce_sum_default_axes_keepdims_example", "test_constant", "test_shape",
         "test_resize_downsample_scales_linear", "test_top_k", "test_cumsum_1d",
         "test_split_variable_parts_1d_opset18", "test_layer_normalization_2d_axis0",
         "test_einsum_batch_diagonal", "test_nonzero_example",
         "test_unique_not_sorted_without_axis", "test_softmax_axis_0_expanded",
         "test_lstm_defaults", "test_if", "test_sequence_insert_at_back"]
CASES = sorted(set(conf.select_cases(SAMPLE, SEED)) | set(NAMED))
PAIRS = [(c, p) for c in CASES for p in conf.PROVMAP]


@pytest.fixture(scope="module")
def results():
    tasks = [(c, p) for c in CASES for p in conf.PIPELINES]
    return conf.run_many(tasks, jobs=2, timeout=60)


@pytest.mark.parametrize("case,pipeline", PAIRS, ids=[f"{c}-{p}" for c, p in PAIRS])
def test_provmap_keeps_what_plain_passes(results, case, pipeline):
    plain = conf.PROVMAP[pipeline]
    base, got = results[(case, plain)], results[(case, pipeline)]
    if base["status"] != "pass":
        pytest.skip(f"plain {plain} does not pass either ({base['status']}: "
                    f"{base['message'][:150]})")
    if got["status"] == "pass":
        return
    why = conf.exception_for(case, pipeline)
    if why and got["status"] == "error":  # a clean refusal; never a crash or wrong numbers
        pytest.xfail(f"{why} [{got['status']}: {got['message'][:150]}]")
    pytest.fail(f"plain {plain} passes; provmap {got['status']}: {got['message']}", pytrace=False)


def test_named_cases_exist_and_sample_is_deterministic():
    names = set(conf.select_cases())
    assert len(names) > 1800
    assert not set(NAMED) - names
    assert conf.select_cases(SAMPLE, SEED) == conf.select_cases(SAMPLE, SEED)
    assert conf.select_cases(SAMPLE, SEED) != conf.select_cases(SAMPLE, SEED + 1)
    assert conf.select_cases(regex="^test_top_k$") == ["test_top_k"]


def _attr(n, name, default):
    a = next((a for a in n.attribute if a.name == name), None)
    return default if a is None else a.s.decode() if a.type == a.STRING else a.i


def _wrong_kinds(g) -> set[str]:
    """The attribute settings a library computes wrongly (the refusals' kinds)."""
    used = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    out = set()
    for n in g.node:
        if n.op_type == "TopK" and len(n.output) > 1 and n.output[1] in used:
            out.add("TopK ties")
        if n.op_type == "SpaceToDepth" and str(_attr(n, "mode", "DCR")).upper() == "CRD":
            out.add("SpaceToDepth CRD")
        if n.op_type == "Resize" and _attr(n, "mode", "nearest") == "cubic" and \
                _attr(n, "exclude_outside", 0):
            out.add("cubic exclude_outside")
        if n.op_type == "IsInf" and not (_attr(n, "detect_positive", 1) and
                                         _attr(n, "detect_negative", 1)):
            out.add("IsInf detect flags")
    inits = {t.name for t in g.initializer}
    if any(n.op_type == "BitShift" and n.input[1] not in inits for n in g.node):
        out.add("BitShift amount")
    if _ov_attention(g):
        out.add("OpenVINO attention")
    if any(n.op_type in ("Cast", "CastLike") for n in g.node):
        ins = {v.type.tensor_type.elem_type for v in g.input}
        outs = {v.type.tensor_type.elem_type for v in g.output}
        if (ins | outs) & _NARROW or outs & {onnx.TensorProto.FLOAT8E8M0}:
            out.add("narrow types")
    return out


def _ov_attention(g) -> bool:
    """runtime_module/backends/ov_attention.py's rules, on the case's graph as written."""
    from types import SimpleNamespace

    from provmap.runtime_module.backends import ov_attention as ova

    elem = {v.name: v.type.tensor_type.elem_type for v in g.input}
    view = SimpleNamespace(initializers={t.name: t for t in g.initializer}, nodes=list(g.node),
                           dtype=lambda x: "bfloat16" if elem.get(x) == onnx.TensorProto.BFLOAT16
                           else None)
    infinite = ova.infinite_tensors(view)
    return any(ova.wrong_attention(n, view) or ova.wrong_reduction(n, infinite) for n in g.node)


_NARROW = {getattr(onnx.TensorProto, t) for t in (
    "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "INT4", "UINT4",
    "FLOAT4E2M1", "INT2", "UINT2")}


def _kinds(model_bytes) -> set[str]:
    m = onnx.ModelProto.FromString(model_bytes)
    vals = list(m.graph.input) + list(m.graph.output)
    seq = any(v.type.WhichOneof("value") != "tensor_type" for v in vals)
    return ({"sequence/optional"} if seq else set()) | (
        {"float64"} if not seq and any(v.type.tensor_type.elem_type == onnx.TensorProto.DOUBLE
                                       for v in vals) else set()) | (
        {"control flow"} if any(n.op_type in ("If", "Loop", "Scan") for n in m.graph.node)
        else set()) | _wrong_kinds(m.graph)


def test_exception_regexes_match_exactly_the_cases_they_describe():
    """Each EXCEPTIONS entry is about a kind of model; its regex must match exactly those."""
    kinds = {n: _kinds(c[0]) for n, c in conf._cases().items()}
    for pat, reason in conf.EXCEPTIONS.items():
        kind = next(k for k in ("float64", "sequence/optional", "control flow", "TopK ties",
                                "SpaceToDepth CRD", "cubic exclude_outside",
                                "IsInf detect flags", "narrow types",
                                "OpenVINO attention", "BitShift amount") if k in reason)
        matched = {n for n in kinds if re.fullmatch(pat, n)}
        assert matched == {n for n, k in kinds.items() if kind in k}, reason


def test_exceptions_never_excuse_other_pipelines():
    assert conf.exception_for("test_cumsum_1d", "provmap-openvino")
    assert conf.exception_for("test_cumsum_1d", "provmap-tvm") is None
    assert conf.exception_for("test_sequence_insert_at_back", "provmap-ort")
    assert conf.exception_for("test_abs", "provmap-ort") is None
    assert conf.exception_for("test_if", "provmap-map")
    assert conf.exception_for("test_if", "provmap-ort") is None


def test_compare_follows_onnx_runner():
    f = np.array([1.0, np.nan], np.float32)
    conf.compare([f], [f.copy()], 1e-3, 1e-7)  # NaN equals NaN
    conf.compare([f], [f * (1 + 5e-4)], 1e-3, 1e-7)
    s = np.array(["a", "b"], dtype=object)
    conf.compare([s, [f]], [s.copy(), [f]], 1e-3, 1e-7)
    for bad, msg in [([f * 1.01], "values differ"), ([f.astype(np.float64)], "dtype"),
                     ([f[:1]], "shape"), ([f, f], "2 outputs"), ([[f]], "list")]:
        with pytest.raises(conf.Mismatch, match=msg):
            conf.compare([f], bad, 1e-3, 1e-7)
    with pytest.raises(conf.Mismatch, match="strings differ"):
        conf.compare([s], [np.array(["a", "c"], dtype=object)], 1e-3, 1e-7)


def test_worker_crash_and_hang_are_isolated():
    r = conf.run_many([("test_abs", "_abort"), ("test_abs", "_hang"), ("test_abs", "ort")],
                      jobs=2, timeout=5)
    assert r[("test_abs", "_abort")]["status"] == "crash"
    assert "SIGABRT" in r[("test_abs", "_abort")]["message"]
    assert r[("test_abs", "_hang")]["status"] == "timeout"
    assert r[("test_abs", "ort")]["status"] == "pass"


def test_summary_groups_reasons_and_counts_wrong_numbers():
    ok = {"status": "pass", "message": ""}
    res = {f"test_x{i}": {"ort": ok, "provmap-ort": {
        "status": "error", "message": f"test_x{i}: ONNX node #{i} 'n{i}' (Foo): unsupported"}}
        for i in range(3)}
    res["test_y"] = {"ort": ok, "provmap-ort": {"status": "fail", "message": "output 0: values"}}
    res["test_sequence_insert_at_back"] = {"ort": ok, "provmap-ort": res["test_x0"]["provmap-ort"]}
    b = conf.summarize(res)["behind"]["provmap-ort"]
    assert b["count"] == 4 and b["wrong_numbers"] == ["test_y"]
    assert b["excused"] == ["test_sequence_insert_at_back"]
    assert list(b["groups"].values())[0] == ["test_x0", "test_x1", "test_x2"]


@pytest.mark.conformance
def test_full_conformance(request, tmp_path):
    """The whole collection; the report is in the failure message."""
    if "conformance" not in (request.config.getoption("markexpr") or ""):
        # A command-line -m replaces the default "not conformance": `-m "not slow"` must not
        # start a 25-minute run.
        pytest.skip("the full conformance run only runs when -m names it (-m conformance)")
    names = conf.select_cases()
    flat = conf.run_many([(n, p) for n in names for p in conf.PIPELINES], jobs=2, timeout=60)
    results = {n: {p: flat[(n, p)] for p in conf.PIPELINES} for n in names}
    summary = conf.summarize(results)
    md = conf.markdown(summary, results, {"cases": len(names), "onnx": onnx.__version__})
    (tmp_path / "conformance.md").write_text(md)
    behind = {p: b["count"] for p, b in summary["behind"].items() if b["count"]}
    assert not behind, f"provmap falls behind its plain library: {behind}\n\n{md}"
