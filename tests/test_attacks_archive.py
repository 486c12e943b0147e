"""The artifact's container (issue 33): a zip that lies about its sizes (a bomb declaring 2 GiB,
a stored member declaring more than the file holds) or holds a directory of many members is
refused from the central directory alone, in bounded memory, before anything is inflated or
parsed; and a container an honest user re-zipped, with the directory entries `zip -r` writes,
still opens.  Special files where an artifact belongs are in test_cli_input_files.py, a
symbolic-link member in test_attacks_map.py."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
import zlib

import pytest
from attack_kit import members, repack
from cli_runner import one_error, provmap, refused_in_process

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


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


def test_zip_bomb_is_refused_before_reading_with_bounded_memory(relu_art, tmp_path):
    """2 MB on disk declaring 2 GiB (deflated zeros, true SHA-256): it took 4.4 GB RSS and
    34 s in offline inspect.  Now it is refused from the central directory alone: `inspect`
    peaks no higher than on a real artifact, and the reader by itself stays under 200 MB."""
    bomb = _bomb(tmp_path / "bomb.provmap")
    assert bomb.stat().st_size < 4 << 20
    r, bomb_mb = _max_rss_mb(["inspect", bomb], tmp_path)
    r.stderr = "\n".join(ln for ln in r.stderr.splitlines() if not ln.startswith("RSS "))
    one_error(r, "bomb.provmap", "compressed")
    _ok, base_mb = _max_rss_mb(["inspect", relu_art], tmp_path)
    assert bomb_mb - base_mb < 50, (bomb_mb, base_mb)
    # Offline inspect imports no backend library since issue 36's start-up work (measured:
    # 49 MB for the bomb and for a real artifact, 714 MB before): the whole command is bounded.
    assert bomb_mb < 200, bomb_mb
    r, reader_mb = _max_rss_mb([bomb], tmp_path, body=_READER)
    assert "compressed" in r.stderr and r.returncode == 2, r.stderr
    assert reader_mb < 200, reader_mb


def test_stored_member_declaring_more_than_the_file_is_refused(relu_art, tmp_path):
    manifest, files = members(relu_art)
    art = repack(tmp_path / "big.provmap", manifest, files)
    data = bytearray(art.read_bytes())
    # The central directory's sizes of the last member, rewritten to 2 GiB: it lies.
    cd = data.rfind(b"PK\x01\x02")
    data[cd + 20:cd + 28] = (2 << 30).to_bytes(4, "little") * 2
    art.write_bytes(bytes(data))
    one_error(provmap("inspect", art), "big.provmap", "declares")


def test_a_zip_directory_of_many_members_is_refused_before_it_is_parsed(capsys, relu_art, tmp_path):
    """200k empty members (a 20 MB file) took 184 MB in zipfile's parse of the directory
    before any check ran; a million would be a gigabyte."""
    manifest, files = members(relu_art)
    bad = repack(tmp_path / "many.provmap", manifest, files)
    with zipfile.ZipFile(bad, "a") as z:
        for i in range(60_000):
            z.writestr(f"x/{i}", b"")
    refused_in_process(capsys, ["inspect", bad], "many.provmap", "60006 members")


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
