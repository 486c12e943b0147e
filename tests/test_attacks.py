"""The attack corpus of issue 33: artifacts and inputs a hostile sender would craft, hashes
recomputed so the file verifies.  Each case is refused with one `provmap: error:` line naming
what is wrong (or, for trust, simply not trusted), nothing read, nothing loaded; every case
failed on the code before the issue (a run that read a file, a traceback, a trusted copy, an
out-of-memory kill, a hang, or a user's file rewritten)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
import zlib

import numpy as np
import onnx
import pytest
from attack_kit import members, relu_model, repack, stealing_model
from cli_runner import one_error, provmap

from provmap.provenance.util.errors import ProvmapError
from provmap.runtime_module import trust
from provmap.runtime_module.artifact import read_artifact
from provmap.runtime_module.artifact_edit import with_schedule
from provmap.runtime_module.module import load

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
SECRET = np.array([1.5, -2.0, 3.25, 4.0], np.float32).tobytes()


@pytest.fixture(scope="module")
def ort_art(tmp_path_factory):
    """x[4] -> Relu -> y on ONNX Runtime: no native code, runs without trust."""
    d = tmp_path_factory.mktemp("attack")
    onnx.save(relu_model(), d / "relu.onnx")
    r = provmap("compile", d / "relu.onnx", "-o", d / "relu.provmap", "--strategy",
                "single:onnxruntime")
    assert r.returncode == 0, r.stderr
    return d / "relu.provmap"


def _with_model(src, dst, model_bytes, **options):
    manifest, files = members(src)
    files["partitions/p0/model.onnx"] = model_bytes
    if options:
        manifest["backends"]["onnxruntime"]["options"] = options
    return repack(dst, manifest, files)


# -- partition models that read this machine's files ----------------------------------------

def test_external_data_in_a_partition_is_refused_and_nothing_is_read(ort_art, tmp_path):
    """The finding: ORT resolves external data against the working directory, so `run` in the
    victim's home put the bytes of a file of theirs into the outputs."""
    art = _with_model(ort_art, tmp_path / "steal.provmap", stealing_model(),
                      optimization="disable")
    (tmp_path / "secret.bin").write_bytes(SECRET)
    r = provmap("run", art, "--inputs", _zeros(tmp_path), "-o", tmp_path / "out.npz",
                cwd=tmp_path)
    one_error(r, "partitions/p0/model.onnx", "external data", "secret.bin")
    assert not (tmp_path / "out.npz").exists()


def test_external_data_in_a_function_attribute_default_is_refused_by_run(ort_art, tmp_path):
    """Issue 52: a model-local function whose attribute default (`attribute_proto`) is a tensor
    of `.ssh/id_rsa`, taken by a Constant through `ref_attr_name`, ORT's optimizer off: `run`
    in the victim's home exited 0 with the key's first 16 bytes in the outputs, because the
    guard walked a list of places and that one was not on it."""
    art = _with_model(ort_art, tmp_path / "received.provmap",
                      stealing_model("function_default", ".ssh/id_rsa"), optimization="disable")
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "id_rsa").write_bytes(SECRET + b"-----END KEY-----")
    r = provmap("run", art, "--inputs", _zeros(tmp_path), "-o", tmp_path / "out.npz",
                cwd=tmp_path)
    one_error(r, "received.provmap: partitions/p0/model.onnx: refused: "
                 "functions[0].attribute_proto[0].t: tensor 'w' refers to external data "
                 "'.ssh/id_rsa'")
    assert not (tmp_path / "out.npz").exists()


@pytest.mark.parametrize("where", ["constant", "sparse", "subgraph", "function",
                                   "function_default"])
def test_external_data_anywhere_in_the_model_is_refused_at_load(ort_art, tmp_path,
                                                                monkeypatch, where):
    art = _with_model(ort_art, tmp_path / "steal.provmap", stealing_model(where))
    (tmp_path / "secret.bin").write_bytes(SECRET)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ProvmapError, match="refers to external data 'secret.bin'"):
        load(art, trust=True)  # trusted or not: never read


def test_external_data_in_the_embedded_source_model_is_refused(ort_art, tmp_path):
    manifest, files = members(ort_art)
    files["source/model.onnx"] = stealing_model()
    manifest["model"]["member"] = "source/model.onnx"
    art = repack(tmp_path / "src.provmap", manifest, files)
    with pytest.raises(ProvmapError, match="source/model.onnx: refused: .*external data"):
        read_artifact(art).resolve_model()


@pytest.mark.parametrize("options,field", [({"session_config": "x"}, "session_config"),
                                           ({"threads": "abc"}, "threads"),
                                           ({"threads": 10**12}, "threads")])
def test_backend_options_outside_the_declared_set_are_refused(ort_art, tmp_path, options,
                                                              field):
    manifest, files = members(ort_art)
    manifest["backends"]["onnxruntime"]["options"] = options
    art = repack(tmp_path / "opt.provmap", manifest, files)
    one_error(provmap("run", art, "--random"), "backends.onnxruntime.options", field)


# -- free-form manifest fields are a record, never configuration -------------------------------

def test_explain_headroom_builds_no_backend_the_manifest_names(ort_art, tmp_path):
    """Issue 52: `explain --headroom` built its backends from `plan_info.collage.backends`,
    options and all: an ONNX Runtime artifact listing a tuned TVM with `tuning_db=/any/path`
    made provmap write a tuning database there.  The backends are the user's (`--backends`,
    default compile's search backends and their threads=1 variants)."""
    evil = tmp_path / "evil_db"
    manifest, files = members(ort_art)
    manifest["plan_info"] = {"collage": {
        "backends": [f"tvm[tune=metaschedule;trials=1;tune_budget=1;tuning_db={evil}]"],
        "e2e_variants": ["onnxruntime[threads=3]"]}}
    art = repack(tmp_path / "plan.provmap", manifest, files)
    onnx.save(relu_model(), tmp_path / "relu.onnx")
    r = provmap("explain", art, "--headroom", "--repeats", "1", "--model",
                tmp_path / "relu.onnx", "--json")
    assert r.returncode == 0, r.stderr
    assert not evil.exists()
    per = json.loads(r.stdout)["headroom"]["per_backend"]
    assert set(per) == {"onnxruntime", "onnxruntime[threads=1]", "openvino",
                        "openvino[threads=1]"}, per
    r = provmap("explain", art, "--headroom", "--repeats", "1", "--model",
                tmp_path / "relu.onnx", "--json", "--backends", "onnxruntime[threads=2]")
    assert r.returncode == 0, r.stderr
    assert set(json.loads(r.stdout)["headroom"]["per_backend"]) == {"onnxruntime[threads=2]"}
    one_error(provmap("explain", art, "--headroom", "--model", tmp_path / "relu.onnx",
                      "--backends", "onnxruntime[bogus=1]"), "--backends", "bogus")
    one_error(provmap("explain", art, "--backends", "onnxruntime"), "--backends", "--headroom")
    assert not evil.exists()


# -- trust is never gained by reading and saving ----------------------------------------------

@pytest.fixture(scope="module")
def received_tvm(tmp_path_factory):
    """A TVM artifact built under another trust list: on this one, it was received."""
    d = tmp_path_factory.mktemp("recv")
    onnx.save(relu_model(), d / "relu.onnx")
    env = dict(os.environ, PROVMAP_TRUST=str(d / "builders-list"))
    r = provmap("compile", d / "relu.onnx", "-o", d / "tvm.provmap", "--strategy", "single:tvm",
                env=env)
    assert r.returncode == 0, r.stderr
    return d / "tvm.provmap"


@pytest.mark.parametrize("how", ["module", "with_schedule"])
def test_resaving_a_received_artifact_never_trusts_it(received_tvm, tmp_path, monkeypatch, how):
    monkeypatch.setenv("PROVMAP_TRUST", str(tmp_path / "mine"))
    copy = tmp_path / "copy.provmap"
    if how == "module":
        load(received_tvm, runnable=False).save(copy)
    else:
        with_schedule(read_artifact(received_tvm), None).save(copy)
    digest = read_artifact(copy).digest
    assert digest == read_artifact(received_tvm).digest  # the same artifact...
    assert not trust.is_trusted(digest) and trust.entries() == []  # ...and still not ours
    r = provmap("run", copy, "--random")
    one_error(r, "refused to load partition p0 (tvm)")


# -- containers that lie about their size, and files that are no files --------------------------

def _bomb(path, declared=2 << 30):
    """A 2 MB artifact whose map.json inflates to `declared` bytes of zeros, listed in the
    manifest with the true SHA-256 of what it inflates to.  Written by hand: zipfile cannot
    store an already deflated stream."""
    import hashlib
    import struct

    block = bytes(1 << 24)
    z = zlib.compressobj(6, zlib.DEFLATED, -15)
    h, crc, parts = hashlib.sha256(), 0, []
    for _ in range(declared // len(block)):
        parts.append(z.compress(block))
        h.update(block)
        crc = zlib.crc32(block, crc)
    parts.append(z.flush())
    deflated = b"".join(parts)
    man = json.dumps({"format": "provmap-artifact", "format_version": 1,
                      "members": {"map.json": h.hexdigest()}}).encode()
    entries, out = [], bytearray()
    for name, method, data, usize, crc_ in (("manifest.json", 0, man, len(man), zlib.crc32(man)),
                                           ("map.json", 8, deflated, declared, crc)):
        n = name.encode()
        entries.append((n, method, crc_, len(data), usize, len(out)))
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0, crc_, len(data),
                           usize, len(n), 0) + n + data
    cd = len(out)
    for n, method, crc_, csize, usize, off in entries:
        out += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, method, 0, 0, crc_,
                           csize, usize, len(n), 0, 0, 0, 0, 0, off) + n
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(entries), len(entries),
                       len(out) - cd, cd, 0)
    path.write_bytes(bytes(out))
    return path


_CLI = "from provmap.cli.main import main\nrc = main(sys.argv[1:])\n"
# The container reader alone (what read_artifact opens first), without the CLI's imports.
_READER = ("from provmap.provenance.util.errors import ProvmapError\n"
           "from provmap.runtime_module.archive import StoredZip\nrc = 0\ntry:\n"
           "    with StoredZip(sys.argv[1]) as z:\n        [z.read(n) for n in z.names]\n"
           "except ProvmapError as e:\n    print('provmap: error:', e, file=sys.stderr)\n"
           "    rc = 2\n")


def _max_rss_mb(args, cwd, body=_CLI) -> tuple[subprocess.CompletedProcess, float]:
    """Run `body` (default: provmap ARGS) in a child; return it with the child's peak RSS
    in MB."""
    # VmHWM, not getrusage's ru_maxrss: that one keeps the high-water mark of the forked copy
    # of this (TVM-loaded) test process across exec.
    code = ("import sys\n" + body + "hwm = [ln.split()[1] for ln in open('/proc/self/status') "
            "if ln.startswith('VmHWM:')][0]\nprint('RSS', hwm, file=sys.stderr)\nsys.exit(rc)")
    r = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True,
                       text=True, timeout=600, cwd=cwd)
    rss = [ln for ln in r.stderr.splitlines() if ln.startswith("RSS ")]
    return r, (int(rss[0].split()[1]) / 1024 if rss else float("nan"))


def test_zip_bomb_is_refused_before_reading_with_bounded_memory(ort_art, tmp_path):
    """2 MB on disk declaring 2 GiB (deflated zeros, true SHA-256): it took 4.4 GB RSS and
    34 s in offline inspect.  Now it is refused from the central directory alone: `inspect`
    peaks no higher than on a real artifact, and the reader by itself stays under 200 MB."""
    bomb = _bomb(tmp_path / "bomb.provmap")
    assert bomb.stat().st_size < 4 << 20
    r, bomb_mb = _max_rss_mb(["inspect", bomb], tmp_path)
    r.stderr = "\n".join(ln for ln in r.stderr.splitlines() if not ln.startswith("RSS "))
    one_error(r, "bomb.provmap", "compressed")
    _ok, base_mb = _max_rss_mb(["inspect", ort_art], tmp_path)
    assert bomb_mb - base_mb < 50, (bomb_mb, base_mb)
    # Offline inspect imports no backend library since issue 36's start-up work (measured:
    # 49 MB for the bomb and for a real artifact, 714 MB before): the whole command is bounded.
    assert bomb_mb < 200, bomb_mb
    r, reader_mb = _max_rss_mb([bomb], tmp_path, body=_READER)
    assert "compressed" in r.stderr and r.returncode == 2, r.stderr
    assert reader_mb < 200, reader_mb


def test_stored_member_declaring_more_than_the_file_is_refused(ort_art, tmp_path):
    manifest, files = members(ort_art)
    art = repack(tmp_path / "big.provmap", manifest, files)
    data = bytearray(art.read_bytes())
    # The central directory's sizes of the last member, rewritten to 2 GiB: it lies.
    cd = data.rfind(b"PK\x01\x02")
    data[cd + 20:cd + 28] = (2 << 30).to_bytes(4, "little") * 2
    art.write_bytes(bytes(data))
    one_error(provmap("inspect", art), "big.provmap", "declares")


def test_special_files_are_refused_up_front(tmp_path):
    fifo = tmp_path / "pipe.provmap"
    os.mkfifo(fifo)
    one_error(provmap("inspect", fifo, timeout=120), "pipe.provmap", "FIFO")
    one_error(provmap("inspect", "/dev/zero", timeout=120), "/dev/zero", "device")
    one_error(provmap("lookup", tmp_path, "--kernel", "k", timeout=120), "directory")


# -- the trust store is the user's file ---------------------------------------------------------

def test_trust_list_never_rewrites_a_file_that_is_not_one(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\nnot a digest in sight\n")
    env = dict(os.environ, PROVMAP_TRUST=str(notes))
    for args in (("trust", "--list"), ("trust", "--prune"), ("trust", "--revoke", "a" * 64)):
        one_error(provmap(*args, env=env), "notes.txt", "not a trust list")
    assert notes.read_text() == "my notes\nnot a digest in sight\n"
    env["PROVMAP_TRUST"] = str(tmp_path)
    one_error(provmap("trust", "--list", env=env), "is a directory")


def test_listing_an_old_text_list_leaves_it_as_it_is(tmp_path):
    old = tmp_path / "old-list"
    text = f"{'b' * 64}  # 2025-01-01T00:00:00+00:00 built here: /x/a.provmap\n"
    old.write_text(text)
    r = provmap("trust", "--list", "--json", env=dict(os.environ, PROVMAP_TRUST=str(old)))
    assert r.returncode == 0, r.stderr
    assert [e["digest"] for e in json.loads(r.stdout)["entries"]] == ["b" * 64]
    assert old.read_text() == text  # read, not converted: listing writes nothing


def _zeros(d):
    np.savez(d / "zeros.npz", x=np.zeros(4, np.float32))
    return d / "zeros.npz"


def test_revoke_by_path_after_the_file_was_replaced(ort_art, tmp_path, monkeypatch):
    """`--list` showed the entry as "file now holds another artifact", yet `--revoke PATH`
    said there was no such entry."""
    import shutil

    lst = tmp_path / "list"
    env = dict(os.environ, PROVMAP_TRUST=str(lst))
    onnx.save(relu_model(), tmp_path / "relu.onnx")
    art = tmp_path / "a.provmap"
    assert provmap("compile", tmp_path / "relu.onnx", "-o", art, "--strategy", "single:tvm",
                   env=env).returncode == 0
    shutil.copyfile(ort_art, art)  # the path now holds another artifact
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


def test_names_from_an_artifact_reach_the_terminal_escaped(tmp_path):
    """A node named with terminal escape sequences recoloured (or retitled) the terminal of
    whoever inspected the artifact; JSON was always escaped."""
    evil = "\x1b]0;owned\x07\x1b[31mred"
    m = relu_model()
    m.graph.node[0].name = evil
    onnx.save(m, tmp_path / "m.onnx")
    art = tmp_path / "e.provmap"
    assert provmap("compile", tmp_path / "m.onnx", "-o", art, "--strategy",
                   "single:onnxruntime").returncode == 0
    outs = [provmap("inspect", art), provmap("lookup", art, "--onnx-node", evil),
            provmap("profile", art, "--repeats", "1")]  # its top ONNX nodes
    kernel = json.loads(provmap("inspect", art, "--json").stdout)["partitions"][0]["kernels"][0]
    outs.append(provmap("lookup", art, "--kernel", kernel))
    for r in outs:
        assert r.returncode == 0, r.stderr
        assert "\x1b" not in r.stdout and "\x07" not in r.stdout, r.stdout
        assert "\\x1b[31mred" in r.stdout, r.stdout
    # explain's text too (a strategy whose reasons name the node: greedy with a refusal)
    art2 = tmp_path / "e2.provmap"
    assert provmap("compile", tmp_path / "m.onnx", "-o", art2, "--strategy",
                   "greedy:openvino,onnxruntime", "--backend-option",
                   "openvino.exclude_ops=Relu").returncode == 0
    r = provmap("explain", art2)
    assert r.returncode == 0 and "\x1b" not in r.stdout and "\x07" not in r.stdout, r.stdout
    assert "\\x1b[31mred" in r.stdout, r.stdout  # the node, named in the greedy reason
    r = provmap("lookup", art, "--onnx-node", evil + "x")  # the error line too
    assert r.returncode == 2 and "\x1b" not in r.stderr and "\\x1b" in r.stderr, r.stderr


def test_backends_write_nothing_under_home(tmp_path):
    """OpenVINO's import wrote ~/intel/openvino_ga_cid and sent an event; ONNX Runtime wrote a
    device id under ~/.cache/Microsoft.  provmap turns both off (their own switches)."""
    home = tmp_path / "home"
    home.mkdir()
    onnx.save(relu_model(), tmp_path / "m.onnx")
    env = {k: v for k, v in os.environ.items()
           if k not in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "ORT_DISABLE_TELEMETRY")}
    env.update(HOME=str(home), PROVMAP_TRUST=str(tmp_path / "list"),
               PROVMAP_CACHE=str(tmp_path / "c.sqlite"))
    art = tmp_path / "m.provmap"
    r = provmap("compile", tmp_path / "m.onnx", "-o", art, "--strategy",
                "greedy:openvino,onnxruntime", "--backend-option", "openvino.exclude_ops=Add",
                env=env)
    assert r.returncode == 0, r.stderr
    assert provmap("run", art, "--random", env=env).returncode == 0
    assert sorted(p.name for p in home.rglob("*")) == []


# -- the trust store: what is converted, and how (issue 52) -------------------------------------

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


def test_the_trust_lists_journal_is_never_an_output(ort_art, tmp_path):
    """`-o LIST-journal` wrote a file SQLite takes for a hot journal of the list, which then
    read as damaged; the journal is provmap's own file whether it exists or not."""
    lst = tmp_path / "list"
    env = dict(os.environ, PROVMAP_TRUST=str(lst))
    assert provmap("trust", "--list", env=env).returncode == 0
    for suffix in ("-journal", "-wal"):
        r = provmap("run", ort_art, "--random", "-o", f"{lst}{suffix}", env=env)
        one_error(r, f"list{suffix}", "trust list")
        assert not os.path.exists(f"{lst}{suffix}")
