"""single:/greedy: strategies and plan validation (no search involved)."""

import numpy as np
import onnxruntime as ort
import pytest
import unsupported_models as um

from provmap.partition.compile import compile_model, load_view, make_plan
from provmap.partition.strategy import parse_strategy
from provmap.provenance.util.errors import ProvmapError
from provmap.runtime_module.module import load
from provmap.runtime_module.plan import PartitionSpec, Plan, order_plan


def test_parse_strategy_errors():
    for text, kind, names in (("single:tvm", "single", ["tvm"]),
                              ("greedy:openvino,tvm", "greedy", ["openvino", "tvm"])):
        s = parse_strategy(text)
        assert (s.kind, s.names, str(s)) == (kind, names, text)
    for bad in ("single:", "single:a,b", "greedy:", "greedy:tvm,tvm", "fastest"):
        with pytest.raises(ProvmapError):
            parse_strategy(bad)


def test_single_refuses_naming_the_node(transformer_view):
    with pytest.raises(ProvmapError, match=r"ONNX node #\d+ 'attn/Softmax' \(Softmax\) is not "
                                           r"supported by tvm: Softmax is excluded"):
        make_plan(transformer_view, parse_strategy("single:tvm"),
                  {"tvm": {"exclude_ops": "Softmax"}})


def test_greedy_keeps_a_lacking_op_in_one_small_partition(transformer_view):
    plan, _ = make_plan(transformer_view, parse_strategy("greedy:tvm,onnxruntime"),
                        {"tvm": {"exclude_ops": "Softmax"}})
    plan = order_plan(transformer_view, plan)
    # The V projection is independent of the softmax: greedy finishes it on TVM first, so the
    # model becomes exactly three partitions, the middle one the softmax alone.
    assert [p.backend for p in plan.partitions] == ["tvm", "onnxruntime", "tvm"]
    assert [transformer_view.nodes[i].op_type for i in plan.partitions[1].ops] == ["Softmax"]
    assert any("Softmax is excluded" in f for f in plan.info["fallbacks"])


def test_greedy_with_no_capable_backend_is_an_error(transformer_view):
    with pytest.raises(ProvmapError, match="no listed backend supports"):
        make_plan(transformer_view, parse_strategy("greedy:tvm"),
                  {"tvm": {"exclude_ops": "Softmax"}})


def test_plan_validation_names_the_problem(transformer_view):
    ops = transformer_view.op_nodes
    with pytest.raises(ProvmapError, match="is in no partition"):
        order_plan(transformer_view, Plan("m", [PartitionSpec("tvm", ops[:-1])]))
    with pytest.raises(ProvmapError, match="is in two partitions"):
        order_plan(transformer_view,
                   Plan("m", [PartitionSpec("tvm", ops), PartitionSpec("tvm", ops[:1])]))
    # Nodes 0 and 2 of a chain in one partition, node 1 in another: data leaves and re-enters.
    a, b = [ops[0], ops[2]] + ops[3:], [ops[1]]
    chain = transformer_view.op_successors(ops[0])
    assert ops[1] in chain
    with pytest.raises(ProvmapError, match="cycle"):
        order_plan(transformer_view,
                   Plan("m", [PartitionSpec("tvm", a), PartitionSpec("onnxruntime", b)]))


def test_greedy_splits_around_an_op_openvino_lacks(tmp_path):
    """MaxUnpool has no OpenVINO conversion rule: greedy puts it on the next backend."""
    model = um.maxunpool_model()
    view = load_view(model, "maxunpool")
    art = compile_model(view, "greedy:openvino,onnxruntime", out=tmp_path / "u.provmap")
    parts = art.manifest["partitions"]
    assert [p["backend"] for p in parts] == ["openvino", "onnxruntime", "openvino"]
    names = {n.id: n.name for n in art.provenance_map().nodes}
    assert [names[i] for i in parts[1]["ops"]] == [um.MAXUNPOOL_NODE]
    mod = load(tmp_path / "u.provmap")
    x = np.random.default_rng(0).standard_normal((1, 2, 4, 4)).astype(np.float32)
    ref = ort.InferenceSession(model.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(mod.run({"x": x})["y"], ref, rtol=1e-5, atol=1e-6)
    assert mod.lookup.backend_of(um.MAXUNPOOL_NODE) == ["onnxruntime"]
