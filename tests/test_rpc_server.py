"""`provmap rpc-server` runs the native code its clients upload, so by default it must be
reachable from this machine only (issue 26).  The real server process, its real socket."""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> set[str]:
    """Local addresses (hex, as the kernel writes them) of sockets listening on `port`."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            addr, _, hexport = local.partition(":")
            if state == "0A" and int(hexport, 16) == port:  # 0A: TCP_LISTEN
                found.add(addr)
    return found


@pytest.fixture
def tracker():
    from tvm.rpc.tracker import Tracker

    t = Tracker(host="127.0.0.1", port=19400, port_end=19500, silent=True)
    yield f"127.0.0.1:{t.port}"
    t.terminate()


def _start(tracker, *extra, span=50):
    """The server process and the port it says it bound (bounded: 60 s)."""
    port = _free_port()
    p = subprocess.Popen([sys.executable, "-m", "provmap.cli.main", "rpc-server", "--tracker",
                          tracker, "--key", "t", "--port", str(port), "--port-end",
                          str(port + span), "--stop-after", "120", *extra],
                         stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in p.stderr], daemon=True).start()
    seen = []
    while True:
        try:
            line = lines.get(timeout=60)
        except queue.Empty:
            p.kill()
            pytest.fail(f"rpc-server did not start within 60 s: {seen}")
        seen.append(line)
        m = re.search(r"rpc-server on (\S+):(\d+)", line)
        if m:
            return p, int(m.group(2)), "".join(seen)


def _stop(p):
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(timeout=10)


def test_rpc_server_listens_on_loopback_only_by_default(tracker):
    p, port, err = _start(tracker)
    try:
        addrs = _listening(port)
        assert addrs, f"nothing listens on {port}"
        # 0100007F is 127.0.0.1 as /proc/net/tcp writes it (little-endian); 00000000 would be
        # 0.0.0.0, every interface
        assert addrs == {"0100007F"}, addrs
        assert "warning" not in err
    finally:
        _stop(p)


def test_rpc_server_on_another_address_warns_what_it_executes(tracker):
    """192.0.2.1 (TEST-NET-1, never this machine's): the warning comes before the bind, and
    the test never exposes a server to the network; the bind's failure is one line."""
    port = _free_port()
    r = subprocess.run([sys.executable, "-m", "provmap.cli.main", "rpc-server", "--tracker",
                        tracker, "--key", "t", "--host", "192.0.2.1", "--port", str(port),
                        "--port-end", str(port + 2), "--stop-after", "5"],
                       capture_output=True, text=True, env=dict(os.environ), timeout=120)
    assert "warning: rpc-server listening on 192.0.2.1" in r.stderr
    assert "run native code on this machine" in r.stderr and "SSH tunnel" in r.stderr
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "rpc-server on 192.0.2.1: OSError: [Errno 99]" in r.stderr.splitlines()[-1]


def test_port_end_is_the_last_port_tried(tracker):
    """--port P --port-end P means "port P": TVM's own end is exclusive, so this range used to
    be empty and the server failed to bind after accepting it (issue 33)."""
    p, port, _err = _start(tracker, span=0)
    try:
        assert _listening(port) == {"0100007F"}
    finally:
        _stop(p)
