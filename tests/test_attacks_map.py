"""The map an artifact carries (issue 33), a stranger's text like the rest: map.sqlite is the
sender's database, so one with code in its schema (a trigger, a view, an index on an
expression), a corrupt one or a symbolic-link member is refused, and `inspect --sqlite` builds
its output from the checked map.json, never from the sender's tables; map.json's records of the
wrong shape, a node listed twice, a kernel of another library than its partition and a role
the format does not document are refused, each in one line naming the member and field."""

from __future__ import annotations

import json
import sqlite3
import stat
import zipfile

import pytest
from attack_kit import edited, members, relu_artifact, repack
from cli_runner import provmap, refused_in_process

from provmap.cli.main import main

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


# -- map.sqlite is the sender's database, and `inspect --sqlite` writes into it -------------

@pytest.mark.parametrize("ddl", [
    # Measured: this trigger wrote 800 MB in 18 s under `inspect --sqlite`.
    "CREATE TRIGGER t AFTER INSERT ON meta BEGIN INSERT INTO junk WITH RECURSIVE c(x) AS "
    "(SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 100000) SELECT randomblob(1000) FROM c; END",
    "CREATE VIEW v AS SELECT * FROM meta",
    "CREATE INDEX evil ON meta (length(zeroblob(100000000)))",
])
def test_map_sqlite_with_code_in_its_schema_is_refused(capsys, relu_art, tmp_path, ddl):
    manifest, files = members(relu_art)
    db = tmp_path / "m.sqlite"
    db.write_bytes(files["map.sqlite"])
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE junk (b)")
    con.execute(ddl)
    con.commit()
    con.close()
    files["map.sqlite"] = db.read_bytes()
    bad = repack(tmp_path / "t.provmap", manifest, files)
    refused_in_process(capsys, ["inspect", bad, "--sqlite", tmp_path / "out.sqlite"],
                       "map.sqlite", "not in provmap's map schema")
    assert not (tmp_path / "out.sqlite").exists()


def test_an_honest_map_sqlite_still_gets_its_placement_table(relu_art, tmp_path):
    assert main(["inspect", str(relu_art), "--sqlite", str(tmp_path / "out.sqlite")]) == 0
    con = sqlite3.connect(tmp_path / "out.sqlite")
    assert con.execute("SELECT count(*) FROM placement").fetchone() == (1,)


def test_inspect_sqlite_is_built_from_the_checked_map_not_the_senders_database(tmp_path):
    """M2: only map.sqlite edited (a node renamed, a kernel relabelled), its hash recomputed:
    inspect and lookup answered from map.json, and `inspect --sqlite` copied the sender's
    database, so its tables contradicted its own placement table and what inspect printed."""
    src = relu_artifact(tmp_path)
    manifest, files = members(src)
    db = tmp_path / "sender.sqlite"
    db.write_bytes(files["map.sqlite"])
    con = sqlite3.connect(db)
    con.execute("UPDATE onnx_nodes SET name = 'EVIL_NAME'")
    con.execute("UPDATE kernels SET backend = 'tvm'")
    con.commit()
    con.close()
    files["map.sqlite"] = db.read_bytes()
    art = repack(tmp_path / "edited.provmap", manifest, files)
    out = tmp_path / "pl.sqlite"
    r = provmap("inspect", art, "--sqlite", out)
    assert r.returncode == 0, r.stderr
    con = sqlite3.connect(out)
    try:
        assert con.execute("SELECT name FROM onnx_nodes").fetchall() == [("relu",)]
        assert {b for (b,) in con.execute("SELECT backend FROM kernels")} == {"onnxruntime"}
        assert con.execute("SELECT name, backends FROM placement").fetchall() == [
            ("relu", '["onnxruntime"]')]
    finally:
        con.close()


def test_corrupt_or_symlinked_map_sqlite_is_one_line(capsys, relu_art, tmp_path):
    bad = edited(relu_art, tmp_path / "corrupt.provmap",
                 lambda b: b"SQLite format 3\x00" + b"\xff" * 64, member="map.sqlite")
    refused_in_process(capsys, ["inspect", bad, "--sqlite", tmp_path / "out.sqlite"], "map.sqlite")
    assert not (tmp_path / "out.sqlite").exists()
    # a symbolic-link entry, as `unzip` would create it
    manifest, files = members(relu_art)
    files["map.sqlite"] = b"/etc/passwd"
    link = repack(tmp_path / "link.provmap", manifest, files)
    with zipfile.ZipFile(link) as z:
        infos = [(i, z.read(i.filename)) for i in z.infolist()]
    with zipfile.ZipFile(link, "w") as z:
        for i, data in infos:
            if i.filename == "map.sqlite":
                i.external_attr = (stat.S_IFLNK | 0o777) << 16
            z.writestr(i, data)
    refused_in_process(capsys, ["inspect", link, "--sqlite", tmp_path / "out2.sqlite"],
                       "map.sqlite", "symbolic link")


# -- map.json ---------------------------------------------------------------------------------

def test_map_json_records_of_the_wrong_shape_are_one_line(capsys, relu_art, tmp_path):
    def edit(b):
        d = json.loads(b)
        d["kernel_sites"][0]["kernel"] = "nowhere"
        return json.dumps(d).encode()
    bad = edited(relu_art, tmp_path / "bad.provmap", edit, member="map.json")
    refused_in_process(capsys, ["lookup", bad, "--kernel", "k"], "map.json",
                       "kernel_sites[0].kernel")


def test_a_map_listing_a_node_twice_is_one_line(capsys, relu_art, tmp_path):
    """Every node listed twice read "132 ran on a backend" for 66 nodes (issue 36)."""
    def edit(b):
        d = json.loads(b)
        d["onnx_nodes"] = d["onnx_nodes"] * 2
        return json.dumps(d).encode()
    bad = edited(relu_art, tmp_path / "bad.provmap", edit, member="map.json")
    refused_in_process(capsys, ["inspect", bad], "map.json", "onnx_nodes[", "listed twice")


def test_a_kernel_of_another_library_than_its_partition_is_refused(capsys, relu_art, tmp_path):
    """lookup printed a stranger's map kernel "[openvino, ...] in p0" inside an ONNX Runtime
    partition as given (tenth afternoon)."""
    manifest, files = members(relu_art)
    d = json.loads(files["map.json"])
    d["kernels"][0]["backend"] = "openvino"
    files["map.json"] = json.dumps(d).encode()
    bad = repack(tmp_path / "bad.provmap", manifest, files)
    refused_in_process(capsys, ["lookup", bad, "--onnx-node", "relu"],
                       "map.json: kernels[0].backend",
                       "'openvino', but its partition 'p0' runs on 'onnxruntime'")


@pytest.mark.parametrize("table, role", [("node_exprs", "bogus"), ("site_exprs", "<script>")])
def test_a_role_the_map_does_not_document_is_refused(capsys, relu_art, tmp_path, table, role):
    """lookup printed a stranger's role ("<script>") after the node as given (twelfth
    afternoon L1); the two roles each table documents are the only ones read."""
    manifest, files = members(relu_art)
    d = json.loads(files["map.json"])
    assert d[table], table
    d[table][0][2] = role
    files["map.json"] = json.dumps(d).encode()
    bad = repack(tmp_path / "bad.provmap", manifest, files)
    refused_in_process(capsys, ["lookup", bad, "--onnx-node", "relu"], f"map.json: {table}[0][2]",
                       "is not one of")
