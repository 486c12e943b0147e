"""The shortest-path search with a mock price table (the cases TVM's Collage tests covered)."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from provmap.partition.candidate import Candidate, Estimate
from provmap.partition.compile import load_view
from provmap.partition.search import coalesce, search
from provmap.provenance.util.errors import ProvmapError
from provmap.runtime_module.plan import order_plan
from provmap.runtime_module.subgraph import Subgraph


def _model(nodes, inputs, outputs):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 8])
                                       for n in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                           for n, s in outputs])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(m, full_check=True)
    return m


def chain(n):
    nodes, prev = [], "x"
    for k in range(n):
        nodes.append(helper.make_node("Relu" if k % 2 == 0 else "Neg", [prev], [f"t{k}"], name=f"n{k}"))
        prev = f"t{k}"
    return _model(nodes, ["x"], [(prev, [1, 8])])


def diamond():
    return _model([helper.make_node("Relu", ["x"], ["a"], name="a"),
                   helper.make_node("Neg", ["a"], ["b"], name="b"),
                   helper.make_node("Exp", ["a"], ["c"], name="c"),
                   helper.make_node("Add", ["b", "c"], ["d"], name="d")], ["x"], [("d", [1, 8])])


def ids(view, *names):
    by = {n.name: i for i, n in enumerate(view.nodes)}
    return frozenset(by[x] for x in names)


def pricer(table, default=None):
    calls = []

    def price(c):
        calls.append(c)
        s = table.get((c.backend, c.ops), default)
        return Estimate(s) if s is not None else Estimate(None, "no price")
    price.calls = calls
    return price


def backends_of(view, res):
    return {view.nodes[i].name: p.backend for p in res.plan.partitions for i in p.ops}


def test_single_op_stays_or_is_offloaded_by_cost():
    v = load_view(chain(1), "one")
    only = ids(v, "n0")
    cands = [Candidate("tvm", only, "single"), Candidate("ort", only, "single")]
    assert backends_of(v, search(v, cands, pricer({("tvm", only): 2.0, ("ort", only): 1.0}))) == {"n0": "ort"}
    assert backends_of(v, search(v, cands, pricer({("tvm", only): 0.5, ("ort", only): 1.0}))) == {"n0": "tvm"}


def test_fusion_benefit_five_op_partition_beats_cheaper_single_ops():
    v = load_view(chain(5), "chain5")
    names = [f"n{k}" for k in range(5)]
    table, cands = {}, []
    for nm in names:  # each op alone is cheaper on ort...
        cands += [Candidate("ort", ids(v, nm)), Candidate("tvm", ids(v, nm))]
        table[("ort", ids(v, nm))] = 1.0
        table[("tvm", ids(v, nm))] = 1.5
    whole = ids(v, *names)  # ...but tvm fuses all five into one kernel
    cands.append(Candidate("tvm", whole, "combine"))
    table[("tvm", whole)] = 4.0
    res = search(v, cands, pricer(table))
    assert [p.backend for p in res.plan.partitions] == ["tvm"] and res.estimated_s == 4.0


def test_diamond_chooses_cheapest_cover_and_stays_acyclic():
    v = load_view(diamond(), "diamond")
    a, b, c, d = (ids(v, x) for x in "abcd")
    # {a, b, d} is cheap but not convex (a -> c -> d leaves and re-enters it): never chosen.
    table = {("ort", a): 1, ("ort", b): 1, ("ort", c): 5, ("ort", d): 1,
             ("tvm", c): 2, ("tvm", a | b | d): 0.5, ("tvm", a | b | c | d): 6}
    cands = [Candidate(bk, ops) for bk, ops in table]
    res = search(v, cands, pricer(table))
    got = backends_of(v, res)
    assert got == {"a": "ort", "b": "ort", "c": "tvm", "d": "ort"}  # 1+1+2+1 = 5 < 6
    assert res.invalid.get("not convex")
    order_plan(v, res.plan)  # valid and acyclic


def test_crossing_cost_changes_the_answer():
    v = load_view(chain(3), "chain3")
    n0, n1, n2 = (ids(v, f"n{k}") for k in range(3))
    table = {("ort", n0): 1.0, ("ort", n1): 1.0, ("ort", n2): 1.0, ("tvm", n1): 0.7}
    cands = [Candidate(bk, ops) for bk, ops in table]
    assert backends_of(v, search(v, cands, pricer(table)))["n1"] == "tvm"
    res = search(v, cands, pricer(table), crossing=lambda nbytes, s, d: 0.2)
    assert backends_of(v, res)["n1"] == "ort"  # 0.3 saved < 2 x 0.2 crossing
    res = search(v, cands, pricer(table), crossing=lambda nbytes, s, d: 0.1)
    assert backends_of(v, res)["n1"] == "tvm" and res.crossing_s == pytest.approx(0.2)


def test_multi_output_partition_and_intermediate_tuple():
    """Split makes a tuple in Relax; a partition may end on it with two exits."""
    sizes = onnx.numpy_helper.from_array(np.array([4, 4], np.int64))
    m = _model([helper.make_node("Relu", ["x"], ["r"], name="r"),
                helper.make_node("Constant", [], ["sizes"], name="sizes", value=sizes),
                helper.make_node("Split", ["r", "sizes"], ["s0", "s1"], name="split", axis=1),
                helper.make_node("Exp", ["s0"], ["e"], name="e"),
                helper.make_node("Neg", ["s1"], ["g"], name="g")], ["x"], [("e", [1, 4]), ("g", [1, 4])])
    v = load_view(m, "split")
    rs = ids(v, "r", "split")
    table = {("tvm", rs): 1.0, ("ort", ids(v, "e")): 1.0, ("ort", ids(v, "g")): 1.0,
             ("ort", rs): 5.0}
    res = search(v, [Candidate(b, o) for b, o in table], pricer(table))
    plan = order_plan(v, res.plan)
    first = Subgraph(v, plan.partitions[0].ops)
    assert plan.partitions[0].backend == "tvm" and len(first.outputs) == 2


def test_double_residual_without_cycles():
    m = _model([helper.make_node("Relu", ["x"], ["f"], name="f"),
                helper.make_node("Add", ["f", "x"], ["a1"], name="a1"),
                helper.make_node("Neg", ["a1"], ["g"], name="g"),
                helper.make_node("Add", ["g", "a1"], ["a2"], name="a2")], ["x"], [("a2", [1, 8])])
    v = load_view(m, "residual")
    f, a1, g, a2 = (ids(v, x) for x in ("f", "a1", "g", "a2"))
    table = {("ort", f): 1, ("ort", a1): 1, ("ort", g): 1, ("ort", a2): 1,
             ("tvm", f | a1): 1.5, ("tvm", g | a2): 1.5, ("tvm", f | a1 | g | a2): 2.5}
    res = search(v, [Candidate(b, o) for b, o in table], pricer(table))
    assert [p.backend for p in res.plan.partitions] == ["tvm"]
    order_plan(v, res.plan)


def test_invalid_candidates_are_skipped_and_reported():
    v = load_view(chain(2), "chain2")
    n0, n1 = ids(v, "n0"), ids(v, "n1")
    table = {("ort", n0): 1.0, ("ort", n1): 1.0}
    cands = [Candidate("ort", n0), Candidate("ort", n1), Candidate("tvm", n0 | n1)]
    res = search(v, cands, pricer(table))  # the tvm candidate has no price: invalid
    assert [p.backend for p in res.plan.partitions] == ["ort", "ort"]
    assert res.invalid == {"no price": 1}
    with pytest.raises(ProvmapError, match="no candidate covers"):
        search(v, [Candidate("ort", n0)], pricer(table))


def test_coalesce_merges_adjacent_same_backend_partitions_only_without_cycles():
    v = load_view(diamond(), "diamond")
    a, b, c, d = (ids(v, x) for x in "abcd")
    table = {("ort", a): 1, ("ort", b): 1, ("tvm", c): 1, ("ort", d): 1}
    res = search(v, [Candidate(bk, o) for bk, o in table], pricer(table))
    merged = coalesce(v, res.plan)
    # a+b can merge; d cannot join them (a -> c(tvm) -> d would re-enter the partition).
    got = sorted((p.backend, sorted(v.nodes[i].name for i in p.ops)) for p in merged.partitions)
    assert got == [("ort", ["a", "b"]), ("ort", ["d"]), ("tvm", ["c"])]
    order_plan(v, merged)


def test_pruning_bounds_the_number_of_estimates_without_changing_the_answer():
    """Nodes only one backend can take need no cut inside them: pruning drops those candidates,
    so fewer are priced, and the cheapest cover is the same."""
    from provmap.partition.generate import generate
    from provmap.partition.prune import prune
    from provmap.partition.measure.cost import MockEstimator
    from provmap.runtime_module.backend import Support

    v = load_view(chain(10), "chain10")
    ops = v.op_nodes
    verdicts = {"ort": {i: Support(True) for i in ops},
                "acc": {i: Support(k >= 5) for k, i in enumerate(ops)}}  # accelerator: 2nd half
    cands = generate(v, verdicts, max_depth=4, max_size=6)
    kept, report = prune(v, cands)
    assert report.after < report.before

    def cost(view, c):  # the accelerator is twice as fast per op, plus a fixed call cost
        return 0.1 + len(c.ops) * (0.5 if c.backend == "acc" else 1.0)

    full, pruned = MockEstimator(cost), MockEstimator(cost)
    r_full = search(v, cands, lambda c: full.estimate(v, c))
    r_pruned = search(v, kept, lambda c: pruned.estimate(v, c))
    assert r_pruned.estimated_s == pytest.approx(r_full.estimated_s)
    assert len(pruned.calls) < len(full.calls)


def test_a_switch_is_paid_once_per_change_of_backend_not_per_tensor():
    """The switch cost (a neighbour's threads, our own waking up) is paid once where a path
    changes backend, on top of the per-tensor crossings; with it the search keeps a plan whole
    that isolated prices alone would split."""
    v = load_view(chain(3), "chain3")
    n0, n1, n2 = (ids(v, f"n{k}") for k in range(3))
    table = {("ort", n0): 1.0, ("ort", n1): 1.0, ("ort", n2): 1.0, ("tvm", n1): 0.7}
    cands = [Candidate(bk, ops) for bk, ops in table]
    seen = []

    def switch(a, b):
        seen.append((a, b))
        return 0.2

    res = search(v, cands, pricer(table), switch=switch)
    assert backends_of(v, res)["n1"] == "ort"  # 0.3 saved < two switches of 0.2
    assert ("ort", "tvm") in seen and ("tvm", "ort") in seen
    res = search(v, cands, pricer(table), switch=lambda a, b: 0.1,
                 crossing=lambda nbytes, s, d: 0.0)
    assert backends_of(v, res)["n1"] == "tvm"
    assert res.switch_s == pytest.approx(0.2) and res.crossing_s == pytest.approx(0.2)
    assert res.plan.info["switch_ms"] == pytest.approx(200.0)
