"""The `provmap` CLI as a user runs it, for tests: a fresh process, text out, exit status."""

from __future__ import annotations

import subprocess
import sys


def provmap(*args, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    """`python -m provmap.cli.main ARGS` (paths may be Path objects); `kw` go to subprocess.run
    (env=, cwd=).  The timeout bounds a hung command; no test asserts how long one takes."""
    return subprocess.run([sys.executable, "-m", "provmap.cli.main", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, **kw)


def one_error(r, *words) -> str:
    """Exit 2, exactly one `provmap: error:` line holding every word, and no traceback."""
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("provmap: error:")]
    assert len(lines) == 1, r.stderr
    for w in words:
        assert w in lines[0], (w, r.stderr)
    return lines[0]
