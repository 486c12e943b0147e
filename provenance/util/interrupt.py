"""Ctrl-C that native code cannot swallow.

Python turns SIGINT into KeyboardInterrupt at the next bytecode, and during a TVM build that is
inside a Python callback TVM's C++ calls (a pass instrument): TVM catches it there, and the build
either goes on (the command finished with exit 0, artifact written) or fails as
"RuntimeError".  So the CLI's handler also records the signal, and the places that must not
carry on after one (a native build returning or failing, a file about to be renamed into place)
ask `raise_if_interrupted`.  Without `install` (the Python API) nothing changes.
"""

from __future__ import annotations

import signal

_interrupted = False


def _handler(signum, frame):
    global _interrupted
    _interrupted = True
    raise KeyboardInterrupt


def install() -> None:
    """Record SIGINT as well as raising KeyboardInterrupt (the CLI calls this)."""
    global _interrupted
    _interrupted = False
    try:
        signal.signal(signal.SIGINT, _handler)
    except ValueError:  # not the main thread (e.g. main() called from a worker thread)
        pass


def interrupted() -> bool:
    return _interrupted


def raise_if_interrupted() -> None:
    """KeyboardInterrupt if Ctrl-C came since `install`, whoever caught the first one."""
    if _interrupted:
        raise KeyboardInterrupt
