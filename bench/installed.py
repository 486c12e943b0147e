"""A fresh `provmap` process timed as a user's installation runs it: its bytecode cached.

Why: pip compiles a package's modules when it installs it, so a user's `provmap run` reads
.pyc files.  A shell or CI with PYTHONDONTWRITEBYTECODE set (this project's sandbox sets it)
compiles provmap's ~70 start-up modules from source in every process: 0.14 s of a 2.2 s
`provmap run` on the 124M decoder, charged to provmap against a library whose own modules come
precompiled.  The first child writes the cache; the steps that measure run after it."""

from __future__ import annotations

import os


def installed_env() -> dict[str, str]:
    """This process's environment for a timed child, with bytecode caching on."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env
