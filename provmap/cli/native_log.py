"""Libraries' own C++ log lines kept off the user's terminal unless `provmap -v` (issue 36).

TVM's C++ code logs warnings straight to file descriptor 2, from every build and support check:
`[07:27:03] /project/include/tvm/topi/transform.h:1261: Warning: Fast mode segfaults when there
are out-of-bounds indices...` appeared twice in a plain `provmap compile` of a model with a
Gather (provmap checks such indices itself: runtime_module/index_bounds.py).  Python cannot
catch those writes, so for the length of a command fd 2 becomes a pipe that a thread reads: a
line in a C++ logger's format is dropped, every other line (provmap's own, a library's error)
goes on to the real stderr in the order written.  Child processes inherit the pipe, so their
lines are filtered the same way.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import re
import sys
import threading

from provmap.provenance.util import interrupt, native_stop

#: `[HH:MM:SS] path/file.ext:LINE: Warning|Info|Debug: ...`: TVM's (dmlc-style) C++ logger;
#: `YYYY-MM-DD HH:MM:SS.mmm WARNING ...`: TVM's Python loggers (its RPC client's "Cannot
#: connect to tracker ..., retry in 5 secs" came before provmap's own error: issue 36).
_NATIVE = re.compile(rb"^(\[\d\d:\d\d:\d\d\] \S+:\d+: (Warning|Info|Debug|W|I|D)\b"
                     rb"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[.,]\d+ (WARNING|INFO|DEBUG) )")


@contextlib.contextmanager
def native_log_filtered(enabled: bool = True):
    """fd 2 through the filter for the block.  Setting up and restoring fd 2 happen with
    Ctrl-C held back (recorded, raised after): a KeyboardInterrupt between pointing fd 2 at the
    pipe and starting its reader left "provmap: interrupted" in a pipe nobody read (exit 130,
    empty stderr: once in 150 Ctrl-Cs at start-up)."""
    if not enabled:
        yield
        return
    with interrupt.deferred():
        fds = _redirect()
    if fds is None:  # no fd 2 (embedded interpreters): nothing to filter
        yield
        return
    real, thread = fds
    # A crash's trace (PYTHONFAULTHANDLER / -X faulthandler) goes to the terminal itself: the
    # pump thread dies with the process, and a segfault once left CI an empty stderr.
    tracing = faulthandler.is_enabled()
    try:
        if tracing:
            faulthandler.enable(file=real, all_threads=True)
        native_stop.report_to(real)  # its os._exit kills the reader below: not through it
        yield
    finally:
        with interrupt.deferred():
            native_stop.report_to(None)
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.flush()
            os.dup2(real, 2)  # closes our end of the pipe: the reader sees EOF once children have
            if tracing:
                faulthandler.enable(file=2, all_threads=True)
            thread.join(timeout=5.0)
            os.close(real)


def _redirect():
    """fd 2 -> a pipe read by a filtering thread: (the real stderr's fd, the thread), or None."""
    try:
        sys.stderr.flush()
        real = os.dup(2)
        read_end, write_end = os.pipe()
        os.dup2(write_end, 2)
        os.close(write_end)
    except (OSError, ValueError):
        return None

    def pump() -> None:
        pending = b""
        with os.fdopen(read_end, "rb", buffering=0) as src:
            while True:
                try:
                    chunk = src.read(65536)
                except OSError:
                    break
                if not chunk:
                    break
                pending += chunk
                *lines, pending = pending.split(b"\n")
                _forward(real, lines)
        if pending:
            _forward(real, [pending], newline=False)

    thread = threading.Thread(target=pump, name="provmap-stderr", daemon=True)
    thread.start()
    return real, thread


def _forward(fd: int, lines: list[bytes], newline: bool = True) -> None:
    keep = [ln for ln in lines if not _NATIVE.match(ln)]
    if not keep:
        return
    data = b"\n".join(keep) + (b"\n" if newline else b"")
    with contextlib.suppress(OSError):
        while data:
            n = os.write(fd, data)
            data = data[n:]
