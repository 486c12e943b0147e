"""The cost cache (--cache, PROVMAP_CACHE), through the real CLI: one in a missing directory, or
that is a directory, is refused before the search; one locked by another process is a clear
error the search can go on without; after a compile the .sqlite file alone holds the prices
(none left in its -wal file).  The cache as a command's output is in
test_cli_outputs_keep_inputs.py."""

from __future__ import annotations

import pytest
from attack_kit import relu_artifact
from cli_models import relu_file
from cli_runner import provmap

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_cache_in_a_missing_directory_is_refused(tmp_path):
    r = provmap("compile", "bundled:transformer", "-o", tmp_path / "a.provmap", "--cache",
                tmp_path / "no" / "such" / "c.sqlite")
    assert r.returncode == 2 and "does not exist" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "no").exists()


def test_a_cost_cache_that_is_a_directory_is_refused_before_the_search(tmp_path):
    """L2: PROVMAP_CACHE naming a directory failed after the search had started, as "cannot
    open: unable to open database file"; the trust list's same mistake is caught up front."""
    import os

    d = tmp_path / "cachedir"
    d.mkdir()
    model = relu_artifact(tmp_path).parent / "relu.onnx"
    env = {**os.environ, "PROVMAP_CACHE": str(d)}
    r = provmap("compile", model, "-o", tmp_path / "c.provmap", "--strategy",
                "collage:onnxruntime,openvino", env=env)
    assert r.returncode == 2, r.stderr
    assert f"the cost cache {d} is a directory; set PROVMAP_CACHE to a file" in r.stderr
    assert "collage:" not in r.stderr and not (tmp_path / "c.provmap").exists()
    r = provmap("compile", model, "-o", tmp_path / "c.provmap", "--strategy",
                "collage:onnxruntime,openvino", "--cache", tmp_path / "relu.onnx" / "x.sqlite")
    assert r.returncode == 2 and "which is not a directory; set --cache to a file" in r.stderr


def test_locked_cache_is_a_clear_error_the_search_can_go_on_without(tmp_path):
    import sqlite3

    from provmap.partition.measure.cache import CacheLocked, CostCache

    path = tmp_path / "c.sqlite"
    CostCache(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(CacheLocked, match="locked by another process"):
            CostCache(path, busy_timeout_ms=200)
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_the_cost_cache_file_holds_its_prices_after_a_compile(tmp_path):
    """The search left its prices in the cache's -wal file (the connection was never closed):
    a copy of the .sqlite alone had no tables."""
    import shutil
    import sqlite3

    cache = tmp_path / "c.sqlite"
    r = provmap("compile", relu_file(tmp_path), "-o", tmp_path / "a.provmap", "--strategy",
                "collage", "--backends", "onnxruntime", "--search-budget", "20",
                "--refine-budget", "0", "--cache", cache)
    assert r.returncode == 0, r.stderr
    shutil.copy(cache, tmp_path / "copy.sqlite")  # the file alone, as a user archives it
    with sqlite3.connect(tmp_path / "copy.sqlite") as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
        assert "costs" in tables, tables
        assert db.execute("SELECT COUNT(*) FROM costs").fetchone()[0] > 0
