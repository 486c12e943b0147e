"""Issue 36, the fifth afternoon's leftovers, through the real CLI: a flag given twice, and
--trust given where there is nothing to trust."""

from __future__ import annotations

import json

import pytest

from cli_runner import digest, provmap, refused


@pytest.fixture(scope="module")
def artifact(squeezenet_cli_artifact):
    return squeezenet_cli_artifact


def _saved_model(tmp_path, nodes, inputs, outputs, value_info=()):
    """A one-graph model at opset 17, IR 8, saved as m.onnx: inputs/outputs/value_info are
    (name, TensorProto dtype, shape) triples."""
    import onnx
    from onnx import helper

    def info(triples):
        return [helper.make_tensor_value_info(*t) for t in triples]

    g = helper.make_graph(nodes, "g", info(inputs), info(outputs), value_info=info(value_info))
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              model)
    return model


@pytest.mark.parametrize("argv", [
    ["inspect", "--json", "--json", "{a}"],
    ["lookup", "{a}", "--json", "--onnx-node", "x", "--json"],
    ["run", "{a}", "--random", "--trust", "--trust"],
])
def test_a_flag_given_twice_is_refused_like_an_option_given_twice(artifact, argv):
    """`--json --json` was taken without a word, where `-o a -o b` is refused."""
    r = provmap(*[str(artifact) if x == "{a}" else x for x in argv])
    flag = "--json" if "--json" in argv else "--trust"
    assert r.returncode == 2 and r.stderr == (
        f"provmap {argv[0]}: error: argument {flag}: given twice; give it once "
        f"(see `provmap {argv[0]} --help`)\n"), r.stderr
    if flag == "--json":  # the refusal is JSON too, as every error under --json
        assert json.loads(r.stdout)["code"] == 2


def test_trust_on_an_artifact_without_native_code_says_there_was_nothing_to_trust(artifact):
    """single:onnxruntime holds an ONNX file, no shared library: --trust vouched for nothing,
    and the user was not told so.  Said once; the run goes on (a script may pass --trust to
    every artifact it runs)."""
    r = provmap("run", artifact, "--random", "--trust")
    assert r.returncode == 0, r.stderr
    notes = [ln for ln in r.stderr.splitlines() if "nothing to trust" in ln]
    assert notes == [f"provmap: warning: --trust: {artifact} holds no native code (its "
                     "partitions run on onnxruntime), so there was nothing to trust"], r.stderr
    assert "nothing to trust" not in provmap("run", artifact, "--random").stderr


def test_inspect_says_which_model_its_node_states_are_over(artifact):
    """`inspect --model` keys the placement to the user's model; in text mode the output was
    the same with or without it, so nothing showed the option had been used."""
    def over(*extra):
        r = provmap("inspect", artifact, *extra)
        assert r.returncode == 0, r.stderr
        return next(ln for ln in r.stdout.splitlines() if ln.startswith("  over "))

    assert over() == ("  over 66 ONNX nodes of the compiled copy (pass --model FILE to key them "
                      "to your model)")
    assert over("--model", "bundled:squeezenet") == ("  over 66 ONNX nodes of the model as "
                                                     "given (bundled:squeezenet)")


def test_the_reference_session_prints_no_raw_log_line(tmp_path):
    """compare's reference ONNX Runtime session logged its own ERROR line at severity 3, with
    the failing node's name raw (terminal escapes from a stranger's embedded model) before
    provmap's escaped line.  Only the raised error may speak."""
    import subprocess
    import sys

    code = ("import numpy as np, onnx\n"
            "from onnx import TensorProto, helper\n"
            "from provmap.workbench.compare import reference_run\n"
            "g = helper.make_graph([helper.make_node('Gather', ['t', 'i'], ['y'],\n"
            "                       name='\\x1b[31mEVIL\\x1b]0;pwned\\x07gather')], 'g',\n"
            "    [helper.make_tensor_value_info('i', TensorProto.INT64, [1])],\n"
            "    [helper.make_tensor_value_info('y', TensorProto.FLOAT, [1, 2])],\n"
            "    [helper.make_tensor('t', TensorProto.FLOAT, [3, 2], [0.0] * 6)])\n"
            "m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)], ir_version=8)\n"
            "try:\n"
            "    reference_run(m, {'i': np.array([50], np.int64)}, [])\n"
            "except Exception as e:\n"
            "    print('raised', type(e).__name__)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert "raised" in r.stdout, (r.stdout, r.stderr)
    assert "\x1b" not in r.stderr and "EVIL" not in r.stderr, r.stderr


@pytest.mark.parametrize("argv", [
    ["run", "{a}", "--random", "-o", "{m}"],
    ["inspect", "{a}", "--sqlite", "{m}"],
    ["report", "{a}", "-o", "{m}"],
    ["compile", "bundled:squeezenet", "--strategy", "single:onnxruntime", "-o", "{m}"],
])
@pytest.mark.parametrize("name", ["model.onnx", "model-without-suffix"])
def test_no_output_of_another_kind_replaces_an_onnx_model(tmp_path, artifact, argv, name):
    """`run A -o model.onnx` (a typo for .npz) turned the user's model into an .npz, `inspect
    --sqlite` into a database, `report -o` into a page, "existed: replaced" said afterwards;
    annotate refused the same file."""
    import onnx
    import small_models

    model = tmp_path / name
    onnx.save(small_models.conv_relu(), model)
    before = digest(model)
    r = provmap(*[str(artifact) if x == "{a}" else str(model) if x == "{m}" else x
                  for x in argv])
    refused(r, f"{model} exists and is an ONNX model", f"`provmap {argv[0]}` would replace it")
    assert digest(model) == before


def test_an_artifact_re_zipped_with_its_directory_entries_opens(tmp_path, artifact):
    """`zip -0 -r` (the hint of the compressed-member refusal) writes an entry for each
    directory; those were refused as "a symbolic link or special file entry", so only
    `zip -0 -r -D` worked.  Directory entries hold nothing and are skipped."""
    import zipfile

    out = tmp_path / "rezipped.provmap"
    with zipfile.ZipFile(artifact) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
        dirs = sorted({n.rsplit("/", 1)[0] + "/" for n in src.namelist() if "/" in n})
        for d in dirs:  # as Info-ZIP writes them: mode drwxr-xr-x, MS-DOS directory bit
            info = zipfile.ZipInfo(d)
            info.external_attr = (0o40755 << 16) | 0x10
            dst.writestr(info, b"")
        for n in src.namelist():
            dst.writestr(n, src.read(n))
    r = provmap("inspect", out)
    assert r.returncode == 0, r.stderr
    assert "1 partition(s)" in r.stdout


@pytest.mark.parametrize("backend", ["openvino", "onnxruntime"])
def test_an_output_declared_with_another_dtype_is_refused_at_compile(tmp_path, backend):
    """float16 declared, float32 computed: ONNX Runtime refuses to load it; provmap wrote an
    artifact on OpenVINO or TVM that failed at every run, and on ONNX Runtime blamed the
    first node."""
    from onnx import TensorProto, helper

    model = _saved_model(tmp_path, [helper.make_node("Relu", ["x"], ["y"], name="relu")],
                         [("x", TensorProto.FLOAT, [1, 4])], [("y", TensorProto.FLOAT16, [1, 4])])
    r = provmap("compile", model, "-o", tmp_path / "a.provmap", "--strategy", f"single:{backend}")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert ("graph output 'y' is declared float16 but the model computes float32 (by Relu "
            "'relu')") in r.stderr.splitlines()[-1], r.stderr
    assert not (tmp_path / "a.provmap").exists()


def test_a_stale_value_info_on_a_boundary_takes_the_computed_shape(tmp_path):
    """ORT merges a stale intermediate declaration leniently and runs the model; provmap sized
    the boundary from it and the next partition failed to build, blaming a later node."""
    import numpy as np
    from onnx import TensorProto, helper

    model = _saved_model(tmp_path, [helper.make_node("Relu", ["x"], ["a"], name="relu"),
                                    helper.make_node("Sigmoid", ["a"], ["y"], name="sig")],
                         [("x", TensorProto.FLOAT, [1, 4, 8])], [("y", TensorProto.FLOAT, [1, 4, 8])],
                         value_info=[("a", TensorProto.FLOAT, [1, 4, 2])])
    art = tmp_path / "a.provmap"
    r = provmap("compile", model, "-o", art, "--strategy", "greedy:openvino,onnxruntime",
                "--backend-option", "openvino.exclude_ops=Sigmoid")
    assert r.returncode == 0, r.stderr
    assert ("tensor 'a' is declared [1, 4, 2] in value_info but the model computes [1, 4, 8]; "
            "the computed shape is used") in r.stderr
    x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(1, 4, 8)
    np.savez(tmp_path / "in.npz", x=x)
    r = provmap("run", art, "--inputs", tmp_path / "in.npz", "-o", tmp_path / "out.npz")
    assert r.returncode == 0, r.stderr
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["y"],
                               1 / (1 + np.exp(-np.maximum(x, 0))), rtol=1e-5)


def test_compare_names_an_unnamed_node_as_lookup_finds_it(tmp_path):
    """compare called an unnamed node "Relu#423" (numbered by tensors), which lookup refused;
    it now gives the node's ID, which lookup and inspect use."""
    from onnx import TensorProto, helper

    model = _saved_model(tmp_path, [helper.make_node("Relu", ["x"], ["a"]),
                                    helper.make_node("Sigmoid", ["a"], ["y"])],
                         [("x", TensorProto.FLOAT, [1, 4])], [("y", TensorProto.FLOAT, [1, 4])])
    art = tmp_path / "a.provmap"
    assert provmap("compile", model, "-o", art, "--strategy", "greedy:openvino,onnxruntime",
                   "--backend-option", "openvino.exclude_ops=Sigmoid").returncode == 0
    r = provmap("compare", art, "--model", model, "--json")
    assert r.returncode == 0, r.stderr
    labels = {t["tensor"]: t["onnx_node"] for t in json.loads(r.stdout)["tensors"]}
    for tensor in ("a", "y"):
        found = provmap("lookup", art, "--onnx-node", labels[tensor])
        assert found.returncode == 0, (labels, found.stderr)


def test_node_numbers_are_positions_in_the_users_file(tmp_path):
    """An unsorted model is sorted before import; "ONNX node #N" and lookup's index counted in
    that sorted copy, so "#52" named another node of the user's file (issue 36's sixth
    afternoon).  They count in the file as given, as inspect's placement table does."""
    from onnx import TensorProto, helper

    model = _saved_model(tmp_path, [helper.make_node("Sigmoid", ["a"], ["y"], name="second"),
                                    helper.make_node("Relu", ["x"], ["a"], name="first")],
                         [("x", TensorProto.FLOAT, [1, 4])], [("y", TensorProto.FLOAT, [1, 4])])
    art = tmp_path / "a.provmap"
    assert provmap("compile", model, "-o", art, "--strategy", "single:onnxruntime").returncode == 0
    r = provmap("lookup", art, "--onnx-node", "second")
    assert r.returncode == 0 and r.stdout.startswith("ONNX node #0 'second' (Sigmoid)"), r.stdout
    r = provmap("lookup", art, "--onnx-node", "first", "--json")
    assert json.loads(r.stdout)["results"][0]["index"] == 1
    for extra in ((), ("--model", str(model))):
        rows = json.loads(provmap("inspect", art, "--json", *extra).stdout)["placement"]["nodes"]
        assert {r["name"]: r["index"] for r in rows} == {"second": 0, "first": 1}


@pytest.mark.parametrize("order, want", [([1, 0], 1), ([1, 1], 0), ([0, "1"], 0), ([7, 0], 0),
                                         ([0], 0), ({"0": 1}, 0)])
def test_a_strangers_file_order_is_used_only_when_it_is_a_permutation(order, want):
    from provmap.provenance.model import OnnxNode, ProvenanceMap

    nodes = [OnnxNode(f"n{i}", f"x{i}", "Relu", "", i, [], [f"t{i}"]) for i in range(2)]
    d = ProvenanceMap(meta={"file_order": order}, nodes=nodes).to_dict()
    assert ProvenanceMap.from_dict(d).file_index(0) == want
