"""Ctrl-C while a backend's native code holds a thread: ask it to stop, else end the process.

Why: Python runs a SIGINT handler only in the main thread, between bytecodes.  An inference
call (ONNX Runtime's session run, OpenVINO's infer, a TVM VM call) runs in C++ until it
returns, so Ctrl-C waited for it: a Loop with a trip count of 1e18 under `provmap run` ran on
after two Ctrl-Cs (issue 52), although docs/security.md promised Ctrl-C stops a stranger's
artifact.

How: `start` (the CLI only, beside interrupt.install) points `signal.set_wakeup_fd` at a pipe;
CPython's C-level handler writes the signal's number there the moment it arrives, whatever the
main thread is doing.  A watcher thread reads it and calls the `cancel` of every native call
running now (`enter`/`leave` bracket them: module._call, backend.time_runner; `running`
for compare, bisect and profile): ONNX Runtime's
`RunOptions.terminate` stops a call between two nodes.  It then waits GRACE_S for those calls
to return.  One that does not (OpenVINO's CPU plugin does not stop a running graph: measured,
`InferRequest.cancel()` returned at once and the Loop ran on; TVM's VM has no way in) ends the
process: the temp files staged for outputs removed, the one line `provmap: interrupted`, exit
status 130.  Nothing is half-written either way: outputs are written after the calls return,
through temp files renamed into place (atomic.py), and the temps are what this removes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading

#: How long a native call may take to return after its cancel before the process ends.
GRACE_S = 0.5

_lock = threading.Lock()
_idle = threading.Condition(_lock)
_calls: dict[int, object] = {}  # key -> the call's cancel (None: it has none)
_count = 0
_started = False
_stderr = 2  # where the last line goes (the CLI's fd 2 may be a filtering pipe: report_to)


def start() -> None:
    """Watch for SIGINT from a thread of our own (main thread only; once per process).  Not
    when something else already set a wakeup fd (an event loop's): that stays theirs."""
    global _started
    if _started:
        return
    r, w = os.pipe()
    os.set_blocking(w, False)  # the C handler must never block on it
    try:
        old = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    except ValueError:  # not the main thread
        old = None
    if old != -1:
        if old is not None:
            signal.set_wakeup_fd(old)
        os.close(r)
        os.close(w)
        return
    threading.Thread(target=_watch, args=(r,), name="provmap-ctrl-c", daemon=True).start()
    _started = True


def report_to(fd: int | None) -> None:
    """Write the exit's line to `fd` (None: fd 2 again).  The CLI points fd 2 at a pipe its
    filter thread forwards from (cli/native_log.py), and that thread dies with os._exit before
    it forwards: the line went nowhere."""
    global _stderr
    _stderr = 2 if fd is None else fd


def enter(cancel=None):
    """Mark a native call as running (`cancel`: how to stop it from another thread, or None);
    returns the key for `leave`.  Nothing (None) when the watcher is not started: the Python
    API keeps its plain behaviour and pays one check."""
    global _count
    if not _started:
        return None
    with _lock:
        _count += 1
        _calls[_count] = cancel
        return _count


def leave(key) -> None:
    if key is None:
        return
    with _lock:
        _calls.pop(key, None)
        _idle.notify_all()


@contextlib.contextmanager
def running(cancel=None):
    """`enter`/`leave` around a block of native calls: compare's and bisect's reference runs,
    bisect's prefixes and profile's profiled calls call libraries outside `module._call`, and
    Ctrl-C waited for them as it had for `run` (issue 52)."""
    key = enter(cancel)
    try:
        yield
    finally:
        leave(key)


def _watch(fd: int) -> None:
    while True:
        try:
            data = os.read(fd, 512)
        except OSError:
            return
        if not data:
            return
        if signal.SIGINT in data:  # one byte per signal, its number
            _stop_calls()


def _stop_calls() -> None:
    with _lock:
        cancels = list(_calls.values())
    if not cancels:  # Python code holds the thread: the ordinary handler stops it
        return
    for cancel in cancels:
        if cancel is not None:
            with contextlib.suppress(Exception):  # a library's failure to cancel: see below
                cancel()
    with _lock:
        if _idle.wait_for(lambda: not _calls, timeout=GRACE_S):
            return
    _end()


def _end() -> None:
    from .atomic import discard_staged

    try:
        discard_staged()
        os.write(_stderr, b"provmap: interrupted\n")
    finally:
        os._exit(130)
