"""Where provmap keeps its own state (the cost cache), resolvable with the standard library alone.

Why here, on the lowest floor: every command's output check refuses provmap's own files as
outputs, and it ran at every start-up; finding the cache's path used to import the whole
measuring package (about 60 ms of each offline command's start)."""

from __future__ import annotations

import os
from pathlib import Path


def cost_cache_path() -> Path:
    """$PROVMAP_CACHE, else ~/.cache/provmap/costs.sqlite."""
    env = os.environ.get("PROVMAP_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "provmap" / "costs.sqlite"
