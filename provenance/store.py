"""The versioned provenance map store: JSON for humans and diffs, SQLite for indexed lookup.

Both formats hold exactly the same map (``load(save(m)).to_dict() == m.to_dict()``) so a tool
may pick either.  The SQLite file additionally carries a materialized ``node_sites`` table so
that the two questions users actually ask of a build -- "which kernels run ONNX node X?" and
"which ONNX nodes does kernel K implement?" -- are each one indexed query that a dispatcher can
run against the file without loading the whole map (see :class:`SqliteMapIndex`).

Writes are atomic (temp file in the destination directory + ``os.replace``) because maps are
written at the end of long builds and read by other processes; a half-written map that loads
"successfully" would silently lose provenance.  The schema is documented in docs/map-schema.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sqlite3
from pathlib import Path

import numpy as np
import sqlite_utils

from provmap.provenance.model import ROLE_COMPUTE, SCHEMA_VERSION, OnnxNode, ProvenanceMap

__all__ = [
    "save", "save_json", "save_sqlite", "load", "load_json", "load_sqlite",
    "MapIndex", "SqliteMapIndex", "open_index",
    "JSON_SUFFIXES", "SQLITE_SUFFIXES",
]

JSON_SUFFIXES = (".json",)
SQLITE_SUFFIXES = (".sqlite", ".sqlite3", ".db")

# The meta table's reserved key; user meta may not use it or the SQLite form would be ambiguous.
_VERSION_KEY = "schema_version"


# ---- validation ------------------------------------------------------------------------------

def _validate(pmap: ProvenanceMap) -> None:
    """Reject maps that one of the formats could not round-trip, before touching any file.

    Checked up front (rather than letting SQLite's PK constraint fail half way) so that JSON and
    SQLite accept exactly the same maps and `save` never writes one format and not the other.
    """
    for key in pmap.meta:
        if not isinstance(key, str):
            raise ValueError(f"provenance map meta keys must be str, got {key!r}")
    if _VERSION_KEY in pmap.meta:
        raise ValueError(f"provenance map meta key {_VERSION_KEY!r} is reserved by the store")
    for what, keys in (
        ("ONNX node id", [n.id for n in pmap.nodes]),
        ("Relax expr id", [e.id for e in pmap.exprs]),
        ("kernel name", [k.name for k in pmap.kernels]),
        ("kernel site id", [s.id for s in pmap.sites]),
    ):
        seen: set[str] = set()
        for k in keys:
            if k in seen:
                raise ValueError(f"provenance map has duplicate {what} {k!r}")
            seen.add(k)


# ---- atomic file plumbing --------------------------------------------------------------------

def _new_temp(dest: Path) -> Path:
    """Create an empty, exclusive temp file next to `dest`.

    Same directory so `os.replace` is a rename on one filesystem (atomic); created with mode
    0o666 via os.open (not mkstemp's 0o600) so the final file gets the caller's umask.
    """
    while True:
        tmp = dest.parent / f".{dest.name}.{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        os.close(fd)
        return tmp


def _discard(tmp: Path) -> None:
    for p in (tmp, Path(f"{tmp}-journal"), Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(p)


def _fsync_path(path: Path, directory: bool = False) -> None:
    """Flush to disk before the rename, or a crash could leave a renamed-but-empty file."""
    try:
        fd = os.open(path, os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0))
    except OSError:
        if directory:  # some platforms/filesystems cannot open directories; best effort
            return
        raise
    try:
        os.fsync(fd)
    except OSError:
        if not directory:
            raise
    finally:
        os.close(fd)


def _stage_file(dest: Path, write) -> Path:
    """`write(tmp)` into a fresh temp file next to `dest`; the temp never outlives a failure."""
    tmp = _new_temp(dest)
    try:
        write(tmp)
        _fsync_path(tmp)
    except BaseException:
        _discard(tmp)
        raise
    return tmp


def _stage(pmap: ProvenanceMap, dest: Path, writer) -> Path:
    return _stage_file(dest, lambda tmp: writer(pmap, tmp))


def _commit(tmp: Path, dest: Path) -> None:
    try:
        os.replace(tmp, dest)
    except BaseException:
        _discard(tmp)
        raise
    _fsync_path(dest.parent, directory=True)


def write_atomic(path: str | os.PathLike, write) -> Path:
    """Any file, all or nothing: `write(tmp)` fills a temp file next to `path` (creating its
    directory), which is fsynced and renamed over `path`.  Every provmap output goes through
    this (maps, artifacts, reports, reproducers, bench results), so an interrupted or failing
    command never leaves a half-written file."""
    dest = Path(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    _commit(_stage_file(dest, write), dest)
    return dest


def check_writable(path: str | os.PathLike, directory: bool = False) -> None:
    """Refuse, before any work, an output that could not be written at the end.

    `path` is a file to create or replace (or, with `directory`, a directory to create or fill).
    write_atomic creates missing parent directories, so the test is on the nearest one that
    exists.  Raises ProvmapError naming the path.
    """
    from .errors import ProvmapError

    p = Path(path)
    if not directory and p.is_dir():
        raise ProvmapError(f"{p}: is a directory; give a file name to write")
    if directory and p.exists() and not p.is_dir():
        raise ProvmapError(f"{p}: exists and is not a directory")
    base = p if directory else p.parent
    while not base.exists():
        base = base.parent
    if not base.is_dir():
        raise ProvmapError(f"{p}: cannot write here: {base} is not a directory")
    if not os.access(base, os.W_OK | os.X_OK):
        raise ProvmapError(f"{p}: cannot write here: {base} is not writable")
    if not directory and p.exists() and not os.access(p, os.W_OK) and not os.access(p.parent, os.W_OK):
        raise ProvmapError(f"{p}: cannot write here: the file is read-only")


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    return write_atomic(path, lambda tmp: tmp.write_bytes(data))


def save_npz_atomic(path: str | os.PathLike, arrays: dict) -> Path:
    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:  # a file object: np.savez would append ".npz" to a name
            np.savez(f, **arrays)

    return write_atomic(path, write)


# ---- JSON ------------------------------------------------------------------------------------

def _write_json(pmap: ProvenanceMap, tmp: Path) -> None:
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(pmap.to_dict(), f, ensure_ascii=False, indent=1)
        f.write("\n")


def save_json(pmap: ProvenanceMap, path: str | os.PathLike) -> Path:
    """Atomically write `pmap` as JSON to `path`; returns the path written."""
    dest = Path(path)
    _validate(pmap)
    _commit(_stage(pmap, dest, _write_json), dest)
    return dest


def load_json(path: str | os.PathLike) -> ProvenanceMap:
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a provenance map JSON file (corrupt or truncated): {e}") from e
    if not isinstance(d, dict):
        raise ValueError(f"{path}: not a provenance map JSON file (top level is not an object)")
    try:
        return ProvenanceMap.from_dict(d)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from e
    except (KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{path}: malformed provenance map JSON ({type(e).__name__}: {e})") from e


# ---- SQLite ----------------------------------------------------------------------------------

def _create_schema(db: sqlite_utils.Database) -> None:
    """Create every table explicitly so empty maps still have the full schema (insert_all on
    an empty list creates nothing), and so column types don't depend on the first row."""
    db.table("meta").create({"key": str, "value": str}, pk="key", not_null={"value"})
    db.table("onnx_nodes").create(
        {"id": str, "name": str, "op_type": str, "domain": str, "idx": int,
         "inputs": str, "outputs": str, "elided": str},
        pk="id", not_null={"name", "op_type", "domain", "idx", "inputs", "outputs"},
    )
    db.table("relax_exprs").create(
        {"id": str, "function": str, "var": str, "op": str, "shape": str, "dtype": str,
         "idx": int},
        pk="id", not_null={"function", "var", "op", "idx"},
    )
    db.table("kernels").create(
        {"name": str, "function": str, "backend": str, "kind": str},
        pk="name", not_null={"function", "backend", "kind"},
    )
    db.table("kernel_sites").create(
        {"id": str, "kernel": str, "caller": str, "ordinal": int},
        pk="id", not_null={"kernel", "caller", "ordinal"},
    )
    for name, cols in (
        ("node_exprs", ("node_id", "expr_id", "role")),
        ("site_exprs", ("site_id", "expr_id", "role")),
    ):
        db.table(name).create({c: str for c in cols}, not_null=set(cols))
    db.table("node_sites").create(
        {"node_id": str, "node_name": str, "site_id": str, "kernel": str, "role": str},
        not_null={"node_id", "site_id", "role"},
    )
    # The two dispatch-time lookups get covering indexes (the query never touches the table);
    # everything else a user may filter on gets a plain one.
    for table, cols in (
        ("node_sites", ["node_id", "site_id", "role", "kernel"]),
        ("node_sites", ["kernel", "node_id", "node_name", "role"]),
        ("node_sites", ["node_name"]),
        ("node_sites", ["site_id"]),
        ("node_exprs", ["node_id", "expr_id", "role"]),
        ("node_exprs", ["expr_id", "node_id", "role"]),
        ("site_exprs", ["site_id", "expr_id", "role"]),
        ("site_exprs", ["expr_id", "site_id", "role"]),
        ("onnx_nodes", ["name", "idx", "id"]),
        ("kernel_sites", ["kernel"]),
        ("relax_exprs", ["var"]),
    ):
        db.table(table).create_index(cols, index_name=f"idx_{table}_{cols[0]}")


def _write_sqlite(pmap: ProvenanceMap, tmp: Path) -> None:
    conn = sqlite3.connect(tmp)
    try:
        # The file is private until renamed and discarded on failure, so a rollback journal and
        # per-commit syncs buy nothing; the whole file is fsynced once before the rename.
        conn.execute("PRAGMA journal_mode = OFF")
        conn.execute("PRAGMA synchronous = OFF")
        db = sqlite_utils.Database(conn, execute_plugins=False)
        _create_schema(db)
        node_name = {n.id: n.name for n in pmap.nodes}
        site_kernel = {s.id: s.kernel for s in pmap.sites}
        # Rows are inserted in list order and read back ORDER BY rowid: that, not any sort key,
        # is what makes the round trip exact.
        tables = {
            "meta": [{"key": _VERSION_KEY, "value": json.dumps(SCHEMA_VERSION)}]
            + [{"key": k, "value": json.dumps(v, ensure_ascii=False)} for k, v in pmap.meta.items()],
            "onnx_nodes": [
                {"id": n.id, "name": n.name, "op_type": n.op_type, "domain": n.domain,
                 "idx": n.index, "inputs": json.dumps(list(n.inputs), ensure_ascii=False),
                 "outputs": json.dumps(list(n.outputs), ensure_ascii=False), "elided": n.elided}
                for n in pmap.nodes
            ],
            "relax_exprs": [
                {"id": e.id, "function": e.function, "var": e.var, "op": e.op, "shape": e.shape,
                 "dtype": e.dtype, "idx": e.index}
                for e in pmap.exprs
            ],
            "kernels": [
                {"name": k.name, "function": k.function, "backend": k.backend, "kind": k.kind}
                for k in pmap.kernels
            ],
            "kernel_sites": [
                {"id": s.id, "kernel": s.kernel, "caller": s.caller, "ordinal": s.ordinal}
                for s in pmap.sites
            ],
            "node_exprs": [
                {"node_id": n, "expr_id": e, "role": r} for n, e, r in pmap.node_exprs
            ],
            "site_exprs": [
                {"site_id": s, "expr_id": e, "role": r} for s, e, r in pmap.site_exprs
            ],
            "node_sites": [
                {"node_id": n, "node_name": node_name.get(n), "site_id": s,
                 "kernel": site_kernel.get(s), "role": r}
                for n, s, r in pmap.node_sites()
            ],
        }
        for name, rows in tables.items():
            if rows:
                db.table(name).insert_all(rows)
        conn.execute(f"PRAGMA user_version = {int(SCHEMA_VERSION)}")
        conn.commit()
    finally:
        conn.close()


def save_sqlite(pmap: ProvenanceMap, path: str | os.PathLike) -> Path:
    """Atomically write `pmap` as an indexed SQLite database to `path`; returns the path."""
    dest = Path(path)
    _validate(pmap)
    _commit(_stage(pmap, dest, _write_sqlite), dest)
    return dest


def save(pmap: ProvenanceMap, out_prefix: str | os.PathLike) -> tuple[Path, Path]:
    """Write ``OUT.json`` and ``OUT.sqlite`` -- both or neither.

    Both files are fully staged before either is renamed into place, so a failure while
    writing leaves any previous pair untouched; only a failure of the second rename itself can
    leave a new JSON beside an old SQLite, and then a JSON that did not exist before is removed.
    """
    json_dest = Path(f"{os.fspath(out_prefix)}.json")
    sqlite_dest = Path(f"{os.fspath(out_prefix)}.sqlite")
    _validate(pmap)
    json_dest.parent.mkdir(parents=True, exist_ok=True)  # as write_atomic does for every output
    json_tmp = _stage(pmap, json_dest, _write_json)
    try:
        sqlite_tmp = _stage(pmap, sqlite_dest, _write_sqlite)
    except BaseException:
        _discard(json_tmp)
        raise
    json_existed = json_dest.exists()
    try:
        _commit(json_tmp, json_dest)
    except BaseException:
        _discard(sqlite_tmp)
        raise
    try:
        _commit(sqlite_tmp, sqlite_dest)
    except BaseException:
        if not json_existed:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(json_dest)
        raise
    return json_dest, sqlite_dest


def _open_ro(path: Path) -> sqlite3.Connection:
    """Open read-only so that reading a wrong path can't create an empty database there."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such provenance map")
    try:
        return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as e:
        raise ValueError(f"{path}: cannot open provenance map database: {e}") from e


def _check_version(conn: sqlite3.Connection, path: Path) -> None:
    """Fail on a wrong version before reading any table, whose layout may differ."""
    (user_version,) = conn.execute("PRAGMA user_version").fetchone()
    if user_version != SCHEMA_VERSION:
        raise ValueError(
            f"{path}: provenance map schema version {user_version!r} is not supported "
            f"(this provmap reads version {SCHEMA_VERSION})"
            + (" -- not a provenance map database?" if user_version == 0 else "")
        )
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (_VERSION_KEY,)).fetchone()
    meta_version = json.loads(row[0]) if row else None
    if meta_version != SCHEMA_VERSION:
        raise ValueError(
            f"{path}: meta.schema_version {meta_version!r} disagrees with PRAGMA user_version "
            f"{user_version} (corrupt provenance map)"
        )


@contextlib.contextmanager
def _sqlite_errors(path: Path):
    try:
        yield
    except ValueError as e:
        if str(path) in str(e):
            raise
        raise ValueError(f"{path}: corrupt provenance map database: {e}") from e
    except (sqlite3.Error, KeyError, TypeError) as e:
        raise ValueError(f"{path}: corrupt or truncated provenance map database: {e}") from e


def load_sqlite(path: str | os.PathLike) -> ProvenanceMap:
    path = Path(path)
    conn = _open_ro(path)
    try:
        with _sqlite_errors(path):
            _check_version(conn, path)
            # A full load reads every page anyway; quick_check turns a truncated file into an
            # error instead of a silently shorter map.
            problems = [r[0] for r in conn.execute("PRAGMA quick_check")]
            if problems != ["ok"]:
                raise ValueError(f"{path}: corrupt provenance map database: {problems[:3]}")

            def rows(sql: str):
                return conn.execute(sql).fetchall()

            d = {
                "schema_version": SCHEMA_VERSION,
                "meta": {
                    k: json.loads(v)
                    for k, v in rows("SELECT key, value FROM meta ORDER BY rowid")
                    if k != _VERSION_KEY
                },
                "onnx_nodes": [
                    {"id": i, "name": n, "op_type": o, "domain": dm, "index": x,
                     "inputs": json.loads(ins), "outputs": json.loads(outs), "elided": el}
                    for i, n, o, dm, x, ins, outs, el in rows(
                        "SELECT id, name, op_type, domain, idx, inputs, outputs, elided "
                        "FROM onnx_nodes ORDER BY rowid")
                ],
                "relax_exprs": [
                    {"id": i, "function": f, "var": v, "op": o, "shape": sh, "dtype": dt,
                     "index": x}
                    for i, f, v, o, sh, dt, x in rows(
                        "SELECT id, function, var, op, shape, dtype, idx "
                        "FROM relax_exprs ORDER BY rowid")
                ],
                "kernels": [
                    {"name": n, "function": f, "backend": b, "kind": k}
                    for n, f, b, k in rows(
                        "SELECT name, function, backend, kind FROM kernels ORDER BY rowid")
                ],
                "kernel_sites": [
                    {"id": i, "kernel": k, "caller": c, "ordinal": o}
                    for i, k, c, o in rows(
                        "SELECT id, kernel, caller, ordinal FROM kernel_sites ORDER BY rowid")
                ],
                "node_exprs": rows("SELECT node_id, expr_id, role FROM node_exprs ORDER BY rowid"),
                "site_exprs": rows("SELECT site_id, expr_id, role FROM site_exprs ORDER BY rowid"),
            }
            return ProvenanceMap.from_dict(d)
    finally:
        conn.close()


def load(path: str | os.PathLike) -> ProvenanceMap:
    """Load a map, choosing the format by file suffix."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in JSON_SUFFIXES:
        return load_json(path)
    if suffix in SQLITE_SUFFIXES:
        return load_sqlite(path)
    raise ValueError(
        f"{path}: unknown provenance map format {suffix!r} "
        f"(expected one of {', '.join(JSON_SUFFIXES + SQLITE_SUFFIXES)})"
    )


# ---- query API -------------------------------------------------------------------------------
#
# Both index classes return plain sorted tuples so that results are comparable across the two
# backends and stable across runs.  Role aggregation for nodes_for_kernel mirrors
# ProvenanceMap.node_sites(): a node is "compute" for a kernel if any of the kernel's sites
# computes it, otherwise the (constant) role it has there.

def _kernel_role(roles) -> str:
    roles = set(roles)
    return ROLE_COMPUTE if ROLE_COMPUTE in roles else min(roles)


class MapIndex:
    """Dict-based lookups over an in-memory map (built once, O(1) per query)."""

    def __init__(self, pmap: ProvenanceMap):
        self.map = pmap
        self._node_by_id = {n.id: n for n in pmap.nodes}
        self._nodes_by_name: dict[str, list[OnnxNode]] = {}
        for n in pmap.nodes:
            self._nodes_by_name.setdefault(n.name, []).append(n)
        site_kernel = {s.id: s.kernel for s in pmap.sites}
        self._sites_by_node: dict[str, set] = {}
        roles_by_kernel: dict[str, dict[str, set]] = {}
        for nid, sid, role in pmap.node_sites():
            kernel = site_kernel.get(sid)
            self._sites_by_node.setdefault(nid, set()).add((sid, kernel, role))
            roles_by_kernel.setdefault(kernel, {}).setdefault(nid, set()).add(role)
        self._nodes_by_kernel = {
            k: sorted(
                ((nid, self._node_name(nid), _kernel_role(rs)) for nid, rs in by_node.items()),
                key=lambda t: t[0],
            )
            for k, by_node in roles_by_kernel.items()
        }
        self._exprs_by_node: dict[str, set] = {}
        self._nodes_by_expr: dict[str, set] = {}
        for nid, eid, role in pmap.node_exprs:
            self._exprs_by_node.setdefault(nid, set()).add((eid, role))
            self._nodes_by_expr.setdefault(eid, set()).add((nid, role))
        self._sites_by_expr: dict[str, set] = {}
        for sid, eid, role in pmap.site_exprs:
            self._sites_by_expr.setdefault(eid, set()).add((sid, site_kernel.get(sid), role))

    def _node_name(self, node_id: str) -> str | None:
        n = self._node_by_id.get(node_id)
        return n.name if n is not None else None

    def nodes(self, name_or_id: str) -> list[OnnxNode]:
        """Exact id first (unambiguous), else every node with that name (names may repeat)."""
        if name_or_id in self._node_by_id:
            return [self._node_by_id[name_or_id]]
        return sorted(self._nodes_by_name.get(name_or_id, ()), key=lambda n: (n.index, n.id))

    def kernels_for_node(self, node_id: str) -> list[tuple[str, str | None, str]]:
        # (site_id, role) is unique per node, so sorting on those never compares kernel=None.
        return sorted(self._sites_by_node.get(node_id, ()), key=lambda t: (t[0], t[2]))

    def nodes_for_kernel(self, kernel_name: str) -> list[tuple[str, str | None, str]]:
        return list(self._nodes_by_kernel.get(kernel_name, ()))

    def exprs_for_node(self, node_id: str) -> list[tuple[str, str]]:
        return sorted(self._exprs_by_node.get(node_id, ()))

    def nodes_for_expr(self, expr_id: str) -> list[tuple[str, str]]:
        return sorted(self._nodes_by_expr.get(expr_id, ()))

    def kernels_for_expr(self, expr_id: str) -> list[tuple[str, str | None, str]]:
        return sorted(self._sites_by_expr.get(expr_id, ()), key=lambda t: (t[0], t[2]))


class SqliteMapIndex:
    """The same lookups as MapIndex, each one indexed query against the file.

    For dispatch-time use: opening costs a version check, not a load, so a runtime can answer
    "which ONNX nodes is this kernel?" for a multi-GB map without reading it.  Not thread-safe
    (one sqlite3 connection); open one per thread.
    """

    # Public so that tests and docs can EXPLAIN exactly what runs.
    QUERIES = {
        "node_by_id":
            "SELECT id, name, op_type, domain, idx, inputs, outputs, elided "
            "FROM onnx_nodes WHERE id = ?",
        "nodes_by_name":
            "SELECT id, name, op_type, domain, idx, inputs, outputs, elided "
            "FROM onnx_nodes WHERE name = ? ORDER BY idx, id",
        "kernels_for_node":
            "SELECT site_id, kernel, role FROM node_sites WHERE node_id = ? "
            "ORDER BY site_id, role",
        "nodes_for_kernel":
            "SELECT node_id, node_name, "
            f"CASE WHEN MAX(role = '{ROLE_COMPUTE}') THEN '{ROLE_COMPUTE}' ELSE MIN(role) END "
            "FROM node_sites WHERE kernel = ? GROUP BY node_id, node_name ORDER BY node_id, node_name",
        "exprs_for_node":
            "SELECT DISTINCT expr_id, role FROM node_exprs WHERE node_id = ? "
            "ORDER BY expr_id, role",
        "nodes_for_expr":
            "SELECT DISTINCT node_id, role FROM node_exprs WHERE expr_id = ? "
            "ORDER BY node_id, role",
        "kernels_for_expr":
            "SELECT DISTINCT se.site_id, ks.kernel, se.role FROM site_exprs AS se "
            "LEFT JOIN kernel_sites AS ks ON ks.id = se.site_id WHERE se.expr_id = ? "
            "ORDER BY se.site_id, se.role",
    }

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._conn = _open_ro(self.path)
        try:
            with _sqlite_errors(self.path):
                _check_version(self._conn, self.path)
        except BaseException:
            self._conn.close()
            raise

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> "SqliteMapIndex":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _q(self, name: str, *args) -> list[tuple]:
        with _sqlite_errors(self.path):
            return self._conn.execute(self.QUERIES[name], args).fetchall()

    @staticmethod
    def _node(row) -> OnnxNode:
        i, n, o, dm, x, ins, outs, el = row
        return OnnxNode(id=i, name=n, op_type=o, domain=dm, index=x,
                        inputs=json.loads(ins), outputs=json.loads(outs), elided=el)

    def nodes(self, name_or_id: str) -> list[OnnxNode]:
        rows = self._q("node_by_id", name_or_id) or self._q("nodes_by_name", name_or_id)
        return [self._node(r) for r in rows]

    def kernels_for_node(self, node_id: str) -> list[tuple[str, str | None, str]]:
        return self._q("kernels_for_node", node_id)

    def nodes_for_kernel(self, kernel_name: str) -> list[tuple[str, str | None, str]]:
        return self._q("nodes_for_kernel", kernel_name)

    def exprs_for_node(self, node_id: str) -> list[tuple[str, str]]:
        return self._q("exprs_for_node", node_id)

    def nodes_for_expr(self, expr_id: str) -> list[tuple[str, str]]:
        return self._q("nodes_for_expr", expr_id)

    def kernels_for_expr(self, expr_id: str) -> list[tuple[str, str | None, str]]:
        return self._q("kernels_for_expr", expr_id)


def open_index(path: str | os.PathLike) -> MapIndex | SqliteMapIndex:
    """Query a map file without caring about its format (SQLite is queried in place)."""
    path = Path(path)
    if path.suffix.lower() in SQLITE_SUFFIXES:
        return SqliteMapIndex(path)
    return MapIndex(load(path))
