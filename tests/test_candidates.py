"""Candidate generation (provmap.partition.rules / provmap.partition.generate), pruning and user constraints.

Small hand-built graphs; no backend library is needed (verdicts are made up here).
"""

from __future__ import annotations

import itertools
import re
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from provmap.partition.candidate import Candidate
from provmap.partition.opgraph import facts, mask_of, reachability, validate
from provmap.partition.generate import generate
from provmap.partition.prune import prune
from provmap.partition.compile import load_view
from provmap.partition.constraints import allows, check, filter_candidates, parse_constraints
from provmap.partition.rules import candidates_for_backend
from provmap.provenance.bundled import zoo
from provmap.provenance.util.errors import ProvmapError
from provmap.runtime_module.backend import Support
from provmap.runtime_module.subgraph import Subgraph

SHAPE = [1, 8]
BACKENDS = ["tvm", "onnxruntime", "openvino"]


# -- builders ------------------------------------------------------------------------------------

def _t(name, shape=SHAPE):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "g", [_t(i) if isinstance(i, str) else i for i in inputs],
                          [_t(o) if isinstance(o, str) else o for o in outputs],
                          initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(m, full_check=True)
    return m


def _unary(op, x, y, name):
    return helper.make_node(op, [x], [y], name=name)


def chain_model(n=7):
    """x -> n0 -> n1 -> ... -> n{n-1} (alternating Relu / Sigmoid)."""
    nodes, prev = [], "x"
    for k in range(n):
        nodes.append(_unary("Relu" if k % 2 == 0 else "Sigmoid", prev, f"t{k}", f"n{k}"))
        prev = f"t{k}"
    return _model(nodes, ["x"], [prev])


def diamond_model():
    """a -> b, a -> c, (b, c) -> d."""
    return _model([_unary("Relu", "x", "ta", "a"), _unary("Sigmoid", "ta", "tb", "b"),
                   _unary("Tanh", "ta", "tc", "c"),
                   helper.make_node("Add", ["tb", "tc"], ["y"], name="d")], ["x"], ["y"])


def multi_output_model():
    """s = Split(x) into two halves; u = Relu(s0); w = Sigmoid(s1); z = u + w; also s0 out."""
    half = [1, 4]
    return _model([helper.make_node("Split", ["x"], ["s0", "s1"], name="s", axis=1),
                   _unary("Relu", "s0", "u", "u"), _unary("Sigmoid", "s1", "w", "w"),
                   helper.make_node("Add", ["u", "w"], ["z"], name="z")],
                  ["x"], [_t("z", half), _t("s0", half)])


def double_residual_model():
    """p -> f -> add1(f, p) -> g -> add2(g, add1): two residual connections in a row."""
    return _model([_unary("Relu", "x", "p", "p"), _unary("Sigmoid", "p", "f", "f"),
                   helper.make_node("Add", ["f", "p"], ["a1"], name="add1"),
                   _unary("Tanh", "a1", "g", "g"),
                   helper.make_node("Add", ["g", "a1"], ["y"], name="add2")], ["x"], ["y"])


def fanout_model(k=5):
    """h = Relu(x) read by k Neg nodes, each a graph output."""
    return _model([_unary("Relu", "x", "h", "h")]
                  + [_unary("Neg", "h", f"c{j}", f"c{j}") for j in range(k)],
                  ["x"], [f"c{j}" for j in range(k)])


def fanin_model(k=4):
    """k independent inputs, each through a Relu, then Sum of all."""
    return _model([_unary("Relu", f"x{j}", f"r{j}", f"r{j}") for j in range(k)]
                  + [helper.make_node("Sum", [f"r{j}" for j in range(k)], ["y"], name="sum")],
                  [f"x{j}" for j in range(k)], ["y"])


def named_model():
    """conv-ish chain with a Constant helper: layer1/relu -> layer1/add(const) -> layer2/exp."""
    c = numpy_helper.from_array(np.full(SHAPE, 0.5, np.float32))
    return _model([_unary("Relu", "x", "r", "layer1/relu"),
                   helper.make_node("Constant", [], ["k"], name="const_k", value=c),
                   helper.make_node("Add", ["r", "k"], ["a"], name="layer1/add"),
                   _unary("Exp", "a", "e", "layer2/exp"),
                   _unary("Neg", "e", "y", "layer2/neg")], ["x"], ["y"])


@pytest.fixture(scope="module")
def views():
    built = {"chain": chain_model(), "diamond": diamond_model(),
             "multi": multi_output_model(), "resid": double_residual_model(),
             "fanout": fanout_model(), "fanin": fanin_model(), "named": named_model()}
    return {k: load_view(m, k) for k, m in built.items()}


def idx(view, *names):
    by = {n.name: i for i, n in enumerate(view.nodes)}
    return frozenset(by[n] for n in names)


def all_ok(view):
    return {i: Support(True) for i in view.op_nodes}


def cands(view, backend="tvm", verdicts=None, **kw):
    return candidates_for_backend(view, backend, verdicts or all_ok(view), **kw)


def opsets(cs, rule=None):
    return {c.ops for c in cs if rule is None or rule in c.rule.split("+")}


# -- brute force references ----------------------------------------------------------------------

def brute_convex(view, ops):
    """No path from a member through a non-member back to a member (explicit DFS)."""
    for s in ops:
        stack = [j for j in view.op_successors(s) if j not in ops]
        seen = set(stack)
        while stack:
            x = stack.pop()
            for j in view.op_successors(x):
                if j in ops:
                    return False
                if j not in seen:
                    seen.add(j)
                    stack.append(j)
    return True


def brute_connected(view, ops):
    ops = set(ops)
    start = next(iter(ops))
    seen, stack = {start}, [start]
    while stack:
        x = stack.pop()
        nb = {j for j in view.op_successors(x)} | {p for p in ops if x in view.op_successors(p)}
        for j in nb & ops - seen:
            seen.add(j)
            stack.append(j)
    return seen == ops


def brute_depth(view, ops):
    memo = {}

    def longest(i):
        if i not in memo:
            memo[i] = 1 + max((longest(j) for j in view.op_successors(i) if j in ops), default=0)
        return memo[i]
    return max(longest(i) for i in ops)


def brute_combine(view, sup, max_depth, max_size, max_exits, max_entries):
    out = set()
    for r in range(2, min(max_size, len(sup)) + 1):
        for ops in itertools.combinations(sorted(sup), r):
            ops = frozenset(ops)
            if not (brute_connected(view, ops) and brute_convex(view, ops)):
                continue
            if brute_depth(view, ops) > max_depth:
                continue
            sub = Subgraph(view, ops)
            if len(sub.outputs) > max_exits or len(sub.inputs) > max_entries:
                continue
            out.add(ops)
    return out


# -- generation ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["chain", "diamond", "multi", "resid", "fanout", "fanin"])
@pytest.mark.parametrize("limits", [(4, 12, 4, 3), (2, 3, 2, 2), (3, 12, 1, 1)])
def test_combine_is_exactly_the_valid_sets(views, name, limits):
    view = views[name]
    max_depth, max_size, max_exits, max_entries = limits
    cs = cands(view, max_depth=max_depth, max_size=max_size, max_exits=max_exits,
               max_entries=max_entries)
    want = brute_combine(view, set(view.op_nodes), *limits)
    assert opsets(cs, "combine") == want
    g = facts(view)
    for c in cs:
        assert brute_convex(view, c.ops), c
        if c.rule != "whole-model":
            assert brute_connected(view, c.ops), c
        # The cheap boundary counts agree with the real Subgraph's.
        sub = Subgraph(view, c.ops)
        assert g.exit_count(mask_of(c.ops)) == len(sub.outputs)
        assert g.entry_count(mask_of(c.ops)) == len(sub.inputs)


def test_chain_rules_and_depth_on_each_side(views):
    view = views["chain"]
    n = [idx(view, f"n{k}") for k in range(7)]
    cs = cands(view, max_depth=3)
    assert opsets(cs, "single-op") == set(n)
    assert opsets(cs, "whole-model") == {frozenset(view.op_nodes)}
    assert opsets(cs, "maximal") == {frozenset(view.op_nodes)}
    combine = opsets(cs, "combine")
    assert all(len(ops) <= 3 for ops in combine)
    mid = next(iter(n[3]))
    around = [ops for ops in combine if mid in ops]
    # grown both ways from n3, but never more than 3 nodes deep
    assert n[1] | n[2] | n[3] in around and n[3] | n[4] | n[5] in around
    assert all(ops <= n[1] | n[2] | n[3] | n[4] | n[5] for ops in around)
    # a chain of 7 has 6 + 5 windows of 2 and 3 nodes
    assert len(combine) == 11
    # one candidate per (backend, ops); a rule string lists every proposer
    assert len({c.ops for c in cs}) == len(cs)
    whole = next(c for c in cs if c.ops == frozenset(view.op_nodes))
    assert whole.rule == "whole-model+maximal"


def test_diamond_rejects_the_nonconvex_set(views):
    view = views["diamond"]
    a, b, c, d = (idx(view, x) for x in "abcd")
    cs = opsets(cands(view))
    assert a | b | d not in cs and a | c | d not in cs     # path a -> c -> d leaves and re-enters
    assert validate(view, a | b | d) == "not convex (a path leaves it and re-enters)"
    assert a | b | c | d in cs and b | d in cs and a | b | c in cs
    assert a | d not in cs                                 # not even connected
    assert validate(view, a | d).startswith("not convex")
    assert validate(view, b | c) == "not connected"
    r = reachability(view)
    (ia,), (id_,) = a, d
    assert r[ia] == mask_of(b | c | d) and r[id_] == 0


def test_multi_output_node_exits_and_taps(views):
    view = views["multi"]
    s, u, w, z = (idx(view, x) for x in "suwz")
    g = facts(view)
    # {s, u}: s1 leaves to w, u leaves to z, s0 is a graph output read inside (a tap)
    exits, taps = g.boundary(mask_of(s | u))
    assert sorted(exits) == ["s0", "s1", "u"] and taps == ["s0"]
    assert g.exit_count(mask_of(s | u | w | z)) == 2      # z and the graph output s0
    cs = opsets(cands(view, max_exits=2))
    assert s | u not in cs and s | u | w | z in cs and s | w in cs


def test_max_exits_and_entries_are_respected(views):
    view = views["fanout"]
    g = facts(view)
    h = idx(view, "h")
    c = [idx(view, f"c{j}") for j in range(5)]
    for max_exits in (1, 2, 4):
        cs = cands(view, max_exits=max_exits)
        for cand in cs:
            if cand.rule.split("+")[0] in ("combine", "fusion-pattern"):
                assert g.exit_count(mask_of(cand.ops)) <= max_exits
        combine = opsets(cs, "combine")
        # h + j consumers: h's output still leaves unless all 5 are in -> j + 1 exits
        assert (h | c[0] | c[1] | c[2] in combine) == (max_exits >= 4)
        assert (h | c[0] in combine) == (max_exits >= 2)
    # the whole model (5 exits) is still proposed, by whole-model/maximal only
    assert frozenset(view.op_nodes) in opsets(cands(view, max_exits=1))
    # Sum of four Relu branches: every set holding the Sum reads four tensors from outside
    # (the x's it absorbed, the r's it did not), so max_entries=3 leaves no "combine" at all.
    fan = views["fanin"]
    r = [idx(fan, f"r{j}") for j in range(4)]
    total = idx(fan, "sum")
    assert not opsets(cands(fan, max_entries=3), "combine")
    combine = opsets(cands(fan, max_entries=4), "combine")
    assert r[0] | total in combine and r[0] | r[1] | r[2] | r[3] | total in combine


def test_double_residual_candidates_are_acyclic(views):
    view = views["resid"]
    p, f, a1, g_, a2 = (idx(view, x) for x in ("p", "f", "add1", "g", "add2"))
    cs = opsets(cands(view))
    assert p | a1 not in cs and a1 | a2 not in cs         # each skips a branch: not convex
    assert p | f | a1 in cs and a1 | g_ | a2 in cs and f | a1 | g_ in cs
    assert p | f | a1 | g_ | a2 in cs
    # every candidate can run as one call: cutting it out leaves an acyclic two-level plan
    for ops in cs:
        assert brute_convex(view, ops)


def test_maximal_regions_follow_support(views):
    view = views["chain"]
    n = [next(iter(idx(view, f"n{k}"))) for k in range(7)]
    ver = {i: Support(i not in (n[2], n[5]), "no") for i in view.op_nodes}
    cs = cands(view, verdicts=ver)
    assert opsets(cs, "maximal") == {frozenset(n[0:2]), frozenset(n[3:5]), frozenset(n[6:])}
    assert not opsets(cs, "whole-model")
    assert all(n[2] not in c.ops and n[5] not in c.ops for c in cs)
    # Maximal regions are convex even when an unsupported node sits on a side path.
    view = views["diamond"]
    a, b, c, d = (next(iter(idx(view, x))) for x in "abcd")
    cs = cands(view, verdicts={a: Support(True), b: Support(True), c: Support(False, "no"),
                               d: Support(True)})
    for ops in opsets(cs, "maximal"):
        assert brute_convex(view, ops)
    assert frozenset({a, b, d}) not in opsets(cs)


def test_fusion_pattern_chain_beyond_max_depth():
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    scale, bias, mean, var = (numpy_helper.from_array(v.astype(np.float32), n) for v, n in
                              ((np.ones(4), "sc"), (np.zeros(4), "bi"), (np.zeros(4), "me"),
                               (np.ones(4), "va")))
    m = _model([helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
                helper.make_node("BatchNormalization", ["c", "sc", "bi", "me", "va"], ["b"],
                                 name="bn"),
                helper.make_node("Add", ["b", "r"], ["s"], name="add"),
                _unary("Relu", "s", "y", "relu"),
                _unary("Exp", "y", "z", "exp")],
               [_t("x", [1, 3, 8, 8]), _t("r", [1, 4, 8, 8])], [_t("z", [1, 4, 8, 8])],
               [w, scale, bias, mean, var])
    view = load_view(m, "cbr")
    cs = cands(view, max_depth=2)
    fused = opsets(cs, "fusion-pattern")
    assert idx(view, "conv", "bn", "add", "relu") in fused   # depth 4 > max_depth 2
    assert idx(view, "conv", "bn") in fused
    assert not any(view.nodes[i].op_type == "Exp" for ops in fused for i in ops)


def test_enumeration_safety_valve(monkeypatch):
    import provmap.partition.rules as rules
    view = load_view(chain_model(9), "chain9")
    monkeypatch.setattr(rules, "ENUM_LIMIT", 12)
    cs = cands(view, max_depth=9, max_size=9)
    g = facts(view)
    size = g.memo["combine-truncated"]
    combine = opsets(cs, "combine")
    # every smaller size is complete, nothing at or above the truncated size beyond what's seen
    assert {ops for ops in combine if len(ops) < size} == \
        {ops for ops in brute_combine(view, set(view.op_nodes), 9, 9, 4, 3) if len(ops) < size}
    assert all(len(ops) <= size for ops in combine)


def test_generate_all_backends_and_bad_limits(views):
    view = views["diamond"]
    ver = {b: all_ok(view) for b in BACKENDS}
    cs = generate(view, ver)
    assert {c.backend for c in cs} == set(BACKENDS)
    per = len(cs) // 3
    assert len(cs) == 3 * per
    with pytest.raises(ValueError, match="max_depth"):
        generate(view, ver, max_depth=0)


# -- pruning ------------------------------------------------------------------------------------

def _coverage(cs):
    return {(i, c.backend) for c in cs for i in c.ops}


def test_prune_dominated_keeps_coverage_and_bridges(views):
    view = views["chain"]
    n = [next(iter(idx(view, f"n{k}"))) for k in range(7)]
    # onnxruntime takes only n0 and n6: n1..n5 are exclusive to tvm.
    verdicts = {"tvm": all_ok(view),
                "onnxruntime": {i: Support(i in (n[0], n[6]), "no") for i in view.op_nodes}}
    cs = generate(view, verdicts, max_depth=3)
    kept, report = prune(view, cs)
    assert report.before == len(cs) and report.after == len(kept) < len(cs)
    assert report.by_rule["dominated"] == len(cs) - len(kept)
    assert _coverage(kept) == _coverage(cs)
    kept_ops = {(c.backend, c.ops) for c in kept}
    # every single-op candidate survives
    assert {(c.backend, c.ops) for c in cs if len(c.ops) == 1} <= kept_ops
    tvm = {ops for b, ops in kept_ops if b == "tvm"}
    fs = lambda *ks: frozenset(n[k] for k in ks)  # noqa: E731
    # {n2, n3} lies inside {n1, n2, n3}, which adds only a tvm-only node: there is no reason to
    # cut between n1 and n2 on tvm, so it goes; the same holds for every window of two.
    assert fs(2, 3) not in tvm and fs(0, 1) not in tvm
    # a window of three can only grow (within max_depth) into the whole model, which adds n0 or
    # n6 that onnxruntime could take: those are the "bridges" and stay.
    multi = {ops for ops in tvm if len(ops) > 1}
    assert multi == {fs(k, k + 1, k + 2) for k in range(5)} | {frozenset(n)}
    assert {ops for b, ops in kept_ops if b == "onnxruntime"} == {fs(0), fs(6)}
    # the whole model on tvm contains everything
    assert frozenset(n) in tvm
    assert "dominated" in str(report)


def test_prune_nothing_when_everything_is_shared(views):
    view = views["resid"]
    cs = generate(view, {b: all_ok(view) for b in BACKENDS})
    kept, report = prune(view, cs + cs[:5])
    assert report.by_rule == {"duplicate": 5, "dominated": 0}
    assert len(kept) == len(cs)


def test_prune_collage_mode(views):
    view = views["resid"]
    cs = generate(view, {b: all_ok(view) for b in BACKENDS})
    kept, report = prune(view, cs, mode="collage")
    # TVM's rule keeps only the maximal candidates: here the whole model per backend
    assert sorted(c.backend for c in kept) == sorted(BACKENDS)
    assert all(c.ops == frozenset(view.op_nodes) for c in kept)
    assert _coverage(kept) == _coverage(cs) and report.restored == 0
    # With a cut the maximal ones overlap; coverage is restored with single ops if needed.
    con = parse_constraints(view, cuts=["add1"], backends=BACKENDS)
    allowed, _ = filter_candidates(con, cs, view)
    kept, report = prune(view, allowed, mode="collage")
    assert _coverage(kept) == _coverage(allowed)
    with pytest.raises(ValueError):
        prune(view, cs, mode="bogus")


# -- constraints --------------------------------------------------------------------------------

def test_constraint_node_naming(views):
    view = views["named"]
    relu, add, exp, neg = (next(iter(idx(view, x))) for x in
                           ("layer1/relu", "layer1/add", "layer2/exp", "layer2/neg"))
    c = parse_constraints(view, pins=["layer1/relu=tvm", "re:layer2/.*=openvino"],
                          forbids=[f"{view.node_ids[add]}=onnxruntime"],
                          cuts=[view.produced[exp][0]], backends=BACKENDS)
    assert c.pins == {relu: "tvm", exp: "openvino", neg: "openvino"}
    assert c.forbids == {add: {"onnxruntime"}}
    assert c.cuts == {exp}
    assert c.summary() == "3 pinned, 1 forbidden, 1 cut"
    # an expression no node produced (the graph output binding) cannot be constrained
    produced = {e for es in view.produced.values() for e in es}
    other = next(e.id for e in view.imported.pmap.exprs if e.id not in produced)
    with pytest.raises(ProvmapError, match=rf"--cut {other}: Relax expression {other} is not "
                                           "produced by any ONNX node"):
        parse_constraints(view, cuts=[other], backends=BACKENDS)


@pytest.mark.parametrize("kw, message", [
    (dict(pins=["layer1/relux=tvm"]), r"no ONNX node is named 'layer1/relux'.*did you mean "
                                       r"'layer1/relu'"),
    (dict(pins=["re:conv.*=tvm"]), r"--pin re:conv.\*=tvm: regular expression 'conv.\*' "
                                    r"matches no ONNX node name"),
    (dict(pins=["re:(=tvm"]), r"bad regular expression"),
    (dict(pins=["layer1/relu=tensorrt"]), r"unknown backend 'tensorrt'"),
    (dict(forbids=["layer1/relu=openvno"]), r"--forbid layer1/relu=openvno: unknown backend "
                                            r"'openvno' .*; did you mean 'openvino'\?"),
    (dict(pins=["layer1/relu"]), r"expected NODE=BACKEND"),
    (dict(pins=["layer1/relu=openvino[threads=1]"]),           # a variant: named whole
     r"a backend this search does not use 'openvino\[threads=1\]'"),
    (dict(pins=["layer1/relu=tvm", "re:layer1/.*=openvino"]),
     r"ONNX node #0 'layer1/relu' \(Relu\) is pinned to two backends: tvm \(--pin "
     r"layer1/relu=tvm\) and openvino \(--pin re:layer1/\.\*=openvino\)"),
    (dict(pins=["layer2/exp=tvm"], forbids=["re:layer2/.*=tvm"]),
     r"'layer2/exp' \(Exp\) is both pinned to tvm .* and forbidden on it"),
    (dict(forbids=["layer2/exp=tvm", "layer2/exp=onnxruntime", "layer2/exp=openvino"]),
     r"'layer2/exp' \(Exp\) is forbidden on every backend"),
    (dict(cuts=["const_k"]), r"--cut const_k: ONNX node #1 'const_k' \(Constant\) computes "
                             r"nothing at run time"),
    (dict(cuts=["re:const.*"]), r"matches only nodes that compute nothing"),
])
def test_constraint_errors(views, kw, message):
    with pytest.raises(ProvmapError, match=message):
        parse_constraints(views["named"], backends=BACKENDS, **kw)


def test_constraint_check_against_verdicts(views):
    view = views["named"]
    exp = next(iter(idx(view, "layer2/exp")))
    verdicts = {b: all_ok(view) for b in BACKENDS}
    verdicts["tvm"][exp] = Support(False, "Exp is excluded")
    c = parse_constraints(view, pins=["layer2/exp=tvm"], backends=BACKENDS)
    with pytest.raises(ProvmapError, match=r"'layer2/exp' \(Exp\) is pinned to tvm \(--pin "
                                           r"layer2/exp=tvm\) but tvm does not support it: "
                                           r"Exp is excluded"):
        check(c, verdicts)
    c = parse_constraints(view, forbids=["layer2/exp=onnxruntime", "layer2/exp=openvino"],
                          backends=BACKENDS)
    with pytest.raises(ProvmapError, match=r"'layer2/exp' \(Exp\): no allowed backend"):
        check(c, verdicts)
    check(parse_constraints(view, pins=["layer2/exp=openvino"], backends=BACKENDS), verdicts)


def test_pin_forbid_filtering(views):
    view = views["named"]
    relu, add = (next(iter(idx(view, x))) for x in ("layer1/relu", "layer1/add"))
    cs = generate(view, {b: all_ok(view) for b in BACKENDS})
    c = parse_constraints(view, pins=["layer1/relu=tvm"], forbids=["layer1/add=openvino"],
                          backends=BACKENDS)
    kept, dropped = filter_candidates(c, cs, view)
    assert all(c_.backend == "tvm" for c_ in kept if relu in c_.ops)
    assert not any(c_.backend == "openvino" and add in c_.ops for c_ in kept)
    assert dropped["pin"] > 0 and dropped["forbid"] > 0
    assert len(kept) + sum(dropped.values()) == len(cs)
    ok, why = allows(c, Candidate("openvino", frozenset({relu})), view)
    assert not ok and why == ("pin: ONNX node #0 'layer1/relu' (Relu) is pinned to tvm "
                              "(--pin layer1/relu=tvm)")
    # pinned nodes become exclusive, so pruning can drop more afterwards
    _, before = prune(view, cs)
    _, after = prune(view, kept)
    assert before.by_rule["dominated"] == 0 and after.by_rule["dominated"] > 0


def test_cut_semantics(views):
    view = views["chain"]
    n = [next(iter(idx(view, f"n{k}"))) for k in range(7)]
    cs = generate(view, {b: all_ok(view) for b in BACKENDS})
    c = parse_constraints(view, cuts=["n3"], backends=BACKENDS)
    kept, dropped = filter_candidates(c, cs, view)
    assert dropped == {"cut": len(cs) - len(kept)} and kept
    for cand in kept:
        assert not (n[3] in cand.ops and n[4] in cand.ops)
    kept_ops = {cand.ops for cand in kept}
    assert frozenset(n[1:4]) in kept_ops and frozenset(n[4:7]) in kept_ops
    assert frozenset({n[3]}) in kept_ops and frozenset(n) not in kept_ops
    ok, why = allows(c, Candidate("tvm", frozenset(n[2:5])), view)
    assert not ok and re.match(r"cut: spans the cut after ONNX node #3 'n3' \(Sigmoid\) "
                               r"\(--cut n3\), e\.g\. into ONNX node #4 'n4'", why)
    # still coverable after pruning
    pruned, _ = prune(view, kept)
    assert _coverage(pruned) == _coverage(kept) == {(i, b) for i in n for b in BACKENDS}


# -- a real network ------------------------------------------------------------------------------

def test_resnet50_generation_and_pruning_is_fast():
    model, _ = zoo.resolve("bundled:resnet50")
    view = load_view(model, "resnet50")
    t0 = time.perf_counter()
    ver = {i: Support(True) for i in view.op_nodes}
    cs = generate(view, {b: ver for b in BACKENDS})
    kept, report = prune(view, cs)
    elapsed = time.perf_counter() - t0
    assert elapsed < 5.0, elapsed
    assert len(view.op_nodes) == 176
    assert 176 * 3 < len(cs) < 6000
    assert _coverage(kept) == {(i, b) for i in view.op_nodes for b in BACKENDS}
    for c in cs[:: max(1, len(cs) // 200)]:       # a sample against the brute-force checks
        assert brute_convex(view, c.ops)
