"""What the artifact's schemas share: the one-line refusal.  The documents are declared as
msgspec types (manifest_types, map_types); this turns msgspec's error into provmap's line,
naming the file, member and field (`x.provmap: manifest.json: partitions[3].backend: expected
str, got int`), and bounds the free-form parts no type can bound."""

from __future__ import annotations

import gc
import json
import math
import re
import typing
from contextlib import contextmanager

import msgspec

from provmap.provenance.util.errors import ProvmapError

from .schema_types import MAX_DEPTH, MAX_TEXT


class SchemaError(ProvmapError):
    pass


def fail(where: str, path: str, what: str):
    raise SchemaError(f"{where}: {path.lstrip('.')}: {what}")


@contextmanager
def _no_gc():
    """Parsing and converting a manifest of 100,000 partitions allocates millions of objects,
    none in a cycle: the cyclic collector's passes over them took 1.0 s of 1.3 (measured), and
    reference counting frees them just the same."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def parse_json(data: bytes | str, where: str):
    """json.loads, with every failure (syntax, encoding, nesting deeper than the parser's
    recursion limit) one line naming `where`."""
    try:
        with _no_gc():
            return json.loads(data)
    except RecursionError:
        raise SchemaError(f"{where}: refused: JSON nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise SchemaError(f"{where}: not valid JSON: {str(e).splitlines()[0][:200]}") from None


def convert(doc, typ, where: str):
    """`doc` as `typ`, strictly (no "1" or 1.0 or true for an integer: schema_version 1.0 read
    as 1), or one SchemaError line naming `where` and the field."""
    try:
        with _no_gc():
            return msgspec.convert(doc, typ, strict=True)
    except msgspec.ValidationError as e:
        try:
            line = _explain(str(e), doc, typ)
        except Exception:  # the translation must never hide the refusal itself
            line = str(e).replace("`", "")
        raise SchemaError(f"{where}: {line}") from None


_AT = re.compile(r"(.*?)(?: - at `(key` in `)?\$([^`]*)`)?", re.S)
_STEP = re.compile(r"\.(\w+)|\[(\d+)\]|\[\.\.\.\]")


def _explain(message: str, doc, typ) -> str:
    """msgspec's `Expected `int` >= 0 - at `$.model.inputs[0].shape[0]``, as provmap says it:
    the path in the manifest's own words (a dict's key where msgspec says `[...]`), and the
    value that was refused."""
    what, in_key, steps = _AT.fullmatch(message).groups()
    path, x, t = "", doc, typ
    for m in _STEP.finditer(steps or ""):
        t = _arm(t, x)
        if m[1]:  # a struct's field
            t = next(f.type for f in msgspec.structs.fields(t) if f.name == m[1])
            path, x = f"{path}.{m[1]}", x[m[1]]
        elif m[2]:  # list[X]: X; tuple[A, B, C]: the i-th
            i, args = int(m[2]), typing.get_args(t)
            path, x, t = f"{path}[{i}]", x[i], args[i] if typing.get_origin(t) is tuple else args[0]
        else:  # a dict's value: msgspec stopped at the first entry that does not convert
            k = next(k for k, v in x.items() if not _fits(v, typing.get_args(t)[1]))
            path, x, t = path + _key(k), x[k], typing.get_args(t)[1]
    if in_key:
        k = next(k for k in x if not _fits(k, typing.get_args(_arm(t, x))[0]))
        path, x = path + _key(k), k
    what = what.replace("`", "")
    what = what[:1].lower() + what[1:]
    if what.startswith("object missing required field "):
        path, what = f"{path}.{what.rsplit(' ', 1)[1]}", "missing"
    elif what.startswith("invalid enum value"):
        what = f"{_short(x)} is not one of {', '.join(map(repr, typing.get_args(_arm(t, x))))}"
    elif what.startswith("number out of range") or isinstance(x, float) and not math.isfinite(x):
        what = f"{_short(x)} is not a finite number"
    elif ", got " not in what and not what.startswith("object"):
        what += f", got {_short(x)}"
    return f"{path.lstrip('.')}: {what}" if path else what


def _arm(t, x):
    """`t` without Annotated, and of a union the member `x` was converted as."""
    while typing.get_origin(t) is typing.Annotated:
        t = typing.get_args(t)[0]
    arms = typing.get_args(t) if typing.get_origin(t) in (typing.Union, type(int | None)) else ()
    for arm in arms:
        arm = _arm(arm, x)
        base = typing.get_origin(arm) or arm
        if isinstance(x, dict) and (base is dict or isinstance(base, type) and issubclass(
                base, msgspec.Struct)) or isinstance(x, list) and base in (list, tuple):
            return arm
    return t


def _fits(x, t) -> bool:
    try:
        msgspec.convert(x, t, strict=True)
        return True
    except msgspec.ValidationError:
        return False


def free(x, path: str, fail_at, depth: int = 0) -> None:
    """Free-form JSON (plan_info, host, blob_meta: shown, never interpreted): a type cannot
    bound its depth or its strings, so this does (a reader recursing through 1,000 levels)."""
    if depth > MAX_DEPTH:
        fail_at(path, f"nested deeper than {MAX_DEPTH}")
    if isinstance(x, dict):
        for k, v in x.items():
            free(v, path + _key(k), fail_at, depth + 1)
    elif isinstance(x, list):
        for i, v in enumerate(x):
            free(v, f"{path}[{i}]", fail_at, depth + 1)
    elif isinstance(x, str) and len(x) > MAX_TEXT:
        fail_at(path, f"{len(x)} characters (at most {MAX_TEXT})")


def first_twice(xs) -> tuple[int, object] | None:
    """(index, entry) of the first entry seen before, in one pass (a list may hold a million)."""
    seen: set = set()
    return next(((i, x) for i, x in enumerate(xs) if x in seen or seen.add(x)), None)


_PLAIN = re.compile(r"[A-Za-z0-9_.:\-]{1,60}")


def _key(k) -> str:
    """A dict's key in a field path: `.key` when plain, else `[...]` quoted and cut short."""
    return f".{k}" if isinstance(k, str) and _PLAIN.fullmatch(k) else f"[{_short(k, 40)}]"


def _short(x, n=60) -> str:
    s = repr(x)
    return s if len(s) <= n else s[:n] + "..."
