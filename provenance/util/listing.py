"""Long lists in one-line messages: the first few items, then how many more.

A warning naming every frozen input or duplicate node name of a published model ran to
hundreds of names on one line; the messages name three and count the rest, all alike."""

from __future__ import annotations


def first_few(items, n: int = 3, quote: bool = False) -> str:
    """`a, b, c and 4 more` (`quote`: each item as repr, for names a user must tell apart)."""
    items = list(items)
    shown = ", ".join(repr(x) if quote else str(x) for x in items[:n])
    return shown + (f" and {len(items) - n} more" if len(items) > n else "")


def unused_names(name: str, given) -> str:
    """"; given 'X' (did you mean 'X' for 'x'?)": the names given beside a missing one, the
    closest suggested (an array `X` for input `x` got only "missing input 'x'": the eleventh
    afternoon).  "" when nothing else was given."""
    import difflib

    extra = [k for k in given if isinstance(k, str) and k != name]
    if not extra:
        return ""
    close = [k for k in extra if k.lower() == name.lower()] or \
        difflib.get_close_matches(name, extra, n=1, cutoff=0.6)
    return (f"; given {first_few(extra, 5, quote=True)}"
            + (f" (did you mean {close[0]!r} for {name!r}?)" if close else ""))
