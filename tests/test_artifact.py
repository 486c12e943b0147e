"""The runtime-module container: build, save, verify, load in a fresh process, run, look up."""

import json
import os
import subprocess
import sys
import zipfile

import numpy as np
import onnxruntime as ort
import pytest
import small_models as sm

from provmap.partition.compile import compile_model, load_view
from provmap.provenance.bundled import zoo
from provmap.provenance.util.errors import ProvmapError
from provmap.runtime_module.artifact import read_artifact
from provmap.runtime_module.module import load
from provmap.runtime_module.plan import PartitionSpec, Plan
from provmap.runtime_module.artifact_build import build_artifact
from provmap.runtime_module.registry import get_backend


def cli(*args):
    return subprocess.run([sys.executable, "-m", "provmap.cli.main", *args], capture_output=True,
                          text=True)


def ort_reference(model, feeds):
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


@pytest.fixture(scope="module")
def transformer_art(tmp_path_factory, transformer_model, transformer_view):
    model, view = transformer_model, transformer_view
    path = tmp_path_factory.mktemp("art") / "tr.provmap"
    # Three TVM partitions so the artifact has real boundaries (cut after nodes 10 and 20).
    ops = view.op_nodes
    plan = Plan("manual", [PartitionSpec("tvm", ops[:10]), PartitionSpec("tvm", ops[10:20]),
                           PartitionSpec("tvm", ops[20:])])
    build_artifact(view, plan, {"tvm": get_backend("tvm")}).save(path, record_built=True)
    return model, path


def test_partitioned_artifact_runs_and_matches_reference(transformer_art):
    model, path = transformer_art
    mod = load(path)
    assert mod.type_key == "provmap.artifact"
    assert [m.type_key for m in mod.imports] == ["provmap.tvm"] * 3
    feeds = zoo.random_inputs(model, 1)
    out = mod["main"](feeds)
    ref = ort_reference(model, feeds)
    # f32 on both sides; different summation orders in matmul/softmax/erf: 1e-4 is ~100 ulp at
    # the output's magnitude (|y| ~ 4), far below any real mistake (which shows up as O(1)).
    np.testing.assert_allclose(out["y"], ref["y"], rtol=1e-4, atol=1e-4)
    # A partition module answers get_function with its runner, like a TVM runtime module.
    p1 = mod.imports[1]
    r = p1.get_function(p1.id)
    assert r is not None and r.input_names and r.output_names
    assert mod.get_function("p1", query_imports=True) is r


def test_partitioned_relax_module_carries_backend_and_exprs(transformer_art):
    _, path = transformer_art
    art = read_artifact(path)
    text = art.members["partitioned.relax"].decode()
    assert text.count('"provmap.backend": "tvm"') == 3
    assert "def main(" in text and "provmap.exprs" in text
    # Each partition's expression IDs are the import's IDs, and together they cover the model.
    exprs = [e for p in art.manifest["partitions"] for e in p["exprs"]]
    pmap = art.provenance_map()
    assert set(exprs) <= {e.id for e in pmap.exprs}


def test_lookup_walks_every_node_and_kernel_both_ways(transformer_art):
    _, path = transformer_art
    lk = load(path, runnable=False).lookup
    for n in lk.map.nodes:
        ans = lk.onnx_node(n.id)
        assert len(ans) == 1
        assert ans[0]["kernels"] or ans[0]["elided"], n
        for k in ans[0]["kernels"]:
            back = lk.kernel(k["kernel"])
            assert any(x["id"] == n.id for x in back[0]["onnx_nodes"])
        if n.name:
            assert any(a["id"] == n.id for a in lk.onnx_node(n.name))
    for kname in lk.kernel_names():
        ans = lk.kernel(kname)
        assert ans and ans[0]["onnx_nodes"], kname
        for node in ans[0]["onnx_nodes"]:
            assert any(k["kernel"] == kname for k in lk.onnx_node(node["id"])[0]["kernels"])
    e = lk.map.exprs[5].id
    assert lk.expr(e)["onnx_nodes"]


def test_cli_inspect_json_lists_partitions_with_boundaries(transformer_art):
    _, path = transformer_art
    r = cli("inspect", str(path), "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    parts = info["partitions"]
    assert [p["id"] for p in parts] == ["p0", "p1", "p2"]
    for p in parts:
        assert {"id", "backend", "onnx_nodes", "kernels", "inputs", "outputs"} <= set(p)
        for t in p["inputs"] + p["outputs"]:
            assert t["bytes"] == int(np.prod(t["shape"])) * 4 and t["dtype"] == "float32"
    # p1's inputs come from p0 (a real boundary), and p0's outputs are consumed later.
    assert any(t["producer"] == "p0" for t in parts[1]["inputs"])


def test_cli_run_in_fresh_process_and_lookup(transformer_art, tmp_path):
    model, path = transformer_art
    feeds = zoo.random_inputs(model, 3)
    np.savez(tmp_path / "in.npz", **feeds)
    r = cli("run", str(path), "--inputs", str(tmp_path / "in.npz"), "-o", str(tmp_path / "out.npz"))
    assert r.returncode == 0, r.stderr
    got = np.load(tmp_path / "out.npz")
    np.testing.assert_allclose(got["y"], ort_reference(model, feeds)["y"], rtol=1e-4, atol=1e-4)
    r = cli("lookup", str(path), "--onnx-node", "attn/Softmax", "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)["results"][0]
    assert res["backends"] == ["tvm"] and res["kernels"][0]["kernel"].startswith("p1:")
    r = cli("lookup", str(path), "--onnx-node", "no-such-node")
    assert r.returncode == 2 and "no-such-node" in r.stderr


def _rewrite(src, dst, mutate):
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            data = mutate(item.filename, data)
            if data is not None:
                zout.writestr(item, data)


def test_tampered_member_is_refused_before_loading(transformer_art, tmp_path):
    _, path = transformer_art
    bad = tmp_path / "bad.provmap"

    def flip(name, data):
        if name.endswith("lib.so"):
            b = bytearray(data)
            b[len(b) // 2] ^= 0xFF
            return bytes(b)
        return data

    _rewrite(path, bad, flip)
    with pytest.raises(ProvmapError, match=r"lib\.so fails its SHA-256 check"):
        load(bad)
    r = cli("run", str(bad), "--random")
    assert r.returncode == 2 and "refused" in r.stderr


def test_extra_or_missing_member_is_refused(transformer_art, tmp_path):
    _, path = transformer_art
    missing = tmp_path / "missing.provmap"
    _rewrite(path, missing, lambda n, d: None if n == "map.sqlite" else d)
    with pytest.raises(ProvmapError, match="do not match the manifest"):
        read_artifact(missing)
    extra = tmp_path / "extra.provmap"
    _rewrite(path, extra, lambda n, d: d)
    with zipfile.ZipFile(extra, "a") as z:
        z.writestr("partitions/p0/evil.so", b"\x7fELF")
    with pytest.raises(ProvmapError, match="unexpected"):
        read_artifact(extra)


def test_truncated_artifact_is_refused(transformer_art, tmp_path):
    _, path = transformer_art
    data = path.read_bytes()
    for cut in (len(data) // 2, len(data) - 10, 100):
        bad = tmp_path / f"trunc{cut}.provmap"
        bad.write_bytes(data[:cut])
        with pytest.raises(ProvmapError, match="refused|not a provmap artifact"):
            load(bad)
    with pytest.raises(ProvmapError, match="no such artifact"):
        load(tmp_path / "nope.provmap")


def test_bad_inputs_name_the_tensor(transformer_art):
    _, path = transformer_art
    mod = load(path)
    with pytest.raises(ProvmapError, match="missing input 'x'"):
        mod.run({})
    with pytest.raises(ProvmapError, match=r"input 'x': expected float32\[1, 16, 64\]"):
        mod.run({"x": np.zeros((1, 16, 63), np.float32)})


def test_compile_failure_leaves_no_file(tmp_path):
    out = tmp_path / "x.provmap"
    path = tmp_path / "m.onnx"
    import onnx
    onnx.save(sm.unsupported_op(), path)
    r = cli("compile", str(path), "-o", str(out), "--strategy", "single:tvm")
    assert r.returncode == 2 and "my_dft" in r.stderr
    assert not out.exists() and os.listdir(tmp_path) == ["m.onnx"]
    r = cli("compile", str(path), "-o", str(out), "--strategy", "bogus")
    assert r.returncode == 2


def test_helper_nodes_ride_with_their_consumers(tmp_path):
    """Shape/Constant/Identity make no run-time value: they are copied into each partition."""
    model = sm.folded_and_aliases()
    art = compile_model(load_view(model, "folded"), "single:tvm")
    art.save(tmp_path / "f.provmap", record_built=True)
    mod = load(tmp_path / "f.provmap")
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_allclose(mod.run({"x": x})["y"], np.exp(x.reshape(2, 12)), rtol=1e-6)
    cov = art.manifest["coverage"]
    assert cov["onnx_nodes_unaccounted"] == 0
