"""The one way any `provmap` command escapes text before a terminal sees it.

Why one module: issue 52 found `trust` printing a received file's path raw while `inspect`
escaped it, and U+200B/U+FEFF shown raw by every command; each place that escaped had its own
idea of what to escape.  Every path and name a command prints (the artifact's, the model's, a
trust list's, the user's own command line's) goes through `term_safe`; JSON output does not
(json.dumps escapes every control character itself).  No imports from provmap: the start-up
checks (preflight) use it before anything else loads.
"""

from __future__ import annotations

import unicodedata

#: Unicode categories a terminal acts on or hides rather than shows: controls (Cc: escape
#: sequences, carriage returns, BEL), format characters (Cf: bidi overrides and isolates,
#: zero-width spaces and joiners, the BOM, tag characters), lone surrogates (Cs: a file name's
#: undecodable bytes, which print() would refuse) and the line and paragraph separators.
_HIDDEN = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def _hidden(c: str) -> bool:
    return unicodedata.category(c) in _HIDDEN


def _shown(c: str) -> str:
    o = ord(c)
    return "\\x%02x" % o if o < 0x100 else "\\u%04x" % o if o < 0x10000 else "\\U%08x" % o


def term_safe(text) -> str:
    """`text` with every character a terminal would act on or not show (escape sequences,
    carriage returns, bidi overrides, zero-width characters, a BOM) written as a visible
    escape (\\x1b, \\u202e): names and paths from an artifact, a model or a trust list are
    someone else's text, and a terminal would act on them (recolour, move the cursor, retitle)
    or show a name other than the one the file has.  Every path and name any command prints
    goes through here (issue 52: one helper, so no command escapes less than another)."""
    s = str(text)
    if s.isascii() and s.isprintable():  # the usual case, no lookup per character
        return s
    return "".join(_shown(c) if _hidden(c) else c for c in s)
