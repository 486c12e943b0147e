"""Where provmap's import lets TVM take a model plain TVM refuses, TVM's numbers are ONNX Runtime's
(issue 32).  provmap gets past what stops plain TVM (initializers that are also graph inputs, a
shape held as a Relax shape, ...) and so reached converters whose bugs plain TVM never showed:
SequenceInsert at a negative position returned the wrong element, Expand by a run-time shape
with a 1 in it returned a smaller tensor (provmap.provenance.converters replaces both).

Every check runs the model through ONNX Runtime and provmap single:tvm or `map`'s all-TVM build
and compares as onnx's runner does (rtol 1e-3, atol 1e-7); a refusal must be a clean one."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from provmap.bench import conformance as conf
from provmap.partition.compile import compile_model
from provmap.provenance.build import compile_tvm
from provmap.provenance.importer import import_onnx
from provmap.runtime_module.module import load


def _ort(model, feeds):
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def _tvm(tmp_path, model, feeds):
    compile_model(model, "single:tvm", out=tmp_path / "t.provmap")
    out = load(tmp_path / "t.provmap").run(feeds)
    return [out[o.name] for o in model.graph.output]


def _all_tvm(model, feeds):
    """`provmap map`'s build, run (conformance's provmap-map pipeline)."""
    imp = import_onnx(model)
    assert imp.opaque == {}
    names = [i.name for i in imp.model.graph.input if i.name in feeds]
    return conf._run_vm(compile_tvm(imp).executable, [feeds[n] for n in names],
                        len(model.graph.output))


def sequence_model(erase: int, insert: int, at: int) -> onnx.ModelProto:
    """SequenceConstruct(X, Y, Z) -> SequenceErase(erase) -> SequenceInsert(X, insert) ->
    SequenceAt(at), the positions initializers that are also graph inputs (IR < 4 style, as in
    onnx's test_sequence_model3; plain TVM's import stops at them)."""
    nodes = [helper.make_node("SequenceConstruct", ["X", "Y", "Z"], ["s"], name="construct"),
             helper.make_node("SequenceErase", ["s", "pe"], ["s2"], name="erase"),
             helper.make_node("SequenceInsert", ["s2", "X", "pi"], ["s3"], name="insert"),
             helper.make_node("SequenceAt", ["s3", "pa"], ["out"], name="at")]
    pos = {"pe": erase, "pi": insert, "pa": at}
    inits = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in pos.items()]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in "XYZ"]
    inputs += [helper.make_tensor_value_info(k, TensorProto.INT64, []) for k in pos]
    g = helper.make_graph(nodes, "seq", inputs,
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 3])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


SEQ_FEEDS = {"X": np.full((2, 3), 1.0, np.float32), "Y": np.zeros((2, 3), np.float32),
             "Z": np.full((2, 3), 2.0, np.float32)}


def test_issue_sequence_model_returns_z_like_onnx_runtime(tmp_path):
    """The issue's graph: [X, Y, Z] -> erase -3 -> [Y, Z] -> insert X at -1 -> [Y, X, Z] -> Z
    (TVM's own SequenceInsert appended X and returned it: 1.0 where ORT gives 2.0)."""
    model = sequence_model(-3, -1, -1)
    want = _ort(model, SEQ_FEEDS)
    assert want[0][0, 0] == 2.0
    for got in (_tvm(tmp_path, model, SEQ_FEEDS), _all_tvm(model, SEQ_FEEDS)):
        conf.compare(want, got, rtol=1e-3, atol=1e-7)


# Every insert position of a 2-element sequence ([-2, 2]) and a negative erase and read.
@pytest.mark.parametrize("erase,insert,at", [(-1, -2, 0), (0, -2, -3), (-2, 0, -1), (1, 2, -1),
                                             (2, 1, 1), (-3, -1, -2)])
def test_sequence_positions_match_onnx_runtime(tmp_path, erase, insert, at):
    model = sequence_model(erase, insert, at)
    conf.compare(_ort(model, SEQ_FEEDS), _tvm(tmp_path, model, SEQ_FEEDS), rtol=1e-3,
                 atol=1e-7)


def expand_model(data_shape, shape_len) -> onnx.ModelProto:
    g = helper.make_graph(
        [helper.make_node("Expand", ["X", "shape"], ["Y"], name="expand")], "expand",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, data_shape),
         helper.make_tensor_value_info("shape", TensorProto.INT64, [shape_len])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


# (input shape, run-time shape): a 1 in the shape keeps the input's dimension; a shape shorter
# than the input broadcasts from the right (plain TVM's import failed on it).
@pytest.mark.parametrize("data_shape,shape", [
    ([1, 3, 1], [3, 1, 3]), ([3, 1], [2, 1, 6]), ([3, 1], [3]), ([2, 3, 4], [1, 1]),
    ([1], [2, 3]), ([4, 1, 2], [4, 5, 1])])
def test_expand_by_a_run_time_shape_matches_onnx_runtime(tmp_path, data_shape, shape):
    model = expand_model(data_shape, len(shape))
    feeds = {"X": np.arange(np.prod(data_shape), dtype=np.float32).reshape(data_shape),
             "shape": np.array(shape, np.int64)}
    want = _ort(model, feeds)
    conf.compare(want, _tvm(tmp_path, model, feeds), rtol=1e-3, atol=1e-7)
    conf.compare(want, _all_tvm(model, feeds), rtol=1e-3, atol=1e-7)


def _model_cases() -> dict:
    from onnx.backend.test.case.model import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {c.name: c for c in collect_testcases()
                if c.name.startswith(("test_sequence_model", "test_expand_shape_model"))}


# onnx's own model cases of these ops, and its node cases of Expand: each passes through provmap's
# TVM pipelines or is refused cleanly ("error"), never wrong ("fail").  Before: test_sequence_model3
# wrong, test_expand_shape_model3/4 failing at run time, test_expand_dim_changed too.
MODEL_CASES = [f"test_sequence_model{i}" for i in range(1, 9)] + \
              [f"test_expand_shape_model{i}" for i in range(1, 5)]
NODE_CASES = ["test_expand_dim_changed", "test_expand_dim_unchanged"]
#: What stays refused, and why (a clean ProvmapError).
REFUSED = {"test_sequence_model8": "SplitToSequence by a run-time split: TVM's converter "
                                   "needs a constant; its input shape is symbolic too"}


@pytest.mark.parametrize("pipeline", ["provmap-tvm", "provmap-map"])
@pytest.mark.parametrize("case", MODEL_CASES + NODE_CASES)
def test_onnx_cases_of_these_ops_are_right_or_refused(case, pipeline):
    if case in NODE_CASES:
        res = conf.run_case(case, pipeline)
    else:
        c = _model_cases()[case]
        payload = (c.model.SerializeToString(),
                   [([conf._norm(x) for x in ins], [conf._norm(x) for x in outs])
                    for ins, outs in c.data_sets], c.rtol, c.atol)
        res = conf._execute(case, payload, pipeline)
    want = "error" if case in REFUSED else "pass"
    assert res["status"] == want, res


def _one_op(op, n_inputs, **attrs):
    names = ["x", "z"][:n_inputs]
    inits = []
    ins = names
    if op.startswith("Reduce"):
        inits = [numpy_helper.from_array(np.array([1], np.int64), "ax")]
        ins = names + ["ax"]
    g = helper.make_graph([helper.make_node(op, ins, ["y"], **attrs)], op,
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3])
                           for n in names],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)


INF_X = np.array([[-np.inf, -np.inf, -np.inf], [1, np.inf, 2]], np.float32)
INF_Z = np.array([[np.inf, np.inf, np.inf], [np.finfo(np.float32).min, -np.inf, 2]], np.float32)


@pytest.mark.parametrize("op,n,attrs", [("ReduceMax", 1, {"keepdims": 0}),
                                        ("ReduceMin", 1, {"keepdims": 1}),
                                        ("Max", 2, {}), ("Min", 2, {}), ("Max", 1, {})])
def test_max_and_min_keep_infinities(tmp_path, op, n, attrs):
    """TVM's max/min reductions start from the largest finite value: a row of -inf only came
    out -3.4e38 (plain TVM too).  A row holding the finite bound itself stays the bound."""
    model = _one_op(op, n, **attrs)
    for x in (INF_X, INF_Z):
        feeds = dict(zip(["x", "z"], [x, INF_Z if x is INF_X else INF_X][:n]))
        want = _ort(model, feeds)
        conf.compare(want, _tvm(tmp_path, model, feeds), rtol=1e-3, atol=1e-7)
        conf.compare(want, _all_tvm(model, feeds), rtol=1e-3, atol=1e-7)


#: onnx's attention cases written out as functions (plain TVM refuses them at a shape input):
#: a fully masked row's ReduceMax was -3.4e38, and the output NaN where ONNX Runtime's is not.
ATTENTION_CASES = ["test_attention_causal_boolmask_nan_robustness_expanded",
                   "test_attention_23_fullymasked_qk_matmul_output_mode3_zero_expanded"]


@pytest.mark.parametrize("case", ATTENTION_CASES)
def test_fully_masked_attention_rows_match_onnx(case):
    assert conf.run_case(case, "provmap-tvm")["status"] == "pass"
