"""`provmap rpc-server`: a TVM RPC server that measures candidates for remote searches.

It is TVM's RPC server: a client can upload a shared library and have it loaded, so whoever
reaches the port runs native code here, by design (that is how candidates get measured).  Hence
it listens on loopback unless told otherwise, and says so loudly when it is told otherwise
(docs/remote.md, "Threat model").
"""

from __future__ import annotations

import ipaddress
import signal
import sys
import time

from provmap.provenance.util.errors import ProvmapError, first_line

from .common import seconds, tcp_port

LOOPBACK = "127.0.0.1"


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def cmd_rpc_server(args) -> int:
    from provmap.partition.measure.remote import start_server

    if args.port_end < args.port:
        raise ProvmapError(f"--port-end {args.port_end} is below --port {args.port}")
    if not _is_loopback(args.host):
        print(f"provmap: warning: rpc-server listening on {args.host}: anyone who can reach this "
              "port can upload a shared library and have it loaded, i.e. run native code on this "
              "machine as this user. Bind a non-loopback address only on a network where every "
              "host is yours; otherwise keep the default (127.0.0.1) and reach it through an SSH "
              "tunnel (docs/remote.md)", file=sys.stderr, flush=True)

    try:
        server = start_server(args.tracker, args.key, host=args.host, port=args.port,
                              port_end=args.port_end, silent=not args.verbose)
    except ProvmapError:
        raise
    except Exception as e:  # TVM's socket/bind errors: one line
        raise ProvmapError(f"rpc-server on {args.host}: {first_line(e)}") from None
    print(f"provmap: rpc-server on {args.host}:{server.port}, key {args.key!r}, registered with "
          f"tracker {args.tracker}; Ctrl-C to stop", file=sys.stderr, flush=True)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    try:
        deadline = None if args.stop_after is None else time.monotonic() + args.stop_after
        while not stop and (deadline is None or time.monotonic() < deadline):
            time.sleep(0.2)
            if server.proc is None:
                break
    except KeyboardInterrupt:
        pass
    finally:
        server.terminate()
    return 0


def add_rpc_commands(sub) -> None:
    r = sub.add_parser("rpc-server", help="serve candidate measurements to remote searches "
                       "(a TVM RPC server registered with a tracker; see docs/remote.md)")
    r.add_argument("--tracker", required=True, metavar="HOST:PORT",
                   help="the tracker to register with (python -m tvm.exec.rpc_tracker)")
    r.add_argument("--key", required=True, help="device key searches ask for "
                   "(--measure-on tracker:HOST:PORT/KEY)")
    r.add_argument("--host", default=LOOPBACK, help="address to listen on (default %(default)s, "
                   "loopback only: the server loads and runs the native code clients upload, so "
                   "reach it through an SSH tunnel; anything else prints a warning; "
                   "docs/remote.md)")
    r.add_argument("--port", type=tcp_port, default=9091, help="first port to try (default %(default)s)")
    r.add_argument("--port-end", type=tcp_port, default=9199, help="last port to try (default %(default)s)")
    r.add_argument("--stop-after", type=seconds, metavar="SECONDS",
                   help="stop by itself after this long (scripts and tests)")
    r.add_argument("--verbose", action="store_true", help="TVM's server log on stderr")
    r.set_defaults(func=cmd_rpc_server)
