"""The `provmap` CLI as a user runs it, for tests: a fresh process, text out, exit status."""

from __future__ import annotations

import subprocess
import sys


def provmap(*args, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    """`python -m provmap.cli.main ARGS` (paths may be Path objects); `kw` go to subprocess.run
    (env=, cwd=).  The timeout bounds a hung command; no test asserts how long one takes."""
    return subprocess.run([sys.executable, "-m", "provmap.cli.main", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, **kw)


def one_error(r, *words, alone: bool = False) -> str:
    """Exit 2, exactly one `provmap: error:` line holding every word, and no traceback.

    `alone`: that line is all of stderr (no warning or progress line before it)."""
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    if alone:
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("provmap: error:")]
    assert len(lines) == 1, r.stderr
    for w in words:
        assert w in lines[0], (w, r.stderr)
    return lines[0]


def refused(r, *words) -> str:
    """one_error, and that line is all the command said."""
    return one_error(r, *words, alone=True)


def digest(path) -> str:
    """A file's sha256, to show a refused command left it as it was."""
    import hashlib

    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()
