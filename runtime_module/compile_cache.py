"""A scratch directory where a backend may keep what it compiled, while one measurement loads
the same blobs again and again.

Why: the one comparison procedure loads each alternative alone for each of its blocks (its room,
partition/measure/interleave.py), so a decision of 6 passes loads every plan 7 times.  On
ResNet-50 QDQ OpenVINO's compile_model took 0.94 s a load, 9.3 s of an 18.6 s decision, where
its model cache (CACHE_DIR) compiles the same IR again in 0.17 s (2026-11-29, AMD EPYC AVX2).

The directory is provmap's own, made when a scope opens and removed when it closes:
never the user's cache (a test or a search must not leave compiled models in it), and nothing
outside a scope -- `provmap run`, `compare`, a build -- compiles differently from the library
called directly.  The cache only skips work: what a cached compile returns is what the same
compile returns without it, so what is measured is unchanged.
"""

from __future__ import annotations

import contextlib
import contextvars
import shutil
import tempfile
from typing import Iterator

_current: contextvars.ContextVar[str | None] = contextvars.ContextVar("provmap_compile_cache",
                                                                      default=None)


def current() -> str | None:
    """The open scope's directory, or None outside any (then a backend caches nothing)."""
    return _current.get()


@contextlib.contextmanager
def scratch() -> Iterator[str]:
    """A scope for the block, its directory removed on leaving.  One measurement of several
    alternatives is a scope (partition/measure/interleave.artifact_calls), not a whole search:
    a decision loads each of its plans at least 7 times, and a search's second level tries
    dozens of plans whose cached copies, each as large as its weights, would pile up on disk."""
    path = tempfile.mkdtemp(prefix="provmap-compile-cache-")
    token = _current.set(path)
    try:
        yield path
    finally:
        _current.reset(token)
        shutil.rmtree(path, ignore_errors=True)
