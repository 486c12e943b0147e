"""No KeyboardInterrupt inside another package's import, on the CLI's main thread (and no
torch inside TVM's FFI: `_no_torch_for`).

Python raises KeyboardInterrupt at whatever bytecode runs when Ctrl-C comes.  Inside a
library's import that can be Python code a C extension's init calls (onnx's pybind11 module,
protobuf's descriptor pool, tvm_ffi importing torch), and the half-built objects it leaves
crashed the process with SIGSEGV and nothing on stderr: 1 run in 40 with Ctrl-C at start-up,
once in CI, even with extension inits alone guarded.  So while a module outside provmap loads
(its whole import, nested ones included), SIGINT is only recorded; once the outermost such
import is done it is raised, from importlib's own code.  The longest wait is one import (tvm
with torch installed: about 3 s)."""

from __future__ import annotations

import signal  # here, not in _guard: importing it there went through the guard again, forever
import sys
import threading
from importlib.machinery import ExtensionFileLoader, SourceFileLoader

_depth = 0  # nested guarded imports on the main thread
_pending = False  # a Ctrl-C came during the outermost one
_on_signal = None  # interrupt's recorder: the command's checkpoints see the Ctrl-C too


def guard_imports(on_signal) -> None:
    """Install the guard (once; the CLI calls it through interrupt.install, which passes its
    recorder)."""
    global _on_signal
    _on_signal = on_signal
    if not any(isinstance(f, _GuardFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _GuardFinder())


class _GuardFinder:
    """Finds nothing itself: asks the finders after it and swaps in a guarded loader."""

    def find_spec(self, name, path, target=None):
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is None:
                continue
            if name.partition(".")[0] != "provmap":
                guarded = _GUARDED.get(type(spec.loader))
                if guarded is not None:
                    spec.loader = guarded(spec.loader.name, spec.loader.path)
            return spec
        return None

    def invalidate_caches(self):
        pass


def _guarded(cls):
    class Guarded(cls):
        def create_module(self, spec):
            with _guard(raise_after=False):
                return super().create_module(spec)

        def exec_module(self, module):
            with _guard(raise_after=True), _no_torch_for(module.__name__):
                super().exec_module(module)

    Guarded.__name__ = Guarded.__qualname__ = f"Guarded{cls.__name__}"
    return Guarded


class _no_torch_for:
    """TVM without torch, on the CLI: tvm_ffi and tvm.relax import torch at their own import
    when torch is installed (for torch's DLPack and CUDA streams, which provmap never hands
    them), 1.4 s of the 2.8 s `import tvm` and about 0.3 GB of every command's memory.  While a
    module of either package runs, `import torch` finds nothing (each catches the ImportError);
    torch stays importable afterwards for whoever needs it (the bench's exports)."""

    def __init__(self, name: str):
        self.block = name.partition(".")[0] in ("tvm", "tvm_ffi") and "torch" not in sys.modules

    def __enter__(self):
        if self.block:
            sys.modules["torch"] = None  # the import system's "not installed"
        return self

    def __exit__(self, *exc):
        if self.block and "torch" in sys.modules and sys.modules["torch"] is None:
            del sys.modules["torch"]
        return False


_GUARDED = {ExtensionFileLoader: _guarded(ExtensionFileLoader),
            SourceFileLoader: _guarded(SourceFileLoader)}


class _guard:
    """SIGINT recorded, not raised, inside; raised when the outermost guarded import ends
    (`raise_after`) if one came meanwhile."""

    def __init__(self, raise_after: bool):
        self.raise_after = raise_after
        self.active = False

    def __enter__(self):
        global _depth
        if threading.current_thread() is not threading.main_thread():
            return self
        if _depth == 0:
            try:
                self.previous = signal.signal(signal.SIGINT, _record)
            except ValueError:
                return self
        _depth += 1
        self.active = True
        return self

    def __exit__(self, *exc):
        global _depth, _pending
        if not self.active:
            return False
        _depth -= 1
        if _depth == 0:
            signal.signal(signal.SIGINT, self.previous)
            # After create_module the signal waits for exec_module, which follows at once.
            if _pending and self.raise_after and exc[0] is None:
                _pending = False
                raise KeyboardInterrupt
        return False


def _record(signum, frame):
    global _pending
    _pending = True
    if _on_signal is not None:
        _on_signal(signum, frame)
