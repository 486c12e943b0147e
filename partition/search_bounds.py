"""The first level's search budget, and the memory it reads to keep it (issue 51).

A cold search on a dynamically quantized BERT-base grew 50 MB/s in the shortest path's heap
loop until the kernel killed it: the number of states has no bound a graph cannot exceed.
These limits make the search's work and memory bounded whatever the graph:

- `signatures_per_cover`: how many frontier signatures (backends of the covered nodes that
  still touch uncovered ones) the shortest path keeps per covered set.  1 is TVM Collage's
  own state (the covered set alone, crossings charged on the path); more keeps the search exact
  on graphs whose frontiers are narrow, which are nearly all of them.  A wide frontier has a
  number of signatures exponential in its width: this is the bound that stops it multiplying.
- `max_states`: states the shortest path may store (each one costs memory until the search
  ends).  Past it, or past `max_growth_bytes` of resident memory grown since the search began,
  the search does not die: it starts again as a beam (`beam_width` states per position of the
  first uncovered node, so at most n x width expansions) and says so.

The defaults keep a search on thousands of nodes to some hundred MB and tens of seconds; the
small graphs the tests and most models have never reach them, so their plans are unchanged.
"""

from __future__ import annotations

import os
import resource
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class SearchBounds:
    signatures_per_cover: int = 8
    max_states: int = 200_000
    max_growth_bytes: int | None = 1536 << 20
    beam_width: int = 16
    memory_check_every: int = 4096   # stored states between two looks at resident memory


DEFAULT_BOUNDS = SearchBounds()


def reset_peak_rss() -> None:
    """Make the peak start from now (Linux: /proc/self/clear_refs "5"; elsewhere a no-op, the
    peak stays the process's).  Why: the bench runs every model's search in one process, and its
    lifetime peak was charged to the next search: BERT-base's row showed 6.1 GB, where the
    search before it had ended at 2.3 GB and that model's limit rounds ran after it (2026-11-29)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def peak_rss_bytes() -> int | None:
    """The process's peak resident memory since `reset_peak_rss` (else since it began): the
    kernel's high-water mark (VmHWM), which that reset moves; ru_maxrss where /proc is not."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
    except (OSError, ValueError, IndexError, StopIteration):
        pass
    try:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    except (OSError, ValueError):
        return None
    return peak if sys.platform == "darwin" else peak * 1024  # Linux reports KiB


def current_rss_bytes() -> int | None:
    """Resident memory now: the peak cannot say whether the search is what grows."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class MemoryWatch:
    """Growth of resident memory since the search began, looked at every so many states (a
    read of /proc costs microseconds; every state would still be too often)."""

    def __init__(self, bounds: SearchBounds):
        self.limit = bounds.max_growth_bytes
        self.every = max(1, bounds.memory_check_every)
        self.start = current_rss_bytes() if self.limit is not None else None

    def over(self, stored: int) -> int | None:
        """The growth in bytes when it is past the limit, else None."""
        if self.start is None or stored % self.every:
            return None
        now = current_rss_bytes()
        if now is None:
            return None
        grown = now - self.start
        return grown if grown > self.limit else None
