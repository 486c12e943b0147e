"""Long lists in one-line messages: the first few items, then how many more.

A warning naming every frozen input or duplicate node name of a published model ran to
hundreds of names on one line; the messages name three and count the rest, all alike."""

from __future__ import annotations


def first_few(items, n: int = 3, quote: bool = False) -> str:
    """`a, b, c and 4 more` (`quote`: each item as repr, for names a user must tell apart)."""
    items = list(items)
    shown = ", ".join(repr(x) if quote else str(x) for x in items[:n])
    return shown + (f" and {len(items) - n} more" if len(items) > n else "")
