"""The measuring worker's process: started in a session of its own, stopped, restarted after a
crash, killed after a timeout, and its scratch removed once it is reaped.  What it does with a
request is partition/measure/worker.py's (both sides of the pipe use those helpers)."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import time

from provmap.provenance.util.errors import ProvmapError

from .worker import RequestState, handle_request


def _forked_main(conn, tmp: str) -> None:
    """A forked worker's entry: its temporary files under `tmp`, as a spawned one's
    (_SessionChild), which the parent removes once the worker is reaped."""
    import tempfile

    os.environ["TMPDIR"] = tempfile.tempdir = tmp
    _worker_main(conn)


def _worker_main(conn) -> None:
    try:  # a crashing backend must not leave core files around
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except Exception:
        pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    import onnx  # noqa: F401  (imported before "ready": start-up is not a candidate's time)

    from ..model_source import load_view  # noqa: F401

    try:
        conn.send("ready")
    except (BrokenPipeError, OSError):
        return
    state = RequestState()
    while True:
        try:
            req = conn.recv()
        except (EOFError, OSError):
            return
        if req is None:
            return
        reply = handle_request(req, state)
        try:
            conn.send(reply)
        except (BrokenPipeError, OSError):
            return


class _SessionChild:
    """The worker as a fresh interpreter in its own session, with multiprocessing's API.

    Ctrl-C reaches the terminal's whole process group; a worker spawned by multiprocessing was
    in it and spent seconds importing (numpy, tvm, torch through tvm_ffi) before it could
    ignore SIGINT, so it printed a 50-line traceback under the CLI's one line (issue 36).  In
    its own session no terminal signal reaches it at all; the parent stops it (and it ends on
    its own when the pipe closes: the parent is gone).

    Its temporary files live under a directory the parent made (TMPDIR): a worker killed for
    a candidate's timeout never runs its exit handlers, and its staged weights and libraries'
    scratch directories stayed in /tmp, one set per kill.  The parent removes the directory
    once the worker is reaped."""

    def __init__(self, conn):
        import os
        import subprocess
        import sys
        import tempfile
        import weakref

        code = ("import sys, json; sys.path[:] = json.loads(sys.argv[2]); "
                "from multiprocessing.connection import Connection; "
                "from provmap.partition.measure.worker_process import _worker_main; "
                "_worker_main(Connection(int(sys.argv[1])))")
        fd = conn.fileno()
        self.tmp = tempfile.mkdtemp(prefix="provmap-worker-")
        self._p = subprocess.Popen([sys.executable, "-c", code, str(fd), json.dumps(sys.path)],
                                   pass_fds=[fd], start_new_session=True,
                                   stdin=subprocess.DEVNULL, env=dict(os.environ, TMPDIR=self.tmp))
        self.pid = self._p.pid
        weakref.finalize(self, _kill, self._p, self.tmp)  # at exit too, as multiprocessing's

    @property
    def exitcode(self):
        return self._p.poll()

    def is_alive(self) -> bool:
        return self._p.poll() is None

    def join(self, timeout=None) -> None:
        import subprocess

        try:
            self._p.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    def kill(self) -> None:
        _kill(self._p, self.tmp)


def _kill(popen, tmp: str) -> None:
    import shutil

    if popen.poll() is None:
        try:
            popen.kill()
            popen.wait(5)
        except Exception:  # noqa: BLE001 - gone already, or exiting: nothing left to do
            pass
    if popen.poll() is not None:  # reaped: nothing writes there any more
        shutil.rmtree(tmp, ignore_errors=True)


class WorkerDied(Exception):
    def __init__(self, reason: str, cacheable: bool = True):
        super().__init__(reason)
        self.reason = reason
        self.cacheable = cacheable


class Worker:
    """One persistent measuring process; restarted after it dies."""

    def __init__(self, start_method: str = "spawn"):
        self.ctx = mp.get_context(start_method)
        self.start_method = start_method
        self.proc = None
        self.conn = None
        self.starts = 0
        self.crashes = 0
        self.start_s = 0.0

    def alive(self) -> bool:
        return self.proc is not None and self.proc.is_alive()

    def start(self, timeout_s: float = 300.0) -> None:
        """Start the worker and wait until it has imported what it needs.  A worker that
        cannot start is this installation's problem, not a candidate's: ProvmapError."""
        t0 = time.perf_counter()
        parent, child = self.ctx.Pipe()
        if self.start_method == "spawn":
            proc = _SessionChild(child)
        else:  # "fork"/"forkserver", for a caller who asks (shares the terminal's Ctrl-C)
            import tempfile

            proc = self.ctx.Process(target=_forked_main,
                                    args=(child, tempfile.mkdtemp(prefix="provmap-worker-")),
                                    daemon=True, name="provmap-cost-worker")
            proc.tmp = proc._args[1]
            proc.start()
        child.close()
        self.proc, self.conn = proc, parent
        msg = None
        try:
            if parent.poll(timeout_s):
                msg = parent.recv()
        except (EOFError, OSError):
            pass
        if msg != "ready":
            proc.join(1)
            code = proc.exitcode
            self._discard()
            raise ProvmapError(
                f"cost measurement worker did not start (exit code {code}); provmap must "
                "import in a fresh interpreter (`python -c \"import provmap.partition\"`), or "
                "use MeasuredEstimator(isolate=False)")
        self.starts += 1
        self.start_s += time.perf_counter() - t0

    def _death(self) -> WorkerDied:
        proc = self.proc
        proc.join(10)
        code = proc.exitcode
        self._discard()
        self.crashes += 1
        if code is None:
            return WorkerDied("backend crashed (worker stopped answering)")
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = "?"
            return WorkerDied(f"backend crashed (signal {-code}: {name})",
                               cacheable=(-code != signal.SIGKILL))
        return WorkerDied(f"backend crashed (worker exited with code {code})")

    def _discard(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except OSError:
                pass
        if self.proc is not None and self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)
        if self.proc is not None and not self.proc.is_alive():  # reaped: its scratch can go
            import shutil

            shutil.rmtree(self.proc.tmp, ignore_errors=True)
        self.proc = self.conn = None

    def call(self, req: dict, timeout_s: float | None) -> dict:
        if not self.alive():
            self._discard()
            self.start()
        try:
            self.conn.send(req)
        except (BrokenPipeError, OSError):
            raise self._death() from None
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            wait = 1.0 if deadline is None else max(0.0, min(1.0, deadline - time.monotonic()))
            if self.conn.poll(wait):
                try:
                    return self.conn.recv()
                except (EOFError, OSError):
                    raise self._death() from None
            if not self.proc.is_alive() and not self.conn.poll(0):
                raise self._death()
            if deadline is not None and time.monotonic() >= deadline:
                self._discard()
                self.crashes += 1
                raise WorkerDied(f"timed out after {timeout_s:g} s (worker killed)",
                                  cacheable=False)

    def stop(self) -> None:
        """Ask the worker to finish; after Ctrl-C, kill it at once (a worker still importing
        would have held the command's exit up to 5 s)."""
        from provmap.provenance.util.interrupt import interrupted

        if self.conn is not None and self.alive() and not interrupted():
            try:
                self.conn.send(None)
                self.proc.join(5)
            except (BrokenPipeError, OSError):
                pass
        self._discard()
