"""A bounded CPU hog: one process spinning on one core for at most N s, for the contention
tests and for `provmap bench --search-beside-hog` (a search decided beside a neighbour's job,
its artifact measured afterwards on a quiet machine: issue 35).

It is started detached (forked by a short-lived parent, so it is re-parented away from the
test's process tree): the contention detector counts this process tree's own CPU time as
"ours", and a hog that is our descendant would be invisible to it -- as a neighbour's job is not.
It spins on its own deadline, so a test killed mid-way leaves nothing running for long, and the
context manager kills it in `finally` anyway."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

_CODE = """
import os, time
pid = os.fork()
if pid == 0:
    n = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(n, fd)
    try:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    except (AttributeError, OSError):
        pass
    end, owner, look = time.monotonic() + %f, %d, 0.0
    while time.monotonic() < end:
        if time.monotonic() > look:  # the owner gone (killed past its finally): stop too
            look = time.monotonic() + 0.5
            try:
                os.kill(owner, 0)
            except ProcessLookupError:
                break
    os._exit(0)
print(pid)
"""


@contextlib.contextmanager
def cpu_hog(seconds: float = 30.0):
    """Yields the hog's pid; the hog spins for at most `seconds`, and stops within 0.5 s of
    this process's end (a bench killed by SIGTERM never reaches the `finally` below: a 3600 s
    hog outlived one on 2026-11-28 and loaded the next run's quiet phase)."""
    out = subprocess.run([sys.executable, "-c", _CODE % (float(seconds), os.getpid())],
                         capture_output=True,
                         text=True, check=True, timeout=30)
    pid = int(out.stdout.strip())
    try:
        yield pid
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
