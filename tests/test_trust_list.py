"""The trust list through the real CLI (issue 26): only code is recorded, one entry per digest,
list/revoke/prune (by path, by a long enough digest prefix), the old text format still read (and
converted, through a link, keeping the text beside it), and the user's own list never touched.
A file PROVMAP_TRUST names that is not a trust list (notes, comments only, someone else's
database, a corrupt one) is refused, said before a native build, and never rewritten."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import onnx
import pytest
from attack_kit import relu_model
from cli_models import external_data_model
from cli_runner import digest, one_error, one_line_refusal, provmap, refused

from provmap.cli.main import main
from provmap.runtime_module import trust
from small_models import conv_relu, twin_branches


def _cli(*args, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "provmap.cli.main", *map(str, args)],
                          capture_output=True, text=True, env=env or dict(os.environ), cwd=cwd,
                          timeout=300)


def _ok(*args, **kw):
    r = _cli(*args, **kw)
    assert r.returncode == 0, (args, r.stderr)
    return r


@pytest.fixture
def work(tmp_path, monkeypatch):
    lst = tmp_path / "trusted"
    monkeypatch.setenv("PROVMAP_TRUST", str(lst))
    onnx.save(conv_relu(), tmp_path / "a.onnx")
    onnx.save(twin_branches(), tmp_path / "b.onnx")
    return tmp_path, lst


def _entries():
    return json.loads(_ok("trust", "--list", "--json").stdout)["entries"]


def test_onnxruntime_only_builds_add_nothing(work):
    d, lst = work
    for _ in range(2):
        _ok("compile", d / "a.onnx", "-o", d / "ort.provmap", "--strategy", "single:onnxruntime")
    assert not lst.exists()  # no code, no entry: the list is not even created
    _ok("run", d / "ort.provmap", "--random")  # and it runs without trust
    r = _ok("trust", d / "ort.provmap")
    assert "needs no trust" in r.stdout and not lst.exists()


def test_rebuilding_a_tvm_artifact_keeps_one_entry(work):
    d, lst = work
    art = d / "tvm.provmap"
    for _ in range(2):
        _ok("compile", d / "a.onnx", "-o", art, "--strategy", "single:tvm")
    (e,) = _entries()
    assert e["path"] == str(art) and os.path.isabs(e["path"]) and e["how"] == "built"
    assert e["backends"] == "tvm" and e["stale"] is None
    _ok("run", art, "--random")  # the entry is the current build's: it runs without --trust
    # an ORT-only build over the same file: the TVM entry's file is gone, so is the entry
    _ok("compile", d / "a.onnx", "-o", art, "--strategy", "single:onnxruntime")
    assert _entries() == []


def test_list_revoke_prune(work):
    d, lst = work
    a, b = d / "a.provmap", d / "b.provmap"
    _ok("compile", d / "a.onnx", "-o", a, "--strategy", "single:tvm")
    _ok("compile", d / "b.onnx", "-o", b, "--strategy", "single:tvm")
    listed = _ok("trust", "--list").stdout
    assert f"2 trusted artifact(s) in {lst}" in listed and str(a) in listed and str(b) in listed

    r = _ok("trust", "--revoke", a)  # by artifact file
    assert "revoked" in r.stdout
    assert [e["path"] for e in _entries()] == [str(b)]
    r = _cli("run", a, "--random")
    assert r.returncode == 2 and "refused to load partition p0 (tvm)" in r.stderr
    _ok("trust", a)  # the user's own decision brings it back
    _ok("run", a, "--random")
    digest = next(e["digest"] for e in _entries() if e["path"] == str(a))
    _ok("trust", "--revoke", digest[:12])  # by digest prefix
    assert [e["path"] for e in _entries()] == [str(b)]
    r = _cli("trust", "--revoke", digest[:12])
    assert r.returncode == 2 and "no such entry" in r.stderr and "Traceback" not in r.stderr

    _ok("trust", a)
    b.unlink()
    assert "file is gone" in _ok("trust", "--list").stdout
    r = _ok("trust", "--prune")
    assert "pruned" in r.stdout and str(b) in r.stdout and "1 entry pruned, 1 left" in r.stdout
    assert [e["path"] for e in _entries()] == [str(a)]


def test_old_text_list_is_read_then_converted(work, tmp_path):
    d, lst = work
    art = d / "old.provmap"
    elsewhere = dict(os.environ, PROVMAP_TRUST=str(tmp_path / "other-list"))
    _ok("compile", d / "a.onnx", "-o", art, "--strategy", "single:tvm", env=elsewhere)
    digest = json.loads(_ok("trust", "--list", "--json", env=elsewhere).stdout)["entries"][0]["digest"]
    other = "f" * 64
    lst.write_text(f"{digest}  # 2025-01-01T00:00:00+00:00 built here: {art}\n"
                   f"{digest}  # 2025-01-02T00:00:00+00:00 built here: {art}\n"
                   f"{other}  # 2025-01-03T00:00:00+00:00 built here: out/rel.provmap\n")
    _ok("run", art, "--random")  # the old list still grants trust...
    assert lst.read_bytes().startswith(b"SQLite format 3\x00")  # ...and is now the table
    es = {e["digest"]: e for e in _entries()}
    assert set(es) == {digest, other}  # one entry per digest
    assert es[digest]["path"] == str(art) and es[digest]["how"] == "migrated"
    assert es[other]["path"] is None and "out/rel.provmap" in es[other]["note"]
    # the lookup is the table's key, not a scan
    con = sqlite3.connect(lst)
    plan = " ".join(r[-1] for r in con.execute(
        "EXPLAIN QUERY PLAN SELECT 1 FROM trusted WHERE digest = ?", (digest,)))
    con.close()
    assert "PRIMARY KEY" in plan and "SCAN" not in plan, plan
    r = _ok("trust", "--prune")  # a relative path from the old notes: its file cannot be found
    assert other in r.stdout and [e["digest"] for e in _entries()] == [digest]


def test_help_says_where_the_list_lives(work):
    d, lst = work
    out = _ok("trust", "--help").stdout
    assert "PROVMAP_TRUST" in out and "XDG_CONFIG_HOME" in out
    assert str(lst) in out.replace("\n", " ").replace("  ", " ")


def test_default_location_and_builds_without_code_leave_it_alone(tmp_path, monkeypatch):
    """PROVMAP_TRUST unset, HOME and XDG_CONFIG_HOME pointed here: an ORT-only build creates
    nothing under the default location; a TVM build records itself exactly there."""
    onnx.save(conv_relu(), tmp_path / "a.onnx")
    env = {k: v for k, v in os.environ.items() if k != "PROVMAP_TRUST"}
    env.update(HOME=str(tmp_path / "home"), XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    _ok("compile", tmp_path / "a.onnx", "-o", tmp_path / "ort.provmap", "--strategy",
        "single:onnxruntime", env=env)
    assert not (tmp_path / "xdg").exists() and not (tmp_path / "home" / ".config").exists()
    _ok("compile", tmp_path / "a.onnx", "-o", tmp_path / "tvm.provmap", "--strategy",
        "single:tvm", env=env)
    default = tmp_path / "xdg" / "provmap" / "trusted-artifacts.sqlite"
    assert default.is_file() and not (tmp_path / "home" / ".config").exists()
    assert str(default) in _ok("trust", "--list", env=env).stdout
    del env["XDG_CONFIG_HOME"]
    assert str(tmp_path / "home" / ".config" / "provmap" / "trusted-artifacts.sqlite") in \
        _ok("trust", "--help", env=env).stdout.replace("\n", "")


def test_bench_leaves_no_entries_for_the_artifacts_it_deletes(work):
    d, lst = work
    _ok("bench", d / "a.onnx", "-o", d / "bench", "--strategies", "single:tvm", "--backends", "tvm",
        "--repeats", "2", "--scaling-sizes", "100", "--provenance-repeats", "0")
    assert _entries() == []


def test_conformance_runner_leaves_no_entries(work):
    import numpy as np

    from provmap.bench import conformance

    d, lst = work
    x = np.ones((1, 3, 8, 8), np.float32)
    model = conv_relu()
    names = [i.name for i in model.graph.input if i.name not in
             {t.name for t in model.graph.initializer}]
    (y,) = conformance._run_provmap("tvm")(model, names, [x])
    assert np.isfinite(y).all()
    assert _entries() == []


def test_an_older_provmaps_text_list_at_the_default_location_is_copied_and_left_alone(
        tmp_path, monkeypatch):
    """The default list is a new file beside the old text one: the old entries still grant
    trust, and the old file stays byte for byte, so an older provmap sharing the machine keeps
    working (converting it in place broke that one)."""
    onnx.save(conv_relu(), tmp_path / "a.onnx")
    env = {k: v for k, v in os.environ.items() if k != "PROVMAP_TRUST"}
    env.update(HOME=str(tmp_path / "home"), XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    _ok("compile", tmp_path / "a.onnx", "-o", tmp_path / "tvm.provmap", "--strategy",
        "single:tvm", env=env)
    conf = tmp_path / "xdg" / "provmap"
    [entry] = json.loads(_ok("trust", "--list", "--json", env=env).stdout)["entries"]
    d = entry["digest"]
    (conf / "trusted-artifacts.sqlite").unlink()
    old = conf / "trusted-artifacts"
    old.write_text(f"{d}  # 2026-11-20T10:00:00+00:00 built here: {tmp_path / 'tvm.provmap'}\n")
    before = old.read_bytes()
    r = _ok("run", tmp_path / "tvm.provmap", "--random", env=env)  # trusted through the copy
    assert "refused" not in r.stderr
    assert old.read_bytes() == before
    assert (conf / "trusted-artifacts.sqlite").is_file()
    assert d in _ok("trust", "--list", env=env).stdout


def test_json_without_list_is_refused_not_ignored(work):
    d, lst = work
    r = _cli("trust", "--prune", "--json")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "provmap: error: trust: --json goes with --list (got --prune)"], r.stderr


def test_a_native_build_the_list_could_not_record_ends_with_a_warning(work, tmp_path,
                                                                       monkeypatch):
    """compile refuses a named native strategy while the list is unusable; a build whose
    artifact still holds unrecorded native code is said after the build, naming the list and
    the way out (cli/compile_trust.py), and nothing is said once it is recorded."""
    from provmap.cli.compile_trust import unrecorded_warning
    from provmap.runtime_module import trust
    from provmap.runtime_module.artifact import read_artifact

    d, _lst = work
    _ok("compile", d / "a.onnx", "-o", d / "t.provmap", "--strategy", "single:tvm")
    art = read_artifact(d / "t.provmap")
    assert unrecorded_warning(art, d / "t.provmap") is None          # recorded by compile
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    monkeypatch.setenv("PROVMAP_TRUST", str(notes))                   # the user's text file
    line = unrecorded_warning(art, d / "t.provmap")
    assert line.startswith(f"{d / 't.provmap'} holds native code (tvm) but could not be "
                           f"recorded in the trust list {notes}: ")
    assert "--trust or `provmap trust" in line and notes.read_text() == "my notes\n"
    monkeypatch.setenv("PROVMAP_TRUST", str(tmp_path / "fresh"))     # usable, this build absent
    line = unrecorded_warning(art, d / "t.provmap")
    assert "could not be recorded in the trust list" in line and not trust.is_trusted(art.digest)


def test_run_with_an_unusable_list_says_the_list_not_another_machine(work, tmp_path):
    d, _lst = work
    _ok("compile", d / "a.onnx", "-o", d / "t.provmap", "--strategy", "single:tvm")
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    r = _cli("run", d / "t.provmap", "--random", env={**os.environ, "PROVMAP_TRUST": str(notes)})
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "the trust list that records this machine's builds cannot be read" in r.stderr
    assert "did not build" not in r.stderr and notes.read_text() == "my notes\n"


@pytest.mark.usefixtures("own_config")
def test_revoking_by_too_short_a_prefix_says_so_not_no_such_entry(tmp_path):
    """`trust --revoke 82cf` (the first digits `--list` shows) said "no such entry"."""
    model = external_data_model(tmp_path / "m.onnx")
    art = tmp_path / "t.provmap"
    assert provmap("compile", model, "-o", art, "--strategy", "single:tvm").returncode == 0
    listed = provmap("trust", "--list").stdout
    entry = listed.splitlines()[1].split()[0]
    refused(provmap("trust", "--revoke", entry[:4]), "a digest prefix needs at least 8 hex "
            "digits (1 entry starts with it)")
    assert entry in provmap("trust", "--list").stdout
    r = provmap("trust", "--revoke", entry[:8])
    assert r.returncode == 0 and f"revoked {entry}" in r.stdout, r.stderr


def test_revoke_by_path_after_the_file_was_replaced(relu_art, tmp_path, monkeypatch):
    """`--list` showed the entry as "file now holds another artifact", yet `--revoke PATH`
    said there was no such entry."""
    import shutil

    lst = tmp_path / "list"
    env = dict(os.environ, PROVMAP_TRUST=str(lst))
    onnx.save(relu_model(), tmp_path / "relu.onnx")
    art = tmp_path / "a.provmap"
    assert provmap("compile", tmp_path / "relu.onnx", "-o", art, "--strategy", "single:tvm",
                   env=env).returncode == 0
    shutil.copyfile(relu_art, art)  # the path now holds another artifact
    listed = provmap("trust", "--list", env=env).stdout
    assert "file now holds another artifact" in listed
    r = provmap("trust", "--revoke", art, env=env)
    assert r.returncode == 0 and "revoked" in r.stdout, r.stderr
    assert "0 trusted artifact(s)" in provmap("trust", "--list", env=env).stdout


def test_trust_list_finds_entries_by_path_through_an_index(tmp_path, monkeypatch):
    """A rebuild deletes the entries recorded at its path: with 100k entries that was a scan
    per build (78 ms an add)."""
    import sqlite3

    monkeypatch.setenv("PROVMAP_TRUST", str(tmp_path / "list"))
    trust.add_trusted("a" * 64, tmp_path / "a.provmap", backends=["tvm"])
    con = sqlite3.connect(tmp_path / "list")
    plan = " ".join(r[-1] for r in con.execute(
        "EXPLAIN QUERY PLAN DELETE FROM trusted WHERE path = ? AND digest != ?", ("x", "y")))
    con.close()
    assert "trusted_path" in plan, plan


def test_listing_an_old_text_list_leaves_it_as_it_is(tmp_path):
    old = tmp_path / "old-list"
    text = f"{'b' * 64}  # 2025-01-01T00:00:00+00:00 built here: /x/a.provmap\n"
    old.write_text(text)
    r = provmap("trust", "--list", "--json", env=dict(os.environ, PROVMAP_TRUST=str(old)))
    assert r.returncode == 0, r.stderr
    assert [e["digest"] for e in json.loads(r.stdout)["entries"]] == ["b" * 64]
    assert old.read_text() == text  # read, not converted: listing writes nothing


def test_an_old_list_is_converted_through_its_link_and_kept_beside_it(received_tvm, tmp_path):
    """A symbolic link to an old list was replaced by a file, and the old text was gone: the
    link's target is converted, the link stays, the text is kept as NAME.old."""
    real = tmp_path / "real"
    real.mkdir()
    old = real / "list.txt"
    text = f"# mine\n{'b' * 64}  # 2025-01-01T00:00:00+00:00 built here: /x/a.provmap\n"
    old.write_text(text)
    link = tmp_path / "link"
    link.symlink_to(old)
    env = dict(os.environ, PROVMAP_TRUST=str(link))
    r = provmap("trust", received_tvm, env=env)
    assert r.returncode == 0, r.stderr
    assert link.is_symlink() and os.path.realpath(link) == str(old)
    assert old.read_bytes()[:16] == b"SQLite format 3\x00"
    assert (real / "list.txt.old").read_text() == text
    r = provmap("trust", "--list", "--json", env=env)
    assert r.returncode == 0, r.stderr
    assert "b" * 64 in [e["digest"] for e in json.loads(r.stdout)["entries"]]


# -- PROVMAP_TRUST naming a file that is not a trust list -----------------------------------

@pytest.mark.usefixtures("own_config")
def test_an_unusable_trust_list_is_said_before_a_native_build(tmp_path):
    """PROVMAP_TRUST naming a text file made compile skip recording the build silently, and
    `run` then refused the user's own artifact."""
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    env = {**os.environ, "PROVMAP_TRUST": str(notes)}
    r = provmap("compile", "bundled:squeezenet", "-o", tmp_path / "t.provmap", "--strategy",
                "single:tvm", env=env)
    one_line_refusal(r, str(notes), "not a trust list", "nothing was built")
    assert not (tmp_path / "t.provmap").exists() and notes.read_text() == "my notes\n"


def test_trust_list_never_rewrites_a_file_that_is_not_one(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\nnot a digest in sight\n")
    env = dict(os.environ, PROVMAP_TRUST=str(notes))
    for args in (("trust", "--list"), ("trust", "--prune"), ("trust", "--revoke", "a" * 64)):
        one_error(provmap(*args, env=env), "notes.txt", "not a trust list")
    assert notes.read_text() == "my notes\nnot a digest in sight\n"
    env["PROVMAP_TRUST"] = str(tmp_path)
    one_error(provmap("trust", "--list", env=env), "is a directory")


def test_a_file_of_comments_only_is_never_converted(received_tvm, tmp_path):
    """Every line a `#` comment was taken for an old-format list: a plain `run` of a TVM
    artifact rewrote the user's notes as SQLite.  An old list holds at least one digest line."""
    notes = tmp_path / "notes.txt"
    text = "# my notes\n#   nothing here is a digest\n\n"
    notes.write_text(text)
    env = dict(os.environ, PROVMAP_TRUST=str(notes))
    r = provmap("run", received_tvm, "--random", env=env)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    one_error(provmap("trust", received_tvm, env=env), "notes.txt", "not a trust list")
    assert notes.read_text() == text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


@pytest.mark.usefixtures("own_config")
def test_someone_elses_sqlite_database_is_not_made_a_trust_list(tmp_path, monkeypatch):
    import sqlite3

    db = tmp_path / "user.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE notes (t TEXT)")
    con.commit()
    con.close()
    before = digest(db)
    monkeypatch.setenv("PROVMAP_TRUST", str(db))
    r = provmap("trust", "--list")
    refused(r, str(db), "not a trust list", "notes")
    assert digest(db) == before


def test_trust_list_that_is_corrupt_sqlite_is_one_line(capsys, tmp_path, monkeypatch):
    lst = tmp_path / "list"
    lst.write_bytes(b"SQLite format 3\x00" + b"\x00" * 84)
    monkeypatch.setenv("PROVMAP_TRUST", str(lst))
    rc = main(["trust", "--list"])
    err = capsys.readouterr().err
    assert rc in (0, 2) and "Traceback" not in err and "internal error" not in err, err


def test_trust_list_json_is_laid_out_as_every_commands_json(work, relu_art):
    """`trust --list --json` indented 1, inspect and lookup 2, report and annotate not at all
    (issue 52): every command's --json is now one layout (cli/json_out.INDENT) and strict."""
    from provmap.cli.json_out import INDENT

    tmp, _lst = work
    assert trust.add_trusted("ab" * 32, tmp / "x.provmap", how="trusted", backends=["tvm"])
    report = tmp / "r.html"
    outs = {"trust": _ok("trust", "--list", "--json").stdout,
            "inspect": _ok("inspect", relu_art, "--json").stdout,
            "compare": _ok("compare", relu_art, "--model", relu_art.parent / "relu.onnx",
                           "--json").stdout,
            "report": _ok("report", relu_art, "-o", report, "--json").stdout,
            "backends": _ok("backends", "--json").stdout}
    for cmd, out in outs.items():
        assert out == json.dumps(json.loads(out), indent=INDENT, allow_nan=False) + "\n", cmd
    assert json.loads(outs["trust"])["entries"][0]["backends"] == "tvm"
