"""Measuring candidates on other machines through TVM's RPC tracker.

Vendors search partitions for a device that is not the machine running the search, and a cold
search measures hundreds of candidates one at a time.  TVM already ships the engine for this:
a tracker, servers that register with it under a device key, and sessions requested by key.
provmap uses it as is and adds two remote functions, registered in every server process by
`register` (`provmap rpc-server`, or TVM's own server with `server_init_callback`):

* ``provmap.rpc.measure(request_json, model_bytes) -> reply_json``: the same request the local
  measuring worker handles (`worker.handle_request`): build, check against the reference and
  time one candidate with the backends installed *there*;
* ``provmap.rpc.identity() -> json``: that machine's host fingerprint and backend versions,
  which key the cost cache (a price measured on the board is the board's, not this host's).

`RemotePool` holds one session per free server of the key and gives each request to a free
session; several servers measure in parallel (`MeasuredEstimator.prefetch`).  A session that
raises, loses its connection or does not answer within the timeout is dropped and the request
is retried on another one; with none left the candidate is unpriced with the reason.  Nothing
waits forever on a lost server.
"""

from __future__ import annotations

import contextlib
import json
import queue
import threading
import time

from provmap.provenance.util.errors import ProvmapError, first_line

from .tracker_address import TrackerAddress  # noqa: F401  (re-exported)
from .worker_process import WorkerDied

FUNC_MEASURE = "provmap.rpc.measure"
FUNC_IDENTITY = "provmap.rpc.identity"


# -- the server side -------------------------------------------------------------------------

_STATE = None  # per session process: backends and the reference-output cache


def _serve_measure(request_json: str, model) -> str:
    from .worker import RequestState, handle_request

    global _STATE
    if _STATE is None:
        _STATE = RequestState()
    req = json.loads(request_json)
    req["model"] = bytes(model)
    return json.dumps(handle_request(req, _STATE))


def _serve_identity(backends_json: str) -> str:
    from provmap.runtime_module.host import host_info
    from provmap.runtime_module.registry import get_backend

    from .cache import host_fingerprint

    versions, errors = {}, {}
    for name in json.loads(backends_json):
        try:
            versions[name] = get_backend(name).version()
        except Exception as e:
            errors[name] = first_line(e)
    return json.dumps({"host": host_fingerprint(), "machine": host_info(),
                       "versions": versions, "errors": errors})


def register() -> None:
    """Register provmap's remote functions in this process (an RPC server's init callback)."""
    import tvm

    tvm.register_global_func(FUNC_MEASURE, _serve_measure, override=True)
    tvm.register_global_func(FUNC_IDENTITY, _serve_identity, override=True)


def start_server(tracker: str, key: str, host: str = "127.0.0.1", port: int = 9091,
                 port_end: int = 9199, silent: bool = True):
    """A TVM RPC server with provmap's functions, registered with `tracker` ("HOST:PORT")
    under `key`.  Returns the tvm.rpc.Server (it serves from its own process)."""
    from tvm.rpc.server import Server

    thost, _, tport = tracker.rpartition(":")
    try:
        taddr = (thost, int(tport))
    except ValueError:
        raise ProvmapError(f"--tracker {tracker!r}: expected HOST:PORT") from None
    # TVM tries range(port, port_end): its end is exclusive, --port-end is the last port tried.
    return Server(host=host, port=port, port_end=port_end + 1, tracker_addr=taddr, key=key,
                  server_init_callback=register, silent=silent)


# -- the client side -------------------------------------------------------------------------

def _with_timeout(fn, timeout_s: float | None):
    """fn() in a daemon thread; (True, value) or (False, reason).  A call that does not return
    in time is abandoned (its session is dropped by the caller), never waited for."""
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - reported, not raised, in the caller
            box["error"] = e

    t = threading.Thread(target=run, daemon=True, name="provmap-rpc-call")
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        return False, f"no answer within {timeout_s:g} s"
    if "error" in box:
        return False, first_line(box["error"])
    return True, box["value"]


class RemotePool:
    """Sessions to the free servers of one tracker key (see the module doc)."""

    def __init__(self, address: TrackerAddress | str, max_sessions: int | None = None,
                 connect_timeout_s: float = 30.0, backends: list[str] = ()):
        from tvm import rpc

        self.address = (TrackerAddress.parse(address) if isinstance(address, str)
                        else address)
        self.connect_timeout_s = connect_timeout_s
        ok, tracker = _with_timeout(lambda: rpc.connect_tracker(self.address.host,
                                                                self.address.port),
                                    connect_timeout_s)
        if not ok:
            raise ProvmapError(f"{self.address}: cannot reach the tracker: {tracker}")
        self._tracker = tracker
        free = self._free_servers()
        if free == 0:
            raise ProvmapError(f"{self.address}: no free server registered under key "
                               f"{self.address.key!r} (start one with `provmap rpc-server "
                               f"--tracker {self.address.host}:{self.address.port} --key "
                               f"{self.address.key}`)")
        want = free if max_sessions is None else min(free, max_sessions)
        self._idle: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self.sessions = 0
        self.opened = 0
        self.dropped: list[str] = []
        self.retried = 0
        for _ in range(want):
            self._add_session()
        if self.sessions == 0:
            raise ProvmapError(f"{self.address}: could not open a session: "
                               f"{'; '.join(self.dropped) or 'no server answered'}")
        self.identity = self._identity(list(backends))

    def _free_servers(self) -> int:
        try:
            info = self._tracker.summary()["queue_info"].get(self.address.key) or {}
            return int(info.get("free", 0))
        except Exception:
            return 0

    def _add_session(self) -> bool:
        key = self.address.key
        ok, sess = _with_timeout(lambda: self._tracker.request(key, max_retry=1),
                                 self.connect_timeout_s)
        if not ok:
            self.dropped.append(f"session request: {sess}")
            return False
        try:
            fn = sess.get_function(FUNC_MEASURE)
        except Exception as e:
            self.dropped.append(f"server without provmap's functions ({first_line(e)}); "
                                "start it with `provmap rpc-server`")
            return False
        with self._lock:
            self.sessions += 1
            self.opened += 1
        self._idle.put((sess, fn))
        return True

    def _identity(self, backends: list[str]) -> dict:
        sess, fn = self._idle.get()
        try:
            ok, text = _with_timeout(lambda: sess.get_function(FUNC_IDENTITY)(
                json.dumps(backends)), self.connect_timeout_s)
        finally:
            self._idle.put((sess, fn))
        if not ok:
            raise ProvmapError(f"{self.address}: the server did not say who it is: {text}")
        return json.loads(text)

    @property
    def parallel(self) -> int:
        return max(self.sessions, 1)

    # the local Worker's interface, as MeasuredEstimator uses it
    def alive(self) -> bool:
        return self.sessions > 0

    def start(self) -> None:
        pass

    @property
    def starts(self) -> int:
        return self.sessions + self.retried

    @property
    def crashes(self) -> int:
        return self.retried

    start_s = 0.0

    def call(self, req: dict, timeout_s: float | None) -> dict:
        """Measure on some server; a failing session is dropped and the request retried on
        another.  WorkerDied (not cacheable) when every session is gone."""
        payload = {k: v for k, v in req.items() if k != "model"}
        text = json.dumps(payload)
        model = bytearray(req["model"])
        last = "no session"
        while True:
            with self._lock:
                if self.sessions == 0:
                    break
            try:  # every live session comes back: each call is bounded by timeout_s
                sess, fn = self._idle.get(timeout=1.0)
            except queue.Empty:
                continue
            ok, out = _with_timeout(lambda: fn(text, model), timeout_s)
            if ok:
                self._idle.put((sess, fn))
                return json.loads(out)
            last = out
            with self._lock:  # this session is gone (crashed, killed, hung): never reused
                self.sessions -= 1
                self.retried += 1
            self.dropped.append(f"session lost during a measurement: {out}")
        raise WorkerDied(f"{self.address}: every server session was lost (last: {last})",
                         cacheable=False)

    def stop(self) -> None:
        while True:
            try:
                self._idle.get_nowait()
            except queue.Empty:
                break
        self.sessions = 0

    def describe(self) -> dict:
        return {"where": str(self.address), "device": self.identity,
                "sessions_opened": self.opened, "sessions_lost": self.retried,
                "dropped": list(self.dropped)}


@contextlib.contextmanager
def local_farm(n_servers: int, key: str = "provmap-local", port: int = 19190):
    """A tracker and `n_servers` provmap servers on 127.0.0.1, stopped on exit whatever
    happens (tests and the remote bench).  Yields (TrackerAddress, servers)."""
    from tvm.rpc.tracker import Tracker

    tracker = Tracker(host="127.0.0.1", port=port, port_end=port + 100, silent=True)
    servers = []
    try:
        for _ in range(n_servers):
            servers.append(start_server(f"127.0.0.1:{tracker.port}", key, host="127.0.0.1",
                                        port=port + 110, port_end=port + 210))
        addr = TrackerAddress("127.0.0.1", tracker.port, key)
        if not wait_for_servers(addr, n_servers, timeout_s=60):
            raise ProvmapError(f"{n_servers} local RPC server(s) did not register in 60 s")
        yield addr, servers
    finally:
        for s in servers:
            s.terminate()
        tracker.terminate()


def wait_for_servers(address: TrackerAddress, n: int, timeout_s: float = 30.0) -> bool:
    """True once `n` servers of the key are free at the tracker (for tests and scripts)."""
    from tvm import rpc

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            info = rpc.connect_tracker(address.host, address.port).summary()
            if int((info["queue_info"].get(address.key) or {}).get("free", 0)) >= n:
                return True
        except Exception:
            pass
        time.sleep(0.2)
    return False
