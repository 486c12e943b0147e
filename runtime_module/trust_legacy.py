"""The trust list's old format: a text file of `digest  # note` lines, read and converted into
the SQLite table (provmap.runtime_module.trust).  Its own module because only a file that is
certainly such a list may ever be converted: a user's notes.txt of `#` lines named by
PROVMAP_TRUST was once rewritten as SQLite (issue 52)."""

from __future__ import annotations

import os
import re
from pathlib import Path

_SQLITE_MAGIC = b"SQLite format 3\x00"
_HEX64 = re.compile(r"[0-9a-f]{64}")
_LEGACY_LINE = re.compile(rb"\s*(#.*)?|\s*[0-9a-f]{64}\s*(#.*)?")
_LEGACY_ENTRY = re.compile(rb"\s*[0-9a-f]{64}\s*(#|$)")
_LEGACY_MAX = 64 << 20  # an old list of a million entries is ~100 MB; no real one comes near


def _is_legacy(path: Path) -> bool:
    """A file holding old-format lines only (`digest  # note`, comments, blank lines), not
    merely "a file that is not SQLite": only such a file is ever converted."""
    try:
        if not path.is_file() or path.stat().st_size > _LEGACY_MAX:
            return False
        with open(path, "rb") as f:
            if f.read(len(_SQLITE_MAGIC)) == _SQLITE_MAGIC:  # the common case: read no more
                return False
            f.seek(0)
            data = f.read()
    except OSError:
        return False
    lines = data.splitlines()
    # at least one entry: a file of comments only (a user's notes.txt of `#` lines) was taken
    # for an old list, and a plain `run` of a TVM artifact rewrote it as SQLite (issue 52)
    return (all(_LEGACY_LINE.fullmatch(line) for line in lines)
            and any(_LEGACY_ENTRY.match(line) for line in lines))


def _legacy_rows(path: Path):
    """Rows from the old text list: `digest  # 2025-...T...+00:00 built here: out.provmap`.
    Its notes held paths relative to wherever the build ran: only absolute ones are kept as
    paths (the rest stay in the note, and --prune treats their file as gone)."""
    seen = set()
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            digest, _, comment = line.partition("#")
            digest = digest.strip()
            if not _HEX64.fullmatch(digest) or digest in seen:
                continue
            seen.add(digest)
            stamp, _, note = comment.strip().partition(" ")
            m = re.match(r"(built here|trusted by the user): (.+)$", note)
            where = m.group(2).strip() if m else ""
            yield (digest, where if os.path.isabs(where) else None, "migrated", stamp or None,
                   None, note or None)


def _kept_name(path: Path) -> Path:
    """Where an old list converted in place is kept: `NAME.old` (`.old.2`, ... if taken)."""
    kept, n = path.with_name(path.name + ".old"), 1
    while os.path.lexists(kept):
        n += 1
        kept = path.with_name(f"{path.name}.old.{n}")
    return kept
