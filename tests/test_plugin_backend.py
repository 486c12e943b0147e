"""A backend from another package, found through a real `provmap.backends` entry point.

The example package (examples/provmap_numpy_backend) is not pip-installed here: the test writes
the `*.dist-info` directory an installer would write (METADATA + entry_points.txt) into a temp
dir and puts it, and the package's source dir, on sys.path.  importlib.metadata then finds the
entry point exactly as it would for an installed vendor package, with nothing left behind.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import small_models as sm
from onnx import TensorProto, helper, numpy_helper

from provmap.partition.compile import compile_model, load_view
from provmap.provenance.bundled import zoo
from provmap.runtime_module.backend import Backend, BackendError
from provmap.runtime_module.module import load
from provmap.runtime_module.registry import available_backends, backend_class, get_backend

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "provmap_numpy_backend"
ROOT = Path(__file__).resolve().parents[1]


def _install_dist(site: Path, name: str, version: str, entry_points: dict[str, str]) -> None:
    """Write what `pip install` writes for discovery: <name>-<version>.dist-info/."""
    d = site / f"{name.replace('-', '_')}-{version}.dist-info"
    d.mkdir(parents=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (d / "entry_points.txt").write_text(
        "[provmap.backends]\n" + "".join(f"{k} = {v}\n" for k, v in entry_points.items()))


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A site dir holding the example's dist-info; both it and the example source on sys.path."""
    site = tmp_path / "site"
    _install_dist(site, "provmap-numpy-backend", "0.1",
                  {"numpyref": "provmap_numpy_backend:NumpyBackend"})
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.syspath_prepend(str(site))  # also invalidates importlib's caches
    return site


def ort_reference(model: onnx.ModelProto, feeds: dict) -> dict:
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


def test_entry_point_is_discovered(site):
    from importlib.metadata import entry_points

    (ep,) = [e for e in entry_points(group="provmap.backends") if e.name == "numpyref"]
    assert ep.dist.name == "provmap-numpy-backend"
    # Found through the dist-info written above (first on sys.path), not through a leftover
    # *.egg-info that `pip install -e examples/provmap_numpy_backend` leaves in the source dir.
    assert Path(ep.dist.locate_file("")) == site
    assert "numpyref" in available_backends()
    cls = backend_class("numpyref")
    assert issubclass(cls, Backend) and cls.name == "numpyref"
    assert get_backend("numpyref").describe()["options"] == {}


def test_mixed_plan_builds_saves_loads_and_matches_ort(site, tmp_path):
    model = zoo.transformer_block()
    path = tmp_path / "t.provmap"
    art = compile_model(load_view(model, "transformer"), "greedy:numpyref,onnxruntime", out=path)
    parts = art.manifest["partitions"]
    by_backend = {}
    for p in parts:
        by_backend.setdefault(p["backend"], []).append(p)
    # The plan really mixes both: numpyref takes what it has kernels for (MatMul, Softmax, ...),
    # ORT gets LayerNormalization and Erf, which numpyref refuses with a reason.
    assert set(by_backend) == {"numpyref", "onnxruntime"}
    fallbacks = "\n".join(art.manifest["plan_info"]["fallbacks"])
    assert "numpyref has no kernel for LayerNormalization" in fallbacks
    assert "numpyref has no kernel for Erf" in fallbacks
    assert art.manifest["backends"]["numpyref"]["version"].startswith("0.1+numpy")

    mod = load(path)  # verifies the file, then loads each blob through the registry again
    assert {m.type_key for m in mod.imports} == {"provmap.numpyref", "provmap.onnxruntime"}
    # One numpyref kernel per ONNX node of its partition, mapped back to exactly that node.
    lk = mod.lookup
    for p in by_backend["numpyref"]:
        assert len(p["kernels"]) == len(p["onnx_nodes"])
        for kname in p["kernels"]:
            (ans,) = lk.kernel(kname)
            (node,) = ans["onnx_nodes"]
            assert node["name"] == kname.split(":", 1)[1]

    feeds = zoo.random_inputs(model, 1)
    out = mod.run(feeds)
    ref = ort_reference(model, feeds)
    assert out["y"].dtype == np.float32  # computed in the model's precision
    # f32 on both sides; numpy and ORT sum matmuls/softmax in different orders: 1e-4 is ~100 ulp
    # at the output's magnitude (|y| ~ 4), far below a real mistake (which shows up as O(1)).
    np.testing.assert_allclose(out["y"], ref["y"], rtol=1e-4, atol=1e-4)


def test_artifact_runs_in_a_fresh_process(site, tmp_path):
    """Only the stored blob (model.onnx + meta) and the entry point are needed to run it."""
    model = zoo.transformer_block()
    path = tmp_path / "t.provmap"
    compile_model(load_view(model, "transformer"), "greedy:numpyref,onnxruntime", out=path)
    feeds = zoo.random_inputs(model, 2)
    np.save(tmp_path / "x.npy", feeds["x"])
    code = ("import sys, numpy as np; from provmap.runtime_module.module import load; "
            "m = load(sys.argv[1]); np.save(sys.argv[3], m.run({'x': np.load(sys.argv[2])})['y'])")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(EXAMPLE), str(ROOT)]))
    r = subprocess.run([sys.executable, "-c", code, str(path), str(tmp_path / "x.npy"),
                        str(tmp_path / "y.npy")], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), ort_reference(model, feeds)["y"],
                               rtol=1e-4, atol=1e-4)


def test_helper_nodes_are_computed_with_their_op_nodes(site, tmp_path):
    # Shape -> Gather -> Unsqueeze -> Concat (with Constants) feed a Reshape; they are helpers,
    # copied into the numpyref subgraph, which must compute them itself.
    model = sm.folded_and_aliases()
    path = tmp_path / "f.provmap"
    compile_model(load_view(model, "folded"), "single:numpyref", out=path)
    feeds = zoo.random_inputs(model, 0)
    np.testing.assert_allclose(load(path).run(feeds)["y"], ort_reference(model, feeds)["y"],
                               rtol=1e-6, atol=1e-6)


def test_op_fed_by_an_unknown_helper_is_refused_with_the_helper_named(site, tmp_path):
    # The Slice helper reads a weight too large for provmap.provenance.fold to evaluate ahead of time,
    # so it stays a helper node that each region must compute itself.
    def c(name, v):
        return helper.make_node("Constant", [], [name], name=f"c_{name}",
                                value=numpy_helper.from_array(np.array(v, np.int64)))
    big = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal(300_000).astype(np.float32), "big")
    nodes = [c("st", [0]), c("en", [24]),
             helper.make_node("Slice", ["big", "st", "en"], ["s0"], name="slice"),
             c("shp", [2, 12]),
             helper.make_node("Reshape", ["s0", "shp"], ["w"], name="reshape"),
             helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Add", ["r", "w"], ["a"], name="add"),
             helper.make_node("Exp", ["a"], ["y"], name="exp")]
    f = TensorProto.FLOAT
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", f, [2, 12])],
                          [helper.make_tensor_value_info("y", f, [2, 12])], initializer=[big])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    view = load_view(model, "slice")
    assert view.op_nodes == [5, 6, 7]
    verdicts = get_backend("numpyref").verdicts(view)
    assert verdicts[5].ok
    assert not verdicts[6].ok and "'slice' (Slice), which feeds it" in verdicts[6].reason
    assert verdicts[7].ok
    art = compile_model(view, "greedy:numpyref,onnxruntime", out=tmp_path / "s.provmap")
    assert [p["backend"] for p in art.manifest["partitions"]] == ["numpyref", "onnxruntime",
                                                                  "numpyref"]
    feeds = zoo.random_inputs(model, 0)
    np.testing.assert_allclose(load(tmp_path / "s.provmap").run(feeds)["y"],
                               ort_reference(model, feeds)["y"], rtol=1e-6, atol=1e-6)


def test_explicit_precision_option_is_recorded_and_reused(site, tmp_path):
    model = zoo.transformer_block()
    path = tmp_path / "t64.provmap"
    art = compile_model(load_view(model, "transformer"), "greedy:numpyref,onnxruntime", out=path,
                        backend_options={"numpyref": {"precision": "float64"}})
    assert art.manifest["backends"]["numpyref"]["options"] == {"precision": "float64"}
    mod = load(path)
    numpy_parts = [m for m in mod.partitions if m.backend == "numpyref"]
    assert all(m.runner._wide for m in numpy_parts)  # the manifest's options reached load()
    feeds = zoo.random_inputs(model, 1)
    out = mod.run(feeds)
    assert out["y"].dtype == np.float32  # boundaries keep the model's dtype
    np.testing.assert_allclose(out["y"], ort_reference(model, feeds)["y"], rtol=1e-4, atol=1e-4)
    with pytest.raises(BackendError, match="precision must be 'model' or 'float64'"):
        get_backend("numpyref", precision="fp16")
    with pytest.raises(BackendError, match=r"unknown option\(s\) \['threads'\]"):
        get_backend("numpyref", threads=2)


def test_unknown_backend_lists_the_available_ones(site):
    with pytest.raises(BackendError) as e:
        compile_model(zoo.transformer_block(), "greedy:nosuch,onnxruntime")
    msg = str(e.value)
    assert "unknown backend 'nosuch'" in msg
    assert "numpyref" in msg and "onnxruntime" in msg and "tvm" in msg


def test_plugin_that_is_not_a_backend_is_refused(site, tmp_path):
    # Two more "installed" packages whose entry points name the wrong thing: a class that is
    # not a Backend (a Runner) and a plain function.
    _install_dist(site, "bad-plugin", "1.0", {"notabackend": "provmap_numpy_backend:NumpyRunner",
                                              "afunction": "provmap_numpy_backend:_softmax"})
    assert {"notabackend", "afunction"} <= set(available_backends())
    for name, ref in [("notabackend", "provmap_numpy_backend:NumpyRunner"),
                      ("afunction", "provmap_numpy_backend:_softmax")]:
        with pytest.raises(BackendError) as e:
            get_backend(name)
        msg = str(e.value)
        assert f"plugin backend '{name}' ({ref})" in msg
        assert "is not a provmap.runtime_module.backend.Backend subclass" in msg


def test_the_plugin_walkthrough_in_docs_backends_shows_what_inspect_prints(tmp_path):
    """docs/backends.md's inspect example, compared line by line with the real command (it had
    gone stale: "op node(s)", a missing ORT option, a run summary the CLI no longer prints)."""
    import os
    from pathlib import Path

    site = tmp_path / "site"
    _install_dist(site, "provmap-numpy-backend", "0.1",
                  {"numpyref": "provmap_numpy_backend:NumpyBackend"})
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(EXAMPLE)]))

    def run(*args):
        r = subprocess.run([sys.executable, "-m", "provmap.cli.main", *args], cwd=tmp_path,
                           env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return r.stdout

    run("compile", "bundled:transformer", "-o", "t.provmap", "--strategy",
        "greedy:numpyref,onnxruntime")
    doc = (Path(__file__).resolve().parents[1] / "docs" / "backends.md").read_text()
    shown = re.search(r"```bash\nprovmap inspect t.provmap\n```\n\n```\n(.*?)```", doc,
                      re.S).group(1)
    real = run("inspect", "t.provmap").splitlines()
    for line in shown.splitlines():
        if line.strip() and line != "...":
            assert line in real, f"docs/backends.md shows {line!r}; inspect prints:\n" + \
                "\n".join(real)
    ran = re.search(r"```bash\nprovmap run t.provmap\n```\n\n```\n(.*?)```", doc, re.S).group(1)
    out = run("run", "t.provmap")
    for doc_line, line in zip(ran.splitlines(), out.splitlines(), strict=True):
        assert re.sub(r"[\d.]+ ms", "", doc_line.split(" min ")[0]) == \
            re.sub(r"[\d.]+ ms", "", line.split(" min ")[0]), (doc_line, line)
