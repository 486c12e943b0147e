"""Whole expected maps on small hand-built models: every link, not just counts."""

import small_models as sm

from provmap.provenance.build import compile_tvm
from provmap.provenance.fold import FOLD_REASON
from provmap.provenance.importer import import_onnx
from provmap.provenance.model import ROLE_COMPUTE, ROLE_CONSTANT, ROLE_FOLDED, ROLE_PRODUCED
from provmap.provenance.map_index import MapIndex


def build(model):
    pm = compile_tvm(import_onnx(model)).pmap
    names = {n.id: n.name for n in pm.nodes}
    expr_var = {e.id: e.var for e in pm.exprs}
    node_sites = sorted((names[n], s, r) for n, s, r in pm.node_sites())
    site_vars = sorted((s, expr_var[e], r) for s, e, r in pm.site_exprs)
    node_vars = sorted((names[n], expr_var[e], r) for n, e, r in pm.node_exprs)
    return pm, node_vars, site_vars, node_sites


def test_conv_relu_fuses_into_one_kernel():
    pm, node_vars, site_vars, node_sites = build(sm.conv_relu())
    # Conv with bias imports as conv2d, reshape(bias), add; Relu as relu; gv is the output alias.
    assert [(e.var, e.op) for e in pm.exprs] == [
        ("lv", "relax.nn.conv2d"), ("lv1", "relax.reshape"), ("lv2", "relax.add"),
        ("lv3", "relax.nn.relu"), ("gv", "alias")]
    assert node_vars == [("conv", "lv", ROLE_PRODUCED), ("conv", "lv1", ROLE_PRODUCED),
                         ("conv", "lv2", ROLE_PRODUCED), ("relu", "lv3", ROLE_PRODUCED)]
    site = "main/fused_conv2d_add_relu#0"
    # The bias reshape was constant-folded into the fused kernel's argument.
    assert site_vars == [(site, "gv", ROLE_COMPUTE), (site, "lv", ROLE_COMPUTE),
                         (site, "lv1", ROLE_CONSTANT), (site, "lv2", ROLE_COMPUTE),
                         (site, "lv3", ROLE_COMPUTE)]
    assert node_sites == [("conv", site, ROLE_COMPUTE), ("relu", site, ROLE_COMPUTE)]
    assert [(k.name, k.kind, k.backend) for k in pm.kernels] == [
        ("fused_conv2d_add_relu", "primfunc", "tvm")]


def test_deduplicated_kernel_is_mapped_per_call_site():
    pm, node_vars, site_vars, node_sites = build(sm.twin_branches())
    assert [k.name for k in pm.kernels] == ["fused_add_relu"]  # one function, two call sites
    assert [(s.id, s.ordinal) for s in pm.sites] == [("main/fused_add_relu#0", 0),
                                                     ("main/fused_add_relu#1", 1)]
    assert node_sites == [
        ("add_a", "main/fused_add_relu#0", ROLE_COMPUTE),
        ("add_b", "main/fused_add_relu#1", ROLE_COMPUTE),
        ("relu_a", "main/fused_add_relu#0", ROLE_COMPUTE),
        ("relu_b", "main/fused_add_relu#1", ROLE_COMPUTE),
    ]
    idx = MapIndex(pm)
    by_name = {n.name: n.id for n in pm.nodes}
    assert sorted(n for _, n, _ in idx.nodes_for_kernel("fused_add_relu")) == [
        "add_a", "add_b", "relu_a", "relu_b"]
    assert idx.kernels_for_node(by_name["relu_b"]) == [
        ("main/fused_add_relu#1", "fused_add_relu", ROLE_COMPUTE)]


def test_aliases_and_shape_arithmetic_are_elided_with_reasons_and_linked():
    pm, node_vars, site_vars, node_sites = build(sm.folded_and_aliases())
    reasons = {n.name: n.elided for n in pm.nodes}
    # The Shape chain is evaluated on the ONNX graph before import (provmap.provenance.fold), so each of
    # its nodes says so; what the Relax importer folds itself (constants) keeps its own reason.
    assert reasons == {
        "ident": "alias of an existing value (no computation)",
        "shape": FOLD_REASON,
        "const_idx": "constant folded at import",
        "gather": FOLD_REASON,
        "const_axes": "constant folded at import",
        "unsqueeze": FOLD_REASON,
        "const_m1": "constant folded at import",
        "concat": FOLD_REASON,
        "reshape": None,
        "exp": None,
    }
    folded = ["concat", "const_axes", "const_idx", "const_m1", "gather", "ident", "shape",
              "unsqueeze"]
    assert node_vars == sorted([("exp", "lv1", ROLE_PRODUCED), ("reshape", "lv", ROLE_PRODUCED)]
                               + [(n, "lv", ROLE_FOLDED) for n in folded])
    site = "main/fused_reshape_tir_exp#0"
    assert node_sites == sorted([("exp", site, ROLE_COMPUTE), ("reshape", site, ROLE_COMPUTE)]
                                + [(n, site, ROLE_FOLDED) for n in folded])
    cov = pm.coverage()
    assert cov["onnx_nodes_unaccounted"] == 0 and cov["kernels_mapped"] == cov["kernels_total"]


def test_a_node_returning_an_earlier_binding_does_not_shift_ownership():
    # shape_y's converter returns fill's tensor_to_shape binding.  Attribution by position used
    # to restart after that binding, so cast_s2 took fill's broadcast_to and slice_y's
    # strided_slice: salvage then blamed an opaque Cast for TVM's failures on Swin-T.
    imp = import_onnx(sm.shape_of_filled())
    names = {n.id: n.name for n in imp.pmap.nodes}
    ops = {e.id: e.op for e in imp.pmap.exprs}
    produced = sorted((names[n], ops[e]) for n, e, r in imp.pmap.node_exprs if r == ROLE_PRODUCED)
    assert produced == [
        ("add_one", "relax.add"), ("add_one", "relax.shape_to_tensor"),
        ("cast_s2", "provmap.opaque.Cast"),
        ("fill", "relax.broadcast_to"), ("fill", "relax.tensor_to_shape"),
        ("neg_z", "relax.negative"), ("slice_y", "relax.strided_slice")]
