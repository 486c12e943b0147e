"""Provenance through the real CPU build and the BYOC passes, on every test model."""

import json

import onnx
import pytest
import tvm
from tvm import relax
from tvm.relax.dpl import is_op, wildcard

from provmap.bench import conformance
from provmap.cli.map import main as map_cli
from provmap.provenance import store
from provmap.provenance.bundled import zoo
from provmap.provenance.build import compile_tvm, bytecode_calls
from provmap.provenance.debugify import check_passes
from provmap.provenance.importer import import_onnx
from provmap.provenance.map_index import MapIndex

MODELS = [f"bundled:{m}" for m in zoo.LIGHT_MODELS] + ["bundled:transformer"]


@pytest.fixture(scope="module", params=MODELS)
def built(request):
    model, _ = zoo.resolve(request.param)
    imp = import_onnx(model, label=request.param)
    return imp, compile_tvm(imp)


def test_every_node_and_kernel_is_accounted_for(built):
    imp, b = built
    pm = b.pmap
    mapped = {n for n, _, _ in pm.node_sites()}
    for n in pm.nodes:
        assert n.id in mapped or n.elided, f"node #{n.index} {n.name} ({n.op_type}) unaccounted"
    site_kernels = {s.kernel for s in pm.sites if any(se[0] == s.id for se in pm.site_exprs)}
    assert {k.name for k in pm.kernels} == site_kernels
    # every kernel maps back to at least one ONNX node
    idx = MapIndex(pm)
    for k in pm.kernels:
        assert idx.nodes_for_kernel(k.name), k.name
    cov = pm.coverage()
    assert cov["onnx_nodes_unaccounted"] == 0
    assert cov["kernels_mapped"] == cov["kernels_total"] > 0


def test_every_pass_of_the_build_keeps_provenance(built):
    imp, b = built
    bad = [(r.pass_name, r.unmapped_sites[:3], sorted(r.lost_ids)[:3])
           for r in b.tracker.reports if not r.ok]
    assert bad == []
    names = [r.pass_name for r in b.tracker.reports]
    for expected in ("LegalizeOps", "FoldConstant", "FuseOps", "CallTIRRewrite"):
        assert expected in names


def test_sites_join_the_bytecode_exactly(built):
    imp, b = built
    calls = bytecode_calls(b.executable)["main"]
    assert [s.kernel for s in sorted(b.pmap.sites, key=lambda s: s.ordinal)] == calls


def _cpu_passes(target):
    from tvm.relax.backend import cpu_generic as cg
    from tvm.relax.backend.cpu_generic import pipeline as p

    return (p.library_dispatch_passes(target) + p.legalize_passes(target)
            + p.dataflow_lower_passes(target) + p.finalize_passes(target))


@pytest.mark.parametrize("spec", ["bundled:squeezenet", "bundled:transformer"])
def test_debugify_each_pass_individually(spec):
    target = tvm.target.Target({"kind": "llvm"})
    model, _ = zoo.resolve(spec)
    imp = import_onnx(model)
    _, tracker, report = check_passes(imp, _cpu_passes(target), target)
    assert report.ok, report.summary()
    assert len(report.reports) >= 10


def _byoc_patterns():
    conv = is_op("relax.nn.conv2d")(wildcard(), wildcard())
    conv_relu = is_op("relax.nn.relu")(is_op("relax.add")(conv, wildcard()))
    matmul = is_op("relax.matmul")(wildcard(), wildcard())
    matmul_add = is_op("relax.add")(matmul, wildcard())
    return [("provmap_test.conv_bias_relu", conv_relu), ("provmap_test.conv", conv),
            ("provmap_test.matmul_add", matmul_add), ("provmap_test.matmul", matmul)]


@pytest.mark.parametrize("spec", ["bundled:squeezenet", "bundled:transformer"])
def test_byoc_passes_map_each_partition_call_to_its_onnx_nodes(spec):
    model, _ = zoo.resolve(spec)
    imp = import_onnx(model)
    passes = [relax.transform.FuseOpsByPattern(_byoc_patterns(), bind_constants=False,
                                               annotate_codegen=False),
              relax.transform.MergeCompositeFunctions()]
    mod, tracker, report = check_passes(imp, passes)
    assert report.ok, report.summary()
    names = [r.pass_name for r in report.reports]
    assert "FuseOpsByPattern" in names and "MergeCompositeFunctions" in names
    # Each offloaded call site claims exactly the bindings of the ops its composites matched.
    expr_node = {}
    for nid, eid, role in imp.pmap.node_exprs:
        if role == "produced":
            expr_node.setdefault(eid, set()).add(nid)
    op_of = {n.id: n.op_type for n in imp.pmap.nodes}
    fns = {gv.name_hint: f for gv, f in mod.functions.items() if isinstance(f, relax.Function)}
    offloaded = [(c, ids) for v, c, ids in tracker.sites()
                 if c in fns and "Codegen" in (fns[c].attrs or {})]
    assert offloaded
    for callee, ids in offloaded:
        ops = {op_of[n] for e in ids for n in expr_node.get(e, ())}
        assert ops and ops <= {"Conv", "Relu", "MatMul", "Add", "Gemm"}, (callee, ops)


def test_debugify_reports_a_pass_that_loses_provenance():
    """A deliberately broken pass: rewrites one kernel call to a fresh copy under a new name."""
    model, _ = zoo.resolve("bundled:transformer")
    imp = import_onnx(model)
    target = tvm.target.Target({"kind": "llvm"})

    @tvm.transform.module_pass(opt_level=0, name="BreakOneCall")
    def break_one(mod, _ctx):
        main = mod["main"]
        bb = relax.BlockBuilder(mod)
        blocks, done = [], False
        for block in main.body.blocks:
            new = []
            for b in block.bindings:
                v = b.value
                if (not done and isinstance(v, relax.Call) and v.op.name == "relax.call_tir"):
                    gv = v.args[0]
                    copy = bb.add_func(mod[gv].with_attr("global_symbol",
                                                         gv.name_hint + "_renamed"),
                                       gv.name_hint + "_renamed")
                    v = relax.Call(v.op, [copy] + list(v.args[1:]), v.attrs, v.ty_args)
                    b = relax.VarBinding(relax.Var("fresh", b.var.ty), v)
                    done = True
                new.append(b)
            blocks.append(type(block)(new))
        body = relax.SeqExpr(blocks, main.body.body)
        mod = bb.get()
        mod["main"] = relax.Function(main.params, body, main.ret_ty, main.is_pure, main.attrs)
        return relax.transform.Normalize()(mod)

    passes = [relax.transform.LegalizeOps(), break_one]
    _, _, report = check_passes(imp, passes, target)
    # Reported under the innermost pass that produced the broken IR (BreakOneCall runs
    # Normalize itself, and the instrument sees nested passes).
    found = [f for f in report.findings if f.kind == "unmapped site"]
    assert found and all("_renamed" in f.detail for f in found)
    assert {f.pass_name for f in found} <= {"BreakOneCall", "Normalize"}


SLICE_CASES = conformance.select_cases(regex=r"^test_slice")


@pytest.mark.parametrize("case", SLICE_CASES)
def test_run_time_slice_maps_every_kernel_to_the_slice(case, tmp_path, capsys):
    """Slice with run-time starts/ends: LegalizeOps emits a shape function beside the kernel,
    and both belong to the Slice (`provmap map` through the CLI)."""
    model = onnx.ModelProto.FromString(conformance._cases()[case][0])
    path = tmp_path / f"{case}.onnx"
    onnx.save(model, path)
    assert map_cli(["map", str(path), "-o", str(tmp_path / "out"), "--json"]) == 0
    cov = json.loads(capsys.readouterr().out)
    assert cov["kernels_total"] > 0
    assert (cov["kernels_mapped"], cov["kernel_sites_mapped"], cov["onnx_nodes_unaccounted"]) \
        == (cov["kernels_total"], cov["kernel_sites_total"], 0)
    assert cov["debugify_findings"] == []
    pm = store.load(tmp_path / "out.json")
    [slice_node] = [n for n in pm.nodes if n.op_type == "Slice"]
    idx = MapIndex(pm)
    assert all([n for n, _, _ in idx.nodes_for_kernel(k.name)] == [slice_node.id]
               for k in pm.kernels)


def test_gather_after_a_kernel_is_not_computed_by_that_kernel(tmp_path, capsys):
    """A scalar-index Gather on a LayerNorm's output: the importer's negative-index
    normalization reads the LayerNorm's shape (R.shape_of), which is no alias of its data, so
    the LayerNorm kernel must not "compute" the Gather (nu15 M2: profile charged the LayerNorm's
    time to BERT's pooler Gather)."""
    from onnx import TensorProto, helper, numpy_helper
    import numpy as np

    g = helper.make_graph(
        [helper.make_node("LayerNormalization", ["x", "w", "b"], ["y"], axis=-1, name="ln"),
         helper.make_node("Gather", ["y", "i"], ["first"], axis=1, name="pick")],
        "ln_gather", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8])],
        [helper.make_tensor_value_info("first", TensorProto.FLOAT, [1, 8])],
        [numpy_helper.from_array(np.ones(8, np.float32), "w"),
         numpy_helper.from_array(np.zeros(8, np.float32), "b"),
         numpy_helper.from_array(np.array(0, np.int64), "i")])
    path = tmp_path / "ln_gather.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    assert map_cli(["map", str(path), "-o", str(tmp_path / "out"), "--json"]) == 0
    cov = json.loads(capsys.readouterr().out)
    assert cov["onnx_nodes_unaccounted"] == 0 and cov["debugify_findings"] == []
    pm = store.load(tmp_path / "out.json")
    idx = MapIndex(pm)
    names = {n.id: n.name for n in pm.nodes}
    computed = {k.name: {names[n] for n, _, role in idx.nodes_for_kernel(k.name)
                         if role == "compute"} for k in pm.kernels}
    assert any("ln" in v for v in computed.values())
    for kernel, nodes in computed.items():
        assert nodes in ({"ln"}, {"pick"}), (kernel, nodes)
