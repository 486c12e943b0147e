"""Which artifacts may run native code on this machine.

Threat model (docs/artifact.md): an artifact may come from someone else.  Its SHA-256 member
hashes catch corruption, but whoever writes an artifact writes the hashes too, so they prove
nothing about intent.  A TVM partition is a shared library: loading it runs its code (static
constructors run at dlopen).  ONNX Runtime and OpenVINO partitions are model files those
libraries parse, not code.  Hence two rules:

1. Reading an artifact (inspect, lookup, explain, annotate, report without --measure) never
   loads partition code: `load(path, runnable=False)` touches the manifest, the map and
   readable sources only, and such a module refuses to run.
2. Loading native code needs trust: the artifact's digest (SHA-256 of its manifest, which holds
   every member's hash) is in this machine's trust list, or the caller says so explicitly
   (`--trust`, `load(..., trust=True)`).  Artifacts saved on this machine are added to the list
   as they are written, so your own builds just run; one you received needs `provmap trust ART`
   (after you decided you trust its origin) or `--trust`.

The list is a text file, one digest per line with a comment: `$PROVMAP_TRUST` or
`~/.config/provmap/trusted-artifacts`.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
from pathlib import Path


def trust_file() -> Path:
    env = os.environ.get("PROVMAP_TRUST")
    if env:
        return Path(env).expanduser()
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "provmap" / "trusted-artifacts"


def manifest_digest(manifest_bytes: bytes) -> str:
    return hashlib.sha256(manifest_bytes).hexdigest()


def is_trusted(digest: str) -> bool:
    path = trust_file()
    try:
        with open(path, encoding="utf-8") as f:
            return any(line.split("#", 1)[0].strip() == digest for line in f)
    except FileNotFoundError:
        return False


def add_trusted(digest: str, note: str = "") -> bool:
    """Record `digest`; returns False (and writes nothing) if it was already there.

    One short append per artifact (O_APPEND: concurrent writers do not interleave lines).
    A trust list that cannot be written is not an error for the build that tried: the artifact
    is still written, it just needs --trust to run elsewhere.
    """
    if is_trusted(digest):
        return False
    path = trust_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        stamp = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        line = f"{digest}  # {stamp} {note}".rstrip() + "\n"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except OSError:
        return False
    return True
