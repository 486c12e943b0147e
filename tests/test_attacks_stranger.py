"""Issue 33, second pass: attacks nobody had crafted for the first corpus (test_attacks.py),
tried as a hostile sender would, hashes recomputed.  Each case here failed on the code before
this pass: a file of the victim's read into the outputs, script injected into a report, a
disk filled by a trigger, memory amplified by a zip directory."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import urllib.parse
import zipfile

import numpy as np
import pytest
from attack_kit import external, members, relu_artifact, repack
from onnx import TensorProto, helper

from provmap.cli.main import main
from provmap.provenance.util.errors import ProvmapError
from provmap.runtime_module.artifact import read_artifact

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def art(tmp_path_factory):
    return relu_artifact(tmp_path_factory.mktemp("stranger"))


def _refused(capsys, argv, *words) -> str:
    rc = main([str(a) for a in argv])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("provmap: error:")]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, (argv, rc, err)
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


# -- OpenVINO sniffs the format of model.xml: ONNX too, with its external data ----------------

def _as_openvino(src, dst, xml: bytes):
    """The Relu artifact turned into an OpenVINO one whose model.xml is `xml` (no OpenVINO
    needed to build it: only Artifact.blob, what every load goes through, is exercised)."""
    manifest, files = members(src)
    p = manifest["partitions"][0]
    del files["partitions/p0/model.onnx"]
    files["partitions/p0/model.xml"], files["partitions/p0/model.bin"] = xml, b""
    p["backend"], p["files"] = "openvino", {"partitions/p0/model.xml": "",
                                            "partitions/p0/model.bin": ""}
    p["type_key"] = "provmap.openvino"
    manifest["backends"] = {"openvino": {"name": "openvino", "options": {}, "version": "x"}}
    manifest["strategy"] = "single:openvino"
    pmap = json.loads(files["map.json"])
    for k in pmap["kernels"]:  # its kernels are OpenVINO's too
        k["backend"] = "openvino"
    files["map.json"] = json.dumps(pmap).encode()
    return repack(dst, manifest, files)


def _onnx_reading(location: str) -> bytes:
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="add")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
                          [external("w", location)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=8).SerializeToString()


_IR = (b'<?xml version="1.0"?>\n<net name="g" version="11"><layers/><edges/></net>\n')


@pytest.mark.parametrize("xml,why", [
    # Measured: `provmap run` in the directory holding secret.bin added its bytes to x.
    (_onnx_reading("secret.bin"), "not an OpenVINO IR"),
    (b'<?xml version="1.0"?>\n<!DOCTYPE net [<!ENTITY e SYSTEM "file:///etc/passwd">]>\n'
     b'<net name="&e;" version="11"/>', "without a document type"),
    (b"<model/>", "expected <net>"),
])
def test_openvino_model_xml_must_be_an_ir(art, tmp_path, monkeypatch, xml, why):
    bad = _as_openvino(art, tmp_path / "ov.provmap", xml)
    (tmp_path / "secret.bin").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ProvmapError, match=f"partitions/p0/model.xml: refused: .*{why}"):
        read_artifact(bad).blob("p0")


def test_an_openvino_ir_passes_the_check(art, tmp_path):
    blob = read_artifact(_as_openvino(art, tmp_path / "ov.provmap", _IR)).blob("p0")
    assert blob.files["model.xml"] == _IR


# -- the HTML report: names and ids from map.json -------------------------------------------

def _renamed(src, dst, node_id=None, name=None):
    """The artifact with its one ONNX node's id (everywhere it is named) or name replaced."""
    manifest, files = members(src)
    mp = json.loads(files["map.json"])
    node = mp["onnx_nodes"][0]
    old = node["id"]
    if name is not None:
        node["name"] = name
    if node_id is not None:
        node["id"] = node_id
        mp["node_exprs"] = [[node_id if x == old else x for x in t] for t in mp["node_exprs"]]
        for p in manifest["partitions"]:
            for k in ("onnx_nodes", "ops"):
                p[k] = [node_id if x == old else x for x in p[k]]
    files["map.json"] = json.dumps(mp).encode()
    return repack(dst, manifest, files)


_INJECT = '"><b id="pwnd">x</b><i a="'


def test_report_escapes_node_ids_in_the_graph_and_the_detail_panel(art, tmp_path):
    """A node id was concatenated into innerHTML unescaped (data-id="..." and the detail
    panel's ID row): an id closing the attribute added elements, script included."""
    from browser import chromium

    bad = _renamed(art, tmp_path / "xss.provmap", node_id=_INJECT)
    assert main(["report", str(bad), "-o", str(tmp_path / "r.html")]) == 0
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--virtual-time-budget=10000", "--window-size=1400,900", "--dump-dom"]
    uri = (tmp_path / "r.html").as_uri() + "#node=" + urllib.parse.quote(_INJECT)
    dom = subprocess.run([chromium(), *flags, uri], capture_output=True, text=True,
                         timeout=120).stdout
    body = re.search(r"<body[^>]*>", dom)
    assert body and 'data-rendered="ok"' in body.group(0), dom[-2000:]
    assert '<b id="pwnd"' not in dom  # no element made from the id
    assert '&lt;b id="pwnd"&gt;' in dom  # the id is shown, as text


def test_report_embeds_no_markup_from_names(art, tmp_path):
    """"<!--<script>" in a name put the parser in a state where the page's own </script>
    no longer ended the data: no <, > or & from the artifact reaches the page raw."""
    bad = _renamed(art, tmp_path / "c.provmap", name="<!--<script>&amp;")
    assert main(["report", str(bad), "-o", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    assert "<!--<script>" not in page
    assert "\\u003c!--\\u003cscript\\u003e\\u0026amp;" in page


# -- map.sqlite is the sender's database, and `inspect --sqlite` writes into it -------------

@pytest.mark.parametrize("ddl", [
    # Measured: this trigger wrote 800 MB in 18 s under `inspect --sqlite`.
    "CREATE TRIGGER t AFTER INSERT ON meta BEGIN INSERT INTO junk WITH RECURSIVE c(x) AS "
    "(SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 100000) SELECT randomblob(1000) FROM c; END",
    "CREATE VIEW v AS SELECT * FROM meta",
    "CREATE INDEX evil ON meta (length(zeroblob(100000000)))",
])
def test_map_sqlite_with_code_in_its_schema_is_refused(capsys, art, tmp_path, ddl):
    manifest, files = members(art)
    db = tmp_path / "m.sqlite"
    db.write_bytes(files["map.sqlite"])
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE junk (b)")
    con.execute(ddl)
    con.commit()
    con.close()
    files["map.sqlite"] = db.read_bytes()
    bad = repack(tmp_path / "t.provmap", manifest, files)
    _refused(capsys, ["inspect", bad, "--sqlite", tmp_path / "out.sqlite"], "map.sqlite",
             "not in provmap's map schema")
    assert not (tmp_path / "out.sqlite").exists()


def test_an_honest_map_sqlite_still_gets_its_placement_table(art, tmp_path):
    assert main(["inspect", str(art), "--sqlite", str(tmp_path / "out.sqlite")]) == 0
    con = sqlite3.connect(tmp_path / "out.sqlite")
    assert con.execute("SELECT count(*) FROM placement").fetchone() == (1,)


# -- the zip directory itself ----------------------------------------------------------------

def test_a_zip_directory_of_many_members_is_refused_before_it_is_parsed(capsys, art, tmp_path):
    """200k empty members (a 20 MB file) took 184 MB in zipfile's parse of the directory
    before any check ran; a million would be a gigabyte."""
    manifest, files = members(art)
    bad = repack(tmp_path / "many.provmap", manifest, files)
    with zipfile.ZipFile(bad, "a") as z:
        for i in range(60_000):
            z.writestr(f"x/{i}", b"")
    _refused(capsys, ["inspect", bad], "many.provmap", "60006 members")


# -- ONNX Runtime's own log --------------------------------------------------------------------

def test_onnx_runtime_prints_no_raw_node_names_when_a_run_fails(art, tmp_path):
    """provmap escapes what it prints, but ORT logged the failing node's name itself, colored
    and raw, before provmap's error line: a name holding escape sequences drove the terminal.
    Here a ConstantOfShape of 2^40 floats (a 4 TB allocation ORT refuses) named so."""
    from cli_runner import one_error, provmap

    manifest, files = members(art)
    shape = helper.make_tensor("s", TensorProto.INT64, [2], [1 << 20, 1 << 20])
    g = helper.make_graph(
        [helper.make_node("ConstantOfShape", ["s"], ["big"], name="\x1b]0;pwned\x07\x1b[2J"),
         helper.make_node("ReduceSum", ["big"], ["r"], name="rs", keepdims=0),
         helper.make_node("Add", ["x", "r"], ["y"], name="add")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], [shape])
    files["partitions/p0/model.onnx"] = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()
    manifest["backends"]["onnxruntime"]["options"] = {"optimization": "disable"}
    bad = repack(tmp_path / "cos.provmap", manifest, files)
    r = provmap("run", bad, "--random")
    one_error(r, "run failed", "\\x1b]0;pwned")
    assert "\x1b" not in r.stderr + r.stdout


def test_external_data_in_training_info_is_refused_too(art, tmp_path, monkeypatch):
    """training_info's graphs hold initializers as well; ORT skips them today, but the rule is
    "no external reference anywhere", not "none ORT happens to read"."""
    from provmap.runtime_module.module import load

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    model.training_info.add().initialization.CopyFrom(
        helper.make_graph([], "init", [], [], [external("w", "secret.bin")]))
    manifest, files = members(art)
    files["partitions/p0/model.onnx"] = model.SerializeToString()
    bad = repack(tmp_path / "ti.provmap", manifest, files)
    (tmp_path / "secret.bin").write_bytes(bytes(16))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ProvmapError, match="training_info.*refers to external data 'secret.bin'"):
        load(bad).run({"x": np.zeros(4, np.float32)})


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "-Infinity", "1" + "0" * 400])
def test_profile_numbers_must_be_finite(capsys, art, tmp_path, bad):
    """Python's json reads NaN, Infinity and 1e400 (inf); the page's JSON.parse refused the
    data and the report stayed blank ("No number after minus sign")."""
    from provmap.runtime_module import trust

    with zipfile.ZipFile(art) as z:
        digest = trust.manifest_digest(z.read("manifest.json"))
    prof = tmp_path / "p.json"
    prof.write_text('{"artifact_digest": "%s", "partitions": [{"partition": "p0", "ms": %s}]}'
                    % (digest, bad))
    _refused(capsys, ["report", art, "--profile", prof, "-o", tmp_path / "r.html"],
             "partitions[0].ms", "not a finite number")
    assert not (tmp_path / "r.html").exists()


def test_json_output_is_strict_whatever_the_manifest_holds(art, tmp_path):
    """`inspect --json` printed NaN/-Infinity from free-form manifest fields (`host`), which
    strict parsers (jq, JSON.parse) refuse (issue 52): they come out null."""
    from attack_kit import members, repack
    from cli_runner import provmap

    manifest, files = members(art)
    manifest["host"] = {**manifest.get("host", {}), "nan": float("nan"),
                        "inf": [float("-inf"), 1.5]}
    bad = repack(tmp_path / "nan.provmap", manifest, files)

    def no_constants(c):
        raise AssertionError(f"{c} is not JSON")

    for args in (("inspect", bad, "--json"), ("explain", bad, "--json"),
                 ("lookup", bad, "--onnx-node", "relu", "--json")):
        r = provmap(*args)
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout, parse_constant=no_constants)
        if args[0] == "inspect":
            assert out["host"]["nan"] is None and out["host"]["inf"] == [None, 1.5], out["host"]


# -- a stranger's manifest that disagrees with itself or its map (issue 36, fifth afternoon) --

def _edited(art, dst, edit):
    manifest, files = members(art)
    edit(manifest)
    return repack(dst, manifest, files)


@pytest.mark.parametrize("edit, words", [
    (lambda m: m.update(strategy="single:openvino"),
     ("partitions[0].backend", "is not a backend of strategy 'single:openvino'")),
    (lambda m: m["coverage"].update(onnx_nodes_mapped=999),
     ("coverage.onnx_nodes_mapped: 999 is not a count",)),
    (lambda m: m["model"]["inputs"][0].update(shape=[8], bytes=32),
     ("partitions[0].inputs[0]", "float32[4] here but float32[8] where it is made")),
    (lambda m: m["partitions"][0]["inputs"][0].update(dtype="float64", bytes=32),
     ("partitions[0].inputs[0]", "float64[4] here")),
    (lambda m: m["partitions"][0].update(onnx_nodes=[]),
     ("map.json: onnx_nodes[0]", "runs in no partition of manifest.json")),
    (lambda m: m.update(partitions=[]),  # the outputs, then the map's kernels, have no maker
     ("model.outputs[0]", "is made by no partition")),
    # model.outputs as their makers say (tenth afternoon: inspect showed a float64 output of a
    # float32 partition, and an output nothing makes was refused only by `run`)
    (lambda m: m["model"]["outputs"][0].update(dtype="float64", bytes=32),
     ("model.outputs[0]", "float64[4] here but float32[4] where it is made")),
    (lambda m: m["model"]["outputs"][0].update(name="ghost"),
     ("model.outputs[0]", "'ghost' is made by no partition, is no graph input")),
    (lambda m: m["model"]["outputs"].append(dict(m["model"]["outputs"][0])),
     ("model.outputs[1]", "is listed twice")),
])
def test_a_manifest_that_disagrees_with_itself_or_its_map_is_refused(capsys, art, tmp_path,
                                                                      edit, words):
    """Each was printed by inspect as given, exit 0 (0 partitions beside "1 ran on a
    backend", coverage 999 of 8, a strategy naming a library no partition uses)."""
    bad = _edited(art, tmp_path / "bad.provmap", edit)
    _refused(capsys, ["inspect", bad], *words)


def test_a_kernel_of_another_library_than_its_partition_is_refused(capsys, art, tmp_path):
    """lookup printed a stranger's map kernel "[openvino, ...] in p0" inside an ONNX Runtime
    partition as given (tenth afternoon)."""
    manifest, files = members(art)
    d = json.loads(files["map.json"])
    d["kernels"][0]["backend"] = "openvino"
    files["map.json"] = json.dumps(d).encode()
    bad = repack(tmp_path / "bad.provmap", manifest, files)
    _refused(capsys, ["lookup", bad, "--onnx-node", "relu"], "map.json: kernels[0].backend",
             "'openvino', but its partition 'p0' runs on 'onnxruntime'")


def test_an_option_value_the_backend_refuses_is_refused_before_running(capsys, art, tmp_path):
    bad = _edited(art, tmp_path / "bad.provmap",
                  lambda m: m["backends"]["onnxruntime"]["options"].update(threads="٣"))
    _refused(capsys, ["run", bad, "--random"], "backends.onnxruntime.options.threads",
             "is refused")


@pytest.mark.parametrize("rename, words", [
    ("input", ("partition p0's code reads tensor 'secret'", "not among its manifest inputs")),
    ("output", ("partition p0's code writes tensor 'secret'", "not among its manifest outputs")),
])
def test_names_the_code_itself_gives_are_checked_against_the_manifest(capsys, art, tmp_path,
                                                                      rename, words):
    """Without names in blob_meta, ONNX Runtime's runner takes them from the partition's own
    model file, which no schema reads: a name nothing produces failed deep in the run."""
    import onnx

    manifest, files = members(art)
    p = manifest["partitions"][0]
    for k in ("input_names", "output_names"):
        p["blob_meta"].pop(k, None)
    member = next(f for f in p["files"] if f.endswith(".onnx"))
    m = onnx.load_from_string(files[member])
    old = (m.graph.input if rename == "input" else m.graph.output)[0].name
    for n in m.graph.node:
        n.input[:] = ["secret" if x == old else x for x in n.input]
        n.output[:] = ["secret" if x == old else x for x in n.output]
    (m.graph.input if rename == "input" else m.graph.output)[0].name = "secret"
    files[member] = m.SerializeToString()
    bad = repack(tmp_path / "bad.provmap", manifest, files)
    _refused(capsys, ["run", bad, "--random", "--trust"], *words)


def test_a_partition_relabelled_to_another_library_is_refused(capsys, tmp_path):
    """A TVM partition (lib.so) whose backend was edited to onnxruntime: `trust` said it needs
    no trust and inspect showed an ONNX Runtime partition; `run` failed late without naming
    the field (eleventh afternoon).  Now the type key and the native member are checked."""
    import onnx
    from attack_kit import relu_model

    src, onnx_path = tmp_path / "t.provmap", tmp_path / "relu.onnx"
    onnx.save(relu_model(), onnx_path)
    assert main(["compile", str(onnx_path), "-o", str(src), "--strategy", "single:tvm"]) == 0
    capsys.readouterr()
    manifest, files = members(src)
    manifest["partitions"][0]["backend"] = "onnxruntime"
    manifest["backends"] = {"onnxruntime": {**manifest["backends"]["tvm"], "name": "onnxruntime"}}
    manifest["strategy"] = "single:onnxruntime"
    pmap = json.loads(files["map.json"])
    for k in pmap["kernels"]:
        k["backend"] = "onnxruntime"
    files["map.json"] = json.dumps(pmap).encode()
    bad = repack(tmp_path / "bad.provmap", manifest, files)
    for cmd in (["inspect", bad], ["trust", bad]):
        _refused(capsys, cmd, "partitions[0].type_key", "'provmap.tvm', but the partition's "
                 "backend is 'onnxruntime'")
    manifest["partitions"][0]["type_key"] = "provmap.onnxruntime"
    bad = repack(tmp_path / "bad2.provmap", manifest, files)
    _refused(capsys, ["inspect", bad], "partitions[0].files", "native code in a partition of "
             "'onnxruntime'")


@pytest.mark.parametrize("table, role", [("node_exprs", "bogus"), ("site_exprs", "<script>")])
def test_a_role_the_map_does_not_document_is_refused(capsys, art, tmp_path, table, role):
    """lookup printed a stranger's role ("<script>") after the node as given (twelfth
    afternoon L1); the two roles each table documents are the only ones read."""
    manifest, files = members(art)
    d = json.loads(files["map.json"])
    assert d[table], table
    d[table][0][2] = role
    files["map.json"] = json.dumps(d).encode()
    bad = repack(tmp_path / "bad.provmap", manifest, files)
    _refused(capsys, ["lookup", bad, "--onnx-node", "relu"], f"map.json: {table}[0][2]",
             "is not one of")


@pytest.mark.parametrize("member, key", [("manifest.json", "format_version"),
                                         ("map.json", "schema_version")])
def test_a_version_that_is_not_an_integer_is_refused(capsys, art, tmp_path, member, key):
    """schema_version 1.0 read as 1 (twelfth afternoon): a version is an integer."""
    manifest, files = members(art)
    if member == "manifest.json":
        manifest[key] = 1.0
    else:
        d = json.loads(files[member])
        d[key] = 1.0
        files[member] = json.dumps(d).encode()
    bad = repack(tmp_path / "bad.provmap", manifest, files)
    _refused(capsys, ["inspect", bad], "1.0", "is not supported")
