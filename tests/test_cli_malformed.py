"""Every subcommand, given malformed files where it reads one, and edited artifacts whose
fields are of the wrong type or size (issue 33): each is one `provmap: error:` line and exit 2
that names the file (and the member and field), never a traceback, and never the wrapper's
fallback for an exception nobody expected.  In-process (`provmap.cli.main.main`) so the walk
over every command and input stays fast."""

from __future__ import annotations

import json
import os
import stat
import zipfile

import numpy as np
import onnx
import pytest
from attack_kit import members, relu_artifact, relu_model, repack

from provmap.cli.main import main

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def refused(capsys, argv, *words) -> str:
    """main(argv) is exit 2 with exactly one deliberate error line holding every word."""
    rc = main([str(a) for a in argv])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("provmap: error:")]
    assert rc == 2 and len(lines) == 1, (argv, rc, err)
    assert "Traceback" not in err and "internal error" not in lines[0], (argv, err)
    for w in words:
        assert w in lines[0], (argv, w, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def art(tmp_path_factory):
    return relu_artifact(tmp_path_factory.mktemp("malformed"))


@pytest.fixture(scope="module")
def junk(tmp_path_factory):
    d = tmp_path_factory.mktemp("junk")
    (d / "empty.bin").write_bytes(b"")
    (d / "text.txt").write_text("hello\n")
    (d / "deep.json").write_text("[" * 1_000_000)
    (d / "garbage.onnx").write_bytes(b"\x08\x07\xff\xfe garbage that is no protobuf" * 10)
    with zipfile.ZipFile(d / "list.provmap", "w") as z:
        z.writestr("manifest.json", "[]")
    (d / "dir").mkdir()
    return {k: d / v for k, v in (("empty", "empty.bin"), ("text", "text.txt"),
                                  ("deep", "deep.json"), ("garbage", "garbage.onnx"),
                                  ("zip", "list.provmap"), ("dir", "dir"),
                                  ("missing", "missing.provmap"))}


_COMMANDS = [
    ("map", "{f}", "-o", "{o}/m"),
    ("compile", "{f}", "-o", "{o}/c.provmap", "--strategy", "single:onnxruntime"),
    ("run", "{f}", "--random"),
    ("trust", "{f}"),
    ("inspect", "{f}"),
    ("inspect", "{f}", "--json"),
    ("lookup", "{f}", "--kernel", "k"),
    ("compare", "{f}"),
    ("bisect", "{f}", "--backend", "onnxruntime"),
    ("profile", "{f}"),
    ("report", "{f}", "-o", "{o}/r.html"),
    ("annotate", "{f}", "-o", "{o}/a.onnx"),
    ("explain", "{f}"),
    ("overlays", "{f}", "-o", "{o}/ov"),
    ("bench", "{f}", "-o", "{o}/b", "--strategies", "single:onnxruntime"),
    # the second file a command reads
    ("report", "{a}", "-o", "{o}/r.html", "--profile", "{f}"),
    ("overlays", "{a}", "-o", "{o}/ov", "--profile", "{f}"),
    ("run", "{a}", "--inputs", "{f}"),
    ("inspect", "{a}", "--model", "{f}"),
    ("compare", "{a}", "--model", "{f}"),
]


def test_every_command_refuses_malformed_files_in_one_line(capsys, art, junk, tmp_path):
    """One walk over every subcommand and every malformed file (all reported together)."""
    wrong = []
    for cmd in _COMMANDS:
        for kind, f in junk.items():
            argv = [x.format(f=f, o=tmp_path, a=art) for x in cmd]
            try:
                refused(capsys, argv, str(f))
            except AssertionError as e:  # noqa: PERF203 - collected, reported below
                wrong.append(f"{kind}: {' '.join(cmd)}: {str(e).splitlines()[0][:300]}")
    assert not wrong, "\n".join(wrong)


# -- edited manifests: fields of the wrong type, size or place ----------------------------------

def _edit(src, dst, fn, *, member=None):
    manifest, files = members(src)
    if member is None:
        fn(manifest)
    else:
        files[member] = fn(files[member])
    return repack(dst, manifest, files)


def _set(path, value):
    def fn(m):
        *head, last = path
        for k in head:
            m = m[k]
        m[last] = value
    return fn


_MANIFEST_EDITS = {
    "partitions-str": (_set(["partitions"], "x"), "partitions"),
    "model-list": (_set(["model"], []), "model"),
    "ops-int": (_set(["partitions", 0, "ops"], 12345), "partitions[0].ops"),
    "id-null": (_set(["partitions", 0, "id"], None), "partitions[0].id"),
    "kernels-int": (_set(["partitions", 0, "kernels"], [1]), "partitions[0].kernels[0]"),
    "files-escape": (_set(["partitions", 0, "files"], {"../../etc/passwd": "0" * 64}),
                     "partitions[0].files"),
    "onnx-nodes-unknown": (_set(["partitions", 0, "onnx_nodes"], ["n000000000000"]),
                           "partitions[0].onnx_nodes"),
    "shape-negative": (_set(["model", "inputs", 0, "shape"], [-5, 3]), "model.inputs[0].shape[0]"),
    "shape-huge": (_set(["model", "inputs", 0, "shape"], [10**12, 10**12]),
                   "model.inputs[0].shape"),
    "shape-float": (_set(["model", "inputs", 0, "shape"], [1.5, "x"]), "model.inputs[0].shape[0]"),
    "dtype-bad": (_set(["model", "inputs", 0, "dtype"], "rubbish"), "model.inputs[0].dtype"),
    "schedule-threads": (_set(["schedule"], {"stages": [["p0"]], "threads": {"p0": 10**12}}),
                         "schedule.threads.p0"),
    "schedule-stages": (_set(["schedule"], {"stages": "p0"}), "schedule.stages"),
    "version-bool": (_set(["format_version"], True), "format version"),
    "deep-plan-info": (_set(["plan_info"], json.loads("[" * 200 + "]" * 200)), "plan_info"),
    # a name nothing makes, in the manifest's inputs only (blob_meta still names the real one):
    # inspect called it a graph input and only `run` refused it (the fourteenth afternoon)
    "input-name-forged": (lambda m: (_set(["partitions", 0, "inputs", 0, "name"], "nope")(m),
                                     _set(["partitions", 0, "runner_inputs"], ["nope"])(m)),
                          "partitions[0].inputs"),
}


@pytest.mark.parametrize("edit", sorted(_MANIFEST_EDITS))
def test_edited_manifest_fields_are_one_line_naming_the_field(capsys, art, tmp_path, edit):
    fn, field = _MANIFEST_EDITS[edit]
    bad = _edit(art, tmp_path / "bad.provmap", fn)
    for argv in (["inspect", bad], ["lookup", bad, "--onnx-node", "relu"], ["explain", bad],
                 ["run", bad, "--random"]):
        refused(capsys, argv, "bad.provmap", field)


def test_deep_json_in_manifest_map_and_profile_is_one_line(capsys, art, tmp_path):
    manifest, files = members(art)
    deep = b"[" * 1_000_000
    bad = repack(tmp_path / "m.provmap", manifest, files, raw_manifest=deep)
    refused(capsys, ["inspect", bad], "m.provmap", "manifest.json", "nested too deeply")
    bad = _edit(art, tmp_path / "map.provmap", lambda b: deep, member="map.json")
    refused(capsys, ["lookup", bad, "--kernel", "k"], "map.provmap", "map.json",
            "nested too deeply")
    prof = tmp_path / "p.json"
    prof.write_bytes(deep)
    refused(capsys, ["report", art, "-o", tmp_path / "r.html", "--profile", prof], "p.json",
            "nested too deeply")


def test_map_json_records_of_the_wrong_shape_are_one_line(capsys, art, tmp_path):
    def edit(b):
        d = json.loads(b)
        d["kernel_sites"][0]["kernel"] = "nowhere"
        return json.dumps(d).encode()
    bad = _edit(art, tmp_path / "bad.provmap", edit, member="map.json")
    refused(capsys, ["lookup", bad, "--kernel", "k"], "map.json", "kernel_sites[0].kernel")


def test_a_map_listing_a_node_twice_is_one_line(capsys, art, tmp_path):
    """Every node listed twice read "132 ran on a backend" for 66 nodes (issue 36)."""
    def edit(b):
        d = json.loads(b)
        d["onnx_nodes"] = d["onnx_nodes"] * 2
        return json.dumps(d).encode()
    bad = _edit(art, tmp_path / "bad.provmap", edit, member="map.json")
    refused(capsys, ["inspect", bad], "map.json", "onnx_nodes[", "listed twice")


def test_object_array_constant_is_refused(capsys, art, tmp_path):
    import io

    manifest, files = members(art)
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    files["constants/0.npy"] = buf.getvalue()
    manifest["constant_outputs"] = {"y": "constants/0.npy"}
    bad = repack(tmp_path / "obj.provmap", manifest, files)
    refused(capsys, ["run", bad, "--random"], "constants/0.npy", "object")


def test_corrupt_or_symlinked_map_sqlite_is_one_line(capsys, art, tmp_path):
    bad = _edit(art, tmp_path / "corrupt.provmap", lambda b: b"SQLite format 3\x00" + b"\xff" * 64,
                member="map.sqlite")
    refused(capsys, ["inspect", bad, "--sqlite", tmp_path / "out.sqlite"], "map.sqlite")
    assert not (tmp_path / "out.sqlite").exists()
    # a symbolic-link entry, as `unzip` would create it
    manifest, files = members(art)
    files["map.sqlite"] = b"/etc/passwd"
    link = repack(tmp_path / "link.provmap", manifest, files)
    with zipfile.ZipFile(link) as z:
        infos = [(i, z.read(i.filename)) for i in z.infolist()]
    with zipfile.ZipFile(link, "w") as z:
        for i, data in infos:
            if i.filename == "map.sqlite":
                i.external_attr = (stat.S_IFLNK | 0o777) << 16
            z.writestr(i, data)
    refused(capsys, ["inspect", link, "--sqlite", tmp_path / "out2.sqlite"], "map.sqlite",
            "symbolic link")


def test_input_shapes_are_bounded_when_given(capsys, tmp_path):
    m = relu_model()
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "n"
    m.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "n"
    onnx.save(m, tmp_path / "dyn.onnx")
    out = tmp_path / "dyn.provmap"
    for spec, words in (("x=99999999999999999999", ("int64",)),
                        ("x=4294967297x4294967297", ("memory",))):
        refused(capsys, ["compile", tmp_path / "dyn.onnx", "-o", out, "--strategy",
                         "single:onnxruntime", "--input-shape", spec], "--input-shape", *words)
    assert not out.exists()
    assert not os.path.exists(str(out) + ".tmp")


def test_unknown_backend_in_a_manifest_is_one_line(capsys, art, tmp_path):
    def fn(m):
        m["backends"]["nosuch"] = m["backends"].pop("onnxruntime")
        m["partitions"][0]["backend"] = "nosuch"
        m["partitions"][0]["type_key"] = "provmap.nosuch"
        m["strategy"] = "single:nosuch"
    bad = _edit(art, tmp_path / "nb.provmap", fn)
    refused(capsys, ["run", bad, "--random", "--trust"], "nosuch")


def test_trust_list_that_is_corrupt_sqlite_is_one_line(capsys, tmp_path, monkeypatch):
    lst = tmp_path / "list"
    lst.write_bytes(b"SQLite format 3\x00" + b"\x00" * 84)
    monkeypatch.setenv("PROVMAP_TRUST", str(lst))
    rc = main(["trust", "--list"])
    err = capsys.readouterr().err
    assert rc in (0, 2) and "Traceback" not in err and "internal error" not in err, err


def test_a_library_failing_to_import_while_the_parser_is_built_is_one_line(capsys,
                                                                          monkeypatch):
    """Building the parser imports the backends' option tables; a broken installation (seen:
    torch's libraries half-installed under TVM's import) printed a traceback."""
    import provmap.cli.main as cli_main

    def broken():
        raise OSError("libtorch_global_deps.so: cannot open shared object file")
    monkeypatch.setattr(cli_main, "build_parser", broken)
    refused(capsys, ["inspect", "x.provmap"], "cannot start", "libtorch_global_deps.so")


def test_explain_on_a_plan_info_of_the_wrong_shape_is_one_line(capsys, art, tmp_path):
    """plan_info is the search's free-form record: an edited one gave an internal TypeError."""
    bad = _edit(art, tmp_path / "bad.provmap", _set(["plan_info"], {"decisions": "x",
                                                                    "fallbacks": 5}))
    refused(capsys, ["explain", bad], "bad.provmap", "plan_info is not what provmap writes")
