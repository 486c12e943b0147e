"""The versioned provenance map store: JSON for humans and diffs, SQLite for indexed lookup.

Both formats hold exactly the same map (``load(save(m)).to_dict() == m.to_dict()``) so a tool
may pick either.  The SQLite file additionally carries a materialized ``node_sites`` table so
that the two questions users actually ask of a build -- "which kernels run ONNX node X?" and
"which ONNX nodes does kernel K implement?" -- are each one indexed query that a dispatcher can
run against the file without loading the whole map (`map_index.SqliteMapIndex`).

Writes are atomic (temp file in the destination directory + ``os.replace``) because maps are
written at the end of long builds and read by other processes; a half-written map that loads
"successfully" would silently lose provenance.  The schema is documented in docs/map-schema.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from pathlib import Path

from provmap.provenance.model import SCHEMA_VERSION, ProvenanceMap
from .util.atomic import commit_temp, discard_temp, stage_file

__all__ = [
    "save", "save_json", "save_sqlite", "load", "load_json", "load_sqlite",
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


def _stage(pmap: ProvenanceMap, dest: Path, writer) -> Path:
    return stage_file(dest, lambda tmp: writer(pmap, tmp))


# ---- JSON ------------------------------------------------------------------------------------

def _write_json(pmap: ProvenanceMap, tmp: Path) -> None:
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(pmap.to_dict(), f, ensure_ascii=False, indent=1)
        f.write("\n")


def save_json(pmap: ProvenanceMap, path: str | os.PathLike) -> Path:
    """Atomically write `pmap` as JSON to `path`; returns the path written."""
    dest = Path(path)
    _validate(pmap)
    commit_temp(_stage(pmap, dest, _write_json), dest)
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

def _create_schema(db) -> None:
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
        import sqlite_utils  # only when writing: an offline read never pays its import

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
    commit_temp(_stage(pmap, dest, _write_sqlite), dest)
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
        discard_temp(json_tmp)
        raise
    json_existed = json_dest.exists()
    try:
        commit_temp(json_tmp, json_dest)
    except BaseException:
        discard_temp(sqlite_tmp)
        raise
    try:
        commit_temp(sqlite_tmp, sqlite_dest)
    except BaseException:
        if not json_existed:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(json_dest)
        raise
    return json_dest, sqlite_dest


def open_readonly(path: Path) -> sqlite3.Connection:
    """Open read-only so that reading a wrong path can't create an empty database there."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such provenance map")
    try:
        return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as e:
        raise ValueError(f"{path}: cannot open provenance map database: {e}") from e


def check_version(conn: sqlite3.Connection, path: Path) -> None:
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
def sqlite_errors(path: Path):
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
    conn = open_readonly(path)
    try:
        with sqlite_errors(path):
            check_version(conn, path)
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


