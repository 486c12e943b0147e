"""The one line every refusal of a stranger's document is (docs/security.md): msgspec's error
for the declared types (manifest_types, map_types) said in provmap's words, naming the file,
member and field, and the bounds of free-form parts, which no type states."""

from __future__ import annotations

import functools
import gc
import json
import math
import re
import typing

import msgspec

from provmap.provenance.util.errors import ProvmapError

from .schema_types import MAX_DEPTH, MAX_TEXT


class SchemaError(ProvmapError):
    pass


def fail(where: str, path: str, what: str):
    raise SchemaError(f"{where}: {path.lstrip('.')}: {what}")


def quiet_gc(fn):
    """`fn` with the cyclic collector paused: a manifest of 100,000 partitions is millions of
    objects in no cycle, and the collector's passes over them took 1.0 s of msgspec's 1.3 and
    0.9 s of the checks after it (measured)."""
    @functools.wraps(fn)
    def run(*args, **kw):
        was = gc.isenabled()
        gc.disable()
        try:
            return fn(*args, **kw)
        finally:
            if was:
                gc.enable()
    return run


@quiet_gc
def parse_json(data: bytes | str, where: str):
    """json.loads; deep nesting (a RecursionError) and bad syntax are one line naming `where`."""
    try:
        return json.loads(data)
    except RecursionError:
        raise SchemaError(f"{where}: refused: JSON nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise SchemaError(f"{where}: not valid JSON: {str(e).splitlines()[0][:200]}") from None


def convert(doc, typ, where: str):
    """`doc` as `typ`, strictly (no "1", 1.0 or true for an integer: schema_version 1.0 was
    read as 1), or one SchemaError line naming `where` and the field."""
    try:
        return msgspec.convert(doc, typ, strict=True)
    except msgspec.ValidationError as e:
        try:
            line = _explain(str(e), doc, typ)
        except Exception:  # the wording must never hide the refusal
            line = str(e).replace("`", "")
        raise SchemaError(f"{where}: {line}") from None


_AT = re.compile(r"(.*?)(?: - at `(key` in `)?\$([^`]*)`)?", re.S)
_STEP = re.compile(r"\.(\w+)|\[(\d+)\]|\[\.\.\.\]")


def _explain(message: str, x, t) -> str:
    """`Expected `int` >= 0 - at `$.model.inputs[0].shape[0]`` as `model.inputs[0].shape[0]:
    expected int >= 0, got -5`: where msgspec says `[...]` for a dict's entry, its key."""
    what, in_key, steps = _AT.fullmatch(message).groups()
    path = ""
    for m in _STEP.finditer(steps or ""):
        t = _arm(t, x)
        if m[1]:  # a struct's field
            t = next(f.type for f in msgspec.structs.fields(t) if f.name == m[1])
            path, x = f"{path}.{m[1]}", x[m[1]]
        elif m[2]:  # list[X]: X; tuple[A, B, C]: the i-th
            i, args = int(m[2]), typing.get_args(t)
            path, x, t = f"{path}[{i}]", x[i], args[i] if typing.get_origin(t) is tuple else args[0]
        else:  # a dict's value: the first that does not convert stopped msgspec
            t = typing.get_args(t)[1]
            k = next(k for k, v in x.items() if not _fits(v, t))
            path, x = path + _key(k), x[k]
    if in_key:
        t = typing.get_args(_arm(t, x))[0]
        k = next(k for k in x if not _fits(k, t))
        path, x = path + _key(k), k
    metas = [m for a in (t, *typing.get_args(t)) for m in getattr(a, "__metadata__", ())]
    about = next((m.description for m in metas if getattr(m, "description", None)), None)
    what = what.replace("`", "")
    what = what[:1].lower() + what[1:]
    if what.startswith("object missing required field "):
        path, what = f"{path}.{what.rsplit(' ', 1)[1]}", "missing"
    elif what.startswith("invalid enum value"):
        what = f"{_short(x)} is not one of {', '.join(map(repr, typing.get_args(_arm(t, x))))}"
    elif "matching regex" in what and about:  # what the pattern means, not the pattern
        what = f"{_short(x)} is not {about}"
    elif what.startswith("number out of range") or isinstance(x, float) and not math.isfinite(x):
        what = f"{_short(x)} is not a finite number"
    elif ", got " not in what and not what.startswith("object"):
        what += f", got {_short(x)}"
    return f"{path.lstrip('.')}: {what}" if path else what


def _arm(t, x):
    """`t` without Annotated; of a union, the arm a dict or list `x` was converted as."""
    while typing.get_origin(t) is typing.Annotated:
        t = typing.get_args(t)[0]
    union = typing.get_origin(t) in (typing.Union, type(int | None))
    for arm in map(lambda a: _arm(a, x), typing.get_args(t) if union else ()):
        base = typing.get_origin(arm) or arm
        if isinstance(x, list) and base in (list, tuple) or isinstance(x, dict) and (
                base is dict or isinstance(base, type) and issubclass(base, msgspec.Struct)):
            return arm
    return t


def _fits(x, t) -> bool:
    try:
        msgspec.convert(x, t, strict=True)
        return True
    except msgspec.ValidationError:
        return False


def free(x, path: str, fail_at, depth: int = 0) -> None:
    """Free-form JSON (plan_info, host, blob_meta: shown, never interpreted): its depth and its
    strings bounded, so no reader recurses through 1,000 levels."""
    if depth > MAX_DEPTH:
        fail_at(path, f"nested deeper than {MAX_DEPTH}")
    items = x.items() if isinstance(x, dict) else enumerate(x) if isinstance(x, list) else ()
    for k, v in items:
        free(v, path + (_key(k) if isinstance(x, dict) else f"[{k}]"), fail_at, depth + 1)
    if isinstance(x, str) and len(x) > MAX_TEXT:
        fail_at(path, f"{len(x)} characters (at most {MAX_TEXT})")


def first_twice(xs) -> tuple[int, object] | None:
    """(index, entry) of the first entry seen before, in one pass (a list may hold a million)."""
    seen: set = set()
    return next(((i, x) for i, x in enumerate(xs) if x in seen or seen.add(x)), None)


def _key(k) -> str:
    """A dict's key in a field path: `.key` when plain, else quoted and cut short."""
    plain = isinstance(k, str) and re.fullmatch(r"[A-Za-z0-9_.:\-]{1,60}", k)
    return f".{k}" if plain else f"[{_short(k, 40)}]"


def _short(x, n=60) -> str:
    s = repr(x)
    return s if len(s) <= n else s[:n] + "..."
