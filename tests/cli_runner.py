"""The `provmap` CLI as a user runs it, for tests: a fresh process, text out, exit status; and
`refused_in_process`, for the walks over many inputs that must stay fast."""

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


def one_line_refusal(r, *words, prog="provmap") -> str:
    """Exit 2 and one `PROG: error:` line holding every word, all stderr holds: no traceback,
    no usage text (argparse's refusals are `provmap COMMAND: error:`); the line."""
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and "usage:" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith(f"{prog}: error:")]
    assert len(lines) == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    for w in words:
        assert w in lines[0], (w, r.stderr)
    return lines[0]


def refused_in_process(capsys, argv, *words) -> str:
    """`provmap.cli.main.main(argv)` in this process is exit 2 with exactly one deliberate error
    line holding every word (no traceback, not the wrapper's fallback for an exception nobody
    expected); the line."""
    from provmap.cli.main import main

    rc = main([str(a) for a in argv])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("provmap: error:")]
    assert rc == 2 and len(lines) == 1, (argv, rc, err)
    assert "Traceback" not in err and "internal error" not in lines[0], (argv, err)
    for w in words:
        assert w in lines[0], (argv, w, lines[0])
    return lines[0]


def digest(path) -> str:
    """A file's sha256, to show a refused command left it as it was."""
    import hashlib

    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()
