"""Which artifacts may run native code on this machine.

Threat model (docs/artifact.md): an artifact may come from someone else.  Its SHA-256 member
hashes catch corruption, but whoever writes an artifact writes the hashes too, so they prove
nothing about intent.  A TVM partition is a shared library: loading it runs its code (static
constructors run at dlopen).  ONNX Runtime and OpenVINO partitions are model files those
libraries parse, not code.  Hence two rules:

1. Reading an artifact (inspect, lookup, explain, annotate, report without --measure) never
   loads partition code: `load(path, runnable=False)` touches the manifest, the map and
   readable sources only, and such a module refuses to run.
2. Loading native code needs trust: the artifact's digest (SHA-256 of its manifest, which holds
   every member's hash) is in this machine's trust list, or the caller says so explicitly
   (`--trust`, `load(..., trust=True)`).  Artifacts compile_model builds and saves here that
   hold native code are added as they are written (`save(..., record_built=True)`; a plain
   save never writes the list), so your own builds just run; one you received needs
   `provmap trust ART` (after you decided you trust its origin) or `--trust`.

The list: `$PROVMAP_TRUST`, else `$XDG_CONFIG_HOME/provmap/trusted-artifacts.sqlite`, else
`~/.config/provmap/trusted-artifacts.sqlite`.  It is an SQLite table keyed by digest, because:

- the one question asked on every run of native code, "is this digest trusted", is a primary
  key lookup (a few B-tree pages), not a scan that grows with every build;
- "one entry per digest" is the key itself, and "the artifact at this path was rebuilt, so the
  entry for its old digest names a file that is gone" is one transaction (no stale line left);
- concurrent builds serialize on SQLite's lock instead of racing on appends, and the variable
  still names one file (a directory of one file per digest would also look up in O(1), but needs
  a second name and makes list/prune walk many files);
- an old list (text, one `digest  # stamp note` line each) is converted once, under a lock: at
  the default location into the new file beside it, the old file left for older provmap
  versions; at a `$PROVMAP_TRUST` path in place (a symbolic link's target, the link kept),
  the old text kept beside it as `NAME.old`; where it cannot be (read-only), it is still read
  line by line, as before.  Only a file holding at least one `digest` line is an old list:
  comments alone are someone's notes, never converted.

Each entry keeps the artifact's absolute path, how it got there (built here, trusted by the
user, or migrated), when, and on which backends its native code runs.  Entries are only ever for
artifacts holding native code: an ONNX Runtime/OpenVINO-only artifact runs without trust, so
recording it would only grow the list.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import os
import re
import sqlite3
import zipfile
from pathlib import Path

from provmap.provenance.util.errors import ProvmapError

from .trust_legacy import _SQLITE_MAGIC, _is_legacy, _kept_name, _legacy_rows

MANIFEST = "manifest.json"  # the artifact member whose SHA-256 is the digest
_SCHEMA = ("CREATE TABLE IF NOT EXISTS trusted (digest TEXT PRIMARY KEY, path TEXT, how TEXT, "
           "added TEXT, backends TEXT, note TEXT) WITHOUT ROWID")
_PATH_INDEX = "CREATE INDEX IF NOT EXISTS trusted_path ON trusted (path)"  # revoke/rebuild by path
_COLUMNS = ("digest", "path", "how", "added", "backends", "note")


#: The default list's file, and the text list older provmap versions keep beside it.
DEFAULT_NAME, LEGACY_NAME = "trusted-artifacts.sqlite", "trusted-artifacts"


def trust_file() -> Path:
    env = os.environ.get("PROVMAP_TRUST")
    if env:
        return Path(env).expanduser()
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "provmap" / DEFAULT_NAME


class TrustStoreError(ProvmapError):
    """The trust list's file is something else (a directory, a user's file): one line, and the
    file is never touched (`provmap trust --list` once turned a user's notes into SQLite)."""


def _legacy_default() -> Path | None:
    """The old text list at the default location, when the table does not exist yet: its
    entries are copied into the table, and the file is left as it is, so an older provmap on
    the same machine keeps reading it (converting it in place would break that one)."""
    if os.environ.get("PROVMAP_TRUST"):
        return None
    old = trust_file().with_name(LEGACY_NAME)
    return old if _is_legacy(old) else None


def manifest_digest(manifest_bytes: bytes) -> str:
    return hashlib.sha256(manifest_bytes).hexdigest()


#: The built-ins' answers without importing them: reading an artifact with a TVM partition
#: (the schema's native-member check, `trust`) imported tvm, and torch with it: inspect took
#: 2.4 s instead of 0.17 (the twelfth afternoon).  test_startup holds these to the classes.
BUILTIN_NATIVE = {"tvm": True, "onnxruntime": False, "openvino": False}


def loads_native_code(backend: str) -> bool:
    """An unknown backend counts as native: it fails later with its own message, never by
    running unchecked code."""
    from .registry import backend_class

    base = backend.split("[", 1)[0].strip()
    if base in BUILTIN_NATIVE:
        return BUILTIN_NATIVE[base]
    try:
        return bool(getattr(backend_class(backend), "loads_native_code", True))
    except Exception:
        return True


def native_backends(manifest: dict) -> list[str]:
    """The backends of `manifest`'s partitions whose blobs are code; empty: needs no trust."""
    return sorted({p["backend"] for p in manifest.get("partitions", [])
                   if loads_native_code(p["backend"])})


def file_digest(path: str | os.PathLike) -> str | None:
    """The digest of the artifact at `path` (its manifest only, unverified: prune compares it,
    it never trusts by it), or None if there is none."""
    from .archive import StoredZip

    try:
        with StoredZip(path) as z:  # a FIFO, a device or a bomb is "no artifact", not a hang
            return manifest_digest(z.read(MANIFEST)) if MANIFEST in z.names else None
    except (OSError, KeyError, zipfile.BadZipFile, EOFError, ProvmapError):
        return None


# -- storage ---------------------------------------------------------------------------------




def check_store(path: Path | None = None) -> None:
    """Raise TrustStoreError unless `path` (default: the list in use) is absent, an SQLite
    file or an old text list."""
    path = path or trust_file()
    if not os.path.lexists(path):
        env = os.environ.get("PROVMAP_TRUST")
        if env and path == trust_file() and not path.parent.is_dir():
            # A typo in the variable used to create the directories it named (issue 36); the
            # default location's are created, as every configuration directory is.
            raise TrustStoreError(f"PROVMAP_TRUST={env}: directory {path.parent} does not "
                                  "exist; create it first (the list itself is created on "
                                  "first use)")
        return
    if path.is_dir():
        raise TrustStoreError(f"{path}: the trust list is a directory; set PROVMAP_TRUST to a "
                              "file (it is created on first use)")
    if not path.is_file():
        raise TrustStoreError(f"{path}: the trust list is not a regular file")
    try:
        with open(path, "rb") as f:
            head = f.read(len(_SQLITE_MAGIC))
    except OSError as e:
        raise TrustStoreError(f"{path}: cannot read the trust list: {e.strerror or e}") from None
    if head and head != _SQLITE_MAGIC and not _is_legacy(path):
        raise TrustStoreError(f"{path}: not a trust list (neither provmap's SQLite list nor its "
                              "old text list); left untouched: point PROVMAP_TRUST elsewhere")
    foreign = _foreign_tables(path) if head == _SQLITE_MAGIC else []
    if foreign:  # someone's own database: `trust --list` used to add provmap's table to it
        raise TrustStoreError(f"{path}: an SQLite database that is not a trust list (tables: "
                              f"{', '.join(foreign[:5])}); left untouched: point "
                              "PROVMAP_TRUST elsewhere")


def _foreign_tables(path: Path) -> list[str]:
    """The tables of an SQLite file holding no `trusted` table (none: it is a list, or empty)."""
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
        try:
            names = [r[0] for r in con.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        finally:
            con.close()
    except sqlite3.Error:
        return []  # unreadable: the connection that follows says so in its own words
    return [] if "trusted" in names else names


@contextlib.contextmanager
def _locked(path: Path):
    import fcntl

    fd = os.open(str(path) + ".lock", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _migrate(path: Path, source: Path | None = None) -> None:
    """Write an old text list (`source`, default `path` itself) as the table at `path`,
    atomically, under a lock (two processes finding it old at once convert it once).

    A symbolic link is followed: its target is converted and the link stays (a linked list was
    replaced by a file, issue 52).  Converted in place, the old file is kept beside it
    (`_kept_name`): the text was the user's, and an older provmap reads only that."""
    in_place = source is None or source == path
    path = Path(os.path.realpath(path))
    source = path if in_place else source
    with _locked(path):
        if in_place and not _is_legacy(path) or not in_place and path.exists():
            return
        rows = list(_legacy_rows(source))
        if in_place:
            import shutil

            shutil.copy2(path, _kept_name(path))
        tmp = path.with_name(path.name + ".migrating")
        tmp.unlink(missing_ok=True)
        con = sqlite3.connect(tmp)
        try:
            with con:
                con.execute(_SCHEMA)
                con.executemany("INSERT OR IGNORE INTO trusted VALUES (?,?,?,?,?,?)", rows)
        finally:
            con.close()
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)


def _connect(create: bool) -> sqlite3.Connection | None:
    """The table, converting an old list first; None if there is no list (and `create` is
    False) or an old one cannot be converted (callers then fall back or give up)."""
    path = trust_file()
    check_store(path)
    legacy = None if path.exists() else _legacy_default()
    if legacy is not None:
        try:
            _migrate(path, legacy)
        except OSError:
            return None
    if not path.exists():
        if not create:
            return None
        path.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    if _is_legacy(path):
        try:
            _migrate(path)
        except OSError:
            return None
    con = sqlite3.connect(path, timeout=30)
    con.execute(_SCHEMA)
    con.execute(_PATH_INDEX)
    return con


def _connect_readonly() -> sqlite3.Connection | None:
    """The table for reading only (`--list`, `is_trusted`'s lookup): nothing is created,
    converted or indexed; None when there is no table to read."""
    path = trust_file()
    check_store(path)
    if not path.is_file() or _is_legacy(path):
        return None
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    if con.execute("SELECT 1 FROM sqlite_master WHERE name = 'trusted'").fetchone() is None:
        con.close()
        return None
    return con


def is_trusted(digest: str) -> bool:
    path = trust_file()
    try:
        con = _connect(create=False)
    except TrustStoreError:
        return False
    except (OSError, sqlite3.Error):
        con = None
    if con is None:  # an old list that could not be converted: read it as before
        old = path if _is_legacy(path) else _legacy_default()
        return old is not None and any(r[0] == digest for r in _legacy_rows(old))
    try:
        with contextlib.closing(con):
            return con.execute("SELECT 1 FROM trusted WHERE digest = ?", (digest,)).fetchone() \
                is not None
    except sqlite3.Error:  # a damaged list trusts nothing
        return False


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def add_trusted(digest: str, path: str | os.PathLike | None = None, how: str = "built",
                backends: list[str] | tuple = ()) -> bool:
    """Record `digest` for the artifact at `path`; False if it was already there (its path is
    then updated when the recorded one is gone) or the list cannot be written.

    Entries for other digests recorded at the same path go: that file now holds this artifact,
    so theirs is gone (a rebuild replaces its entry instead of adding one).  A list that cannot
    be written is not an error for the build that tried: the artifact is still written, it just
    needs --trust or `provmap trust` to run.
    """
    where = os.path.abspath(path) if path is not None else None
    try:
        con = _connect(create=True)
        if con is None:
            return False
        with contextlib.closing(con), con:
            if where is not None:
                con.execute("DELETE FROM trusted WHERE path = ? AND digest != ?", (where, digest))
            old = con.execute("SELECT path FROM trusted WHERE digest = ?", (digest,)).fetchone()
            if old is not None:
                if where is not None and not (old[0] and os.path.exists(old[0])):
                    con.execute("UPDATE trusted SET path = ? WHERE digest = ?", (where, digest))
                return False
            con.execute("INSERT INTO trusted VALUES (?,?,?,?,?,?)",
                        (digest, where, how, _now(), ",".join(backends) or None, None))
            return True
    except (OSError, sqlite3.Error, TrustStoreError):
        return False


def forget_path(path: str | os.PathLike) -> int:
    """Drop entries recorded at `path` (an artifact without native code was just written
    there, so theirs is gone).  Never creates the list."""
    try:
        con = _connect(create=False)
        if con is None:
            return 0
        with contextlib.closing(con), con:
            return con.execute("DELETE FROM trusted WHERE path = ?",
                               (os.path.abspath(path),)).rowcount
    except (OSError, sqlite3.Error, TrustStoreError):
        return 0


def entries() -> list[dict]:
    """Every entry, read only: listing never creates, converts or rewrites the file."""
    path = trust_file()
    try:
        return _entries(path)
    except sqlite3.Error as e:
        raise TrustStoreError(f"{path}: the trust list is damaged ({e}); move it aside and "
                              "trust your artifacts again") from None


def _entries(path: Path) -> list[dict]:
    con = _connect_readonly()
    if con is None:
        rows = list(_legacy_rows(path)) if _is_legacy(path) else []
        legacy = _legacy_default() if not path.exists() else None
        if legacy is not None:
            rows = list(_legacy_rows(legacy))
    else:
        with contextlib.closing(con):
            rows = con.execute("SELECT * FROM trusted ORDER BY added, digest").fetchall()
    return [dict(zip(_COLUMNS, r)) for r in rows]


def _delete(digests: list[str]) -> None:
    try:
        _delete_rows(digests)
    except sqlite3.Error as e:
        raise TrustStoreError(f"{trust_file()}: the trust list is damaged ({e})") from None


def _delete_rows(digests: list[str]) -> None:
    con = _connect(create=False)
    if con is None:
        raise OSError(f"{trust_file()}: cannot be converted to the current format")
    with contextlib.closing(con), con:
        con.executemany("DELETE FROM trusted WHERE digest = ?", [(d,) for d in digests])


def revoke(what: str) -> list[dict]:
    """Remove the entry for `what`: an artifact file (its digest), a digest or a unique prefix
    of one (at least 8 hex digits), or a recorded path.  Returns the removed entries (empty:
    nothing matched); raises ValueError for an ambiguous prefix."""
    all_ = entries()
    digest = file_digest(what) if os.path.isfile(what) else None
    if digest is not None or os.path.exists(what):
        # The file's current artifact, and whatever was recorded at this path (the file may
        # hold another artifact by now: `--list` shows that entry as stale, so it must go too).
        where = os.path.abspath(what)
        hit = [e for e in all_ if e["digest"] == digest or e["path"] == where]
    elif re.fullmatch(r"[0-9a-fA-F]{8,64}", what):
        hit = [e for e in all_ if e["digest"].startswith(what.lower())]
        if len(hit) > 1:
            raise ValueError(f"digest prefix {what} matches {len(hit)} entries; give more digits")
    else:
        hit = [e for e in all_ if e["path"] == os.path.abspath(what)]
        if not hit and re.fullmatch(r"[0-9a-fA-F]{1,7}", what):
            # "no such entry" for the first digits of a listed digest read as a wrong digest
            near = sum(e["digest"].startswith(what.lower()) for e in all_)
            raise ValueError(f"{what}: a digest prefix needs at least 8 hex digits"
                             + (f" ({near} entr{'y starts' if near == 1 else 'ies start'} "
                                "with it)" if near else ""))
    if hit:
        _delete([e["digest"] for e in hit])
    return hit


def stale_reason(entry: dict) -> str | None:
    """Why `entry` no longer stands for a file, or None if its file still holds it."""
    p = entry.get("path")
    if not p:
        return "no absolute path recorded (an old list's entry)"
    if not os.path.exists(p):
        return "file is gone"
    if file_digest(p) != entry["digest"]:
        return "file now holds another artifact"
    return None


def prune() -> list[tuple[dict, str]]:
    """Remove entries whose file is gone (or now holds another artifact, or was never known);
    returns them with the reason.  Removing trust is always safe: at worst an artifact asks
    for `provmap trust` again."""
    gone = [(e, r) for e in entries() if (r := stale_reason(e))]
    if gone:
        _delete([e["digest"] for e, _ in gone])
    return gone
