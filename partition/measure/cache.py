"""Persistent cache of candidate measurements (SQLite), shared by runs and by processes.

A measurement is keyed by everything that can change it:

* the candidate's structural key (`Subgraph.key`: identical repeated blocks share it, weight
  values are not part of it, shapes/dtypes/attributes/wiring are);
* the backend's name, its library version (`Backend.version()`) and its options as canonical
  JSON (sorted keys, no spaces), so an OpenVINO f16 build never answers for an f32 one;
* the host fingerprint: a short hash of the CPU model, the core count and the machine type, so a
  cache file copied to another machine does not give that machine this one's timings.

The value is the median seconds (NULL for an invalid candidate, with the reason), the spread
and number of repeats of the measurement, the accuracy guard's max abs error, when it was
written and a human label (model and nodes) for reading the file with any SQLite tool.

Beside each isolated price, `in_context` may hold the same region's time measured inside a
running plan (Collage's second level feeds it back): a later search prices the region from it.

Accuracy verdicts are stored as they were decided: the estimator's tolerances are not part of
the key, so after changing atol/rtol use a fresh cache file (or `delete_invalid()`).  One
exception: a quantized region's refusal written before issue 51 is measured again
(`accuracy.stale_refusal`), since the rule it was decided by called one rounding step wrong.

Concurrency: two searches may write the same file at once.  The file uses WAL journaling (readers
never block writers), every connection waits up to `busy_timeout_ms` for a lock instead of
failing, and each write is one short `INSERT OR REPLACE` transaction; the same entry written by
two processes ends up as whichever committed last (both are measurements of the same thing).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from provmap.provenance.util.errors import ProvmapError
from provmap.provenance.util.own_paths import cost_cache_path
from provmap.runtime_module.host import host_fingerprint  # noqa: F401  (re-exported)

from ..candidate import Estimate

SCHEMA_VERSION = 1
FORMAT = "provmap-costs"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS provmap_meta (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS costs (
    key             TEXT NOT NULL,   -- Subgraph.key (structural hash of the region)
    backend         TEXT NOT NULL,
    backend_version TEXT NOT NULL,
    options         TEXT NOT NULL,   -- canonical JSON of Backend.options()
    host            TEXT NOT NULL,   -- host_fingerprint()
    seconds         REAL,            -- median, NULL when the candidate is invalid
    reason          TEXT NOT NULL DEFAULT '',
    spread          REAL NOT NULL DEFAULT 0,
    repeats         INTEGER NOT NULL DEFAULT 0,
    max_abs_err     REAL,
    created         REAL NOT NULL,   -- unix time
    label           TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (key, backend, backend_version, options, host)
) WITHOUT ROWID;
-- Partition times measured inside a running plan (the executor's per-partition hook), beside
-- the isolated price in `costs`: what the region costs with its neighbours' caches, thread
-- pools and layouts around it.  Added in place (same schema version): older files get it.
CREATE TABLE IF NOT EXISTS in_context (
    key             TEXT NOT NULL,
    backend         TEXT NOT NULL,
    backend_version TEXT NOT NULL,
    options         TEXT NOT NULL,
    host            TEXT NOT NULL,
    seconds         REAL NOT NULL,   -- median over `runs` hooked runs of the plan
    runs            INTEGER NOT NULL,
    plan            TEXT NOT NULL DEFAULT '',  -- which plan it ran in (model, strategy)
    created         REAL NOT NULL,
    label           TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (key, backend, backend_version, options, host)
) WITHOUT ROWID;
-- The plan a search with the end-to-end check kept, by model and search settings: compiling
-- the same model again with the same backends and options reuses it instead of measuring plans
-- end to end and running the second level again.  Added in place (same schema version).
CREATE TABLE IF NOT EXISTS plans (
    model           TEXT NOT NULL,   -- Subgraph.key of the whole model (structure, not weights)
    search          TEXT NOT NULL,   -- hash of the backends' identities and the search options
    host            TEXT NOT NULL,
    plan            TEXT NOT NULL,   -- JSON: strategy, partitions [{backend, ops (node IDs), why}]
    report          TEXT NOT NULL,   -- JSON: the search report that kept it
    created         REAL NOT NULL,
    PRIMARY KEY (model, search, host)
) WITHOUT ROWID;
"""


def default_path() -> Path:
    """$PROVMAP_CACHE, else ~/.cache/provmap/costs.sqlite (provenance/util/own_paths.py)."""
    return cost_cache_path()


def canonical_options(options: dict) -> str:
    return json.dumps(options or {}, sort_keys=True, separators=(",", ":"), default=str)


def backend_identity(backend) -> tuple[str, str, str]:
    """(name, version, canonical options JSON) of a Backend, or of such a tuple/dict given as is."""
    if isinstance(backend, tuple):
        name, version, options = backend
        return name, version, options if isinstance(options, str) else canonical_options(options)
    return backend.name, backend.version(), canonical_options(getattr(backend, "priced_options", backend.options)())


@dataclass(frozen=True)
class CachedCost:
    seconds: float | None
    reason: str
    spread: float
    repeats: int
    max_abs_err: float | None
    created: float
    label: str

    def estimate(self) -> Estimate:
        return Estimate(self.seconds, reason=self.reason, spread=self.spread, cached=True,
                        max_abs_err=self.max_abs_err)


class CacheLocked(ProvmapError):
    """Another process holds a write lock on the cache file for longer than we wait."""


class _Busy(Exception):
    """A lock error while opening: `CostCache._open` retries until its deadline."""


def _is_lock_error(e: sqlite3.Error) -> bool:
    return "locked" in str(e) or "busy" in str(e)


class CostCache:
    """Measurements on disk.  `get`/`put` by (structural key, backend); see the module doc.

    `path=":memory:"` gives a private in-memory cache (used for dedup within one run).
    One object may be used from several threads (a lock serialises its connection); separate
    processes each open their own `CostCache` on the same path.
    """

    def __init__(self, path: str | os.PathLike | None = None, *, host: str | None = None,
                 busy_timeout_ms: int = 30_000):
        self.memory = str(path) == ":memory:"
        self._explicit = path is not None
        self.path = Path(path).expanduser() if path is not None and not self.memory \
            else (None if self.memory else default_path())
        self.host = host or host_fingerprint()
        self.busy_timeout_ms = int(busy_timeout_ms)
        self._lock = threading.Lock()
        self._hits = self._misses = self._writes = 0
        self._conn = self._open()

    # -- opening ---------------------------------------------------------------------------
    def _where(self) -> str:
        return ":memory:" if self.memory else str(self.path)

    def _open(self) -> sqlite3.Connection:
        """Open, switch to WAL and create the schema, retrying while another process holds a lock.

        SQLite's busy handler does not cover everything done here: two processes creating the
        same new file at once can get "database is locked" at once from the journal-mode switch
        (measured: about 1 in 70 three-way races), so the whole open is retried with backoff
        until `busy_timeout_ms` has passed.
        """
        deadline = time.monotonic() + self.busy_timeout_ms / 1000
        delay = 0.005
        while True:
            try:
                return self._open_once()
            except _Busy:
                if time.monotonic() >= deadline:
                    raise CacheLocked(f"cost cache {self._where()} is locked by another process "
                                      f"(waited {self.busy_timeout_ms / 1000:.0f} s)") from None
                time.sleep(delay)
                delay = min(delay * 2, 0.25)

    def _open_once(self) -> sqlite3.Connection:
        if not self.memory:
            if self._explicit and not self.path.parent.is_dir():
                # A typo in --cache must not silently create a directory tree somewhere.
                raise ProvmapError(f"cost cache {self.path}: directory {self.path.parent} "
                                   "does not exist")
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = sqlite3.connect(self._where(), timeout=self.busy_timeout_ms / 1000,
                                   isolation_level=None, check_same_thread=False)
        except sqlite3.Error as e:
            raise ProvmapError(f"cost cache {self._where()}: cannot open: {e}") from None
        try:
            conn.execute(f"PRAGMA busy_timeout = {self.busy_timeout_ms}")
            tables = {r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.DatabaseError as e:
            conn.close()
            if _is_lock_error(e):
                raise _Busy() from None
            raise ProvmapError(f"cost cache {self._where()} is not a provmap cost cache "
                               f"(not an SQLite database: {e})") from None
        try:
            if tables and "provmap_meta" not in tables:
                raise ProvmapError(f"cost cache {self._where()} is not a provmap cost cache "
                                   f"(an SQLite database with tables {sorted(tables)}); "
                                   "choose another path (PROVMAP_CACHE)")
            if not self.memory:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":  # e.g. a file system without shared memory
                    raise ProvmapError(f"cost cache {self._where()}: cannot use WAL journaling "
                                       f"(got {mode}); put the cache on a local disk")
                conn.execute("PRAGMA synchronous = NORMAL")
            self._init_schema(conn)
        except sqlite3.OperationalError as e:
            conn.close()
            if _is_lock_error(e):
                raise _Busy() from None
            raise ProvmapError(f"cost cache {self._where()}: {e}") from None
        except BaseException:
            conn.close()
            raise
        return conn

    def _init_schema(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            for stmt in _SCHEMA.split(";"):
                if stmt.strip():
                    conn.execute(stmt)
            rows = dict(conn.execute("SELECT name, value FROM provmap_meta").fetchall())
            if not rows:
                conn.executemany("INSERT INTO provmap_meta(name, value) VALUES (?, ?)",
                                 [("format", FORMAT), ("schema_version", str(SCHEMA_VERSION)),
                                  ("created", str(time.time()))])
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        if rows and rows.get("format") != FORMAT:
            raise ProvmapError(f"cost cache {self._where()} is not a provmap cost cache "
                               f"(format {rows.get('format')!r})")
        if rows and rows.get("schema_version") != str(SCHEMA_VERSION):
            raise ProvmapError(f"cost cache {self._where()} has schema version "
                               f"{rows.get('schema_version')}, this provmap reads version "
                               f"{SCHEMA_VERSION}; use another file (PROVMAP_CACHE) or delete it")

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __getstate__(self):  # a process opens its own connection
        raise TypeError("CostCache is not picklable; open CostCache(path) in each process")

    # -- access ----------------------------------------------------------------------------
    def _ident(self, key: str, backend) -> tuple:
        name, version, options = backend_identity(backend)
        return (key, name, version, options, self.host)

    def get(self, key: str, backend) -> CachedCost | None:
        """The stored measurement of region `key` on `backend` (a Backend or a
        (name, version, options) tuple) on this host, or None.  Counts a hit or a miss."""
        with self._lock:
            row = self._conn.execute(
                "SELECT seconds, reason, spread, repeats, max_abs_err, created, label FROM costs "
                "WHERE key = ? AND backend = ? AND backend_version = ? AND options = ? AND host = ?",
                self._ident(key, backend)).fetchone()
            if row is None:
                self._misses += 1
                return None
            self._hits += 1
        return CachedCost(*row)

    def put(self, key: str, backend, *, seconds: float | None, reason: str = "",
            spread: float = 0.0, repeats: int = 0, max_abs_err: float | None = None,
            label: str = "") -> None:
        if seconds is None and not reason:
            reason = "invalid"
        row = self._ident(key, backend) + (
            None if seconds is None else float(seconds), reason or "", float(spread or 0.0),
            int(repeats or 0), None if max_abs_err is None else float(max_abs_err), time.time(),
            label or "")
        self._write("INSERT OR REPLACE INTO costs(key, backend, backend_version, options, host, "
                    "seconds, reason, spread, repeats, max_abs_err, created, label) "
                    "VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", row)

    def _write(self, sql: str, row: tuple) -> None:
        """One short write transaction (see the module doc on concurrency)."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.execute(sql, row)
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._writes += 1

    def put_in_context(self, key: str, backend, *, seconds: float, runs: int, plan: str = "",
                       label: str = "") -> None:
        """Record region `key`'s time on `backend` measured inside a running plan."""
        row = self._ident(key, backend) + (float(seconds), int(runs), plan, time.time(), label)
        self._write("INSERT OR REPLACE INTO in_context(key, backend, backend_version, options, "
                    "host, seconds, runs, plan, created, label) VALUES (?,?,?,?,?,?,?,?,?,?)", row)

    def get_in_context(self, key: str, backend) -> tuple[float, int, str] | None:
        """(seconds, runs, plan) of region `key` on `backend` measured in a running plan."""
        with self._lock:
            return self._conn.execute(
                "SELECT seconds, runs, plan FROM in_context WHERE key = ? AND backend = ? AND "
                "backend_version = ? AND options = ? AND host = ?",
                self._ident(key, backend)).fetchone()

    def put_plan(self, model: str, search: str, plan: dict, report: dict) -> None:
        """Store the plan a search kept for `model` under the search settings `search`."""
        row = (model, search, self.host, json.dumps(plan, sort_keys=True),
               json.dumps(report, default=str), time.time())
        self._write("INSERT OR REPLACE INTO plans(model, search, host, plan, report, created) "
                    "VALUES (?,?,?,?,?,?)", row)

    def get_plan(self, model: str, search: str) -> tuple[dict, dict, float] | None:
        """(plan, report, created) stored by `put_plan` on this host, or None."""
        with self._lock:
            row = self._conn.execute(
                "SELECT plan, report, created FROM plans WHERE model = ? AND search = ? AND "
                "host = ?", (model, search, self.host)).fetchone()
        if row is None:
            return None
        return json.loads(row[0]), json.loads(row[1]), float(row[2])

    def entries(self, backend: str | None = None) -> list[dict]:
        """All rows (of one backend name, if given), for inspection and tests."""
        sql = "SELECT * FROM costs" + (" WHERE backend = ?" if backend else "")
        with self._lock:
            cur = self._conn.execute(sql, (backend,) if backend else ())
            cols = [d[0] for d in cur.description]
            return [dict(zip(cols, r)) for r in cur.fetchall()]

    def __len__(self) -> int:
        with self._lock:
            return self._conn.execute("SELECT count(*) FROM costs").fetchone()[0]

    def delete_invalid(self) -> int:
        """Forget invalid entries (e.g. after changing the accuracy tolerances); returns how many."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                n = self._conn.execute("DELETE FROM costs WHERE seconds IS NULL").rowcount
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        return n

    def stats(self) -> dict:
        return {"hits": self._hits, "misses": self._misses, "writes": self._writes}

    def __repr__(self) -> str:
        return f"CostCache({self._where()!r}, host={self.host})"
