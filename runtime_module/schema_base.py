"""The checking machinery the artifact's schemas share (artifact_schema for the manifest,
member_schema for map.json, constants and profiles): typed checks that know the path of the
field they look at, so every refusal is one line naming the file, member and field, and
JSON parsing that turns deep nesting into such a line instead of a RecursionError."""

from __future__ import annotations

import json
import math
import re

from provmap.provenance.util.errors import ProvmapError
from provmap.provenance.shapes import memory_bytes

MAX_DEPTH = 32           # nesting of free-form parts (plan_info, blob_meta, host, coverage)
MAX_NAME = 4096          # characters in one name (tensor, node, kernel, member)
MAX_TEXT = 1 << 20       # characters in one free text (why, warnings, reasons)
INT64_MAX = 2**63 - 1
MAX_THREADS = 4096
_HEX64 = re.compile(r"[0-9a-f]{64}")
_PID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_MEMBER = re.compile(r"[A-Za-z0-9_.\-]+(/[A-Za-z0-9_.\-]+)*")
_DTYPE_KINDS = "biufcVO"  # numbers, bool, ml_dtypes' types (V), ONNX strings as object (O)


class SchemaError(ProvmapError):
    pass


def parse_json(data: bytes | str, where: str):
    """json.loads, with every failure (syntax, encoding, nesting deeper than the parser's
    recursion limit) one line naming `where`."""
    try:
        return json.loads(data)
    except RecursionError:
        raise SchemaError(f"{where}: refused: JSON nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise SchemaError(f"{where}: not valid JSON: {str(e).splitlines()[0][:200]}") from None


class _V:
    """Checks with a path; `fail` raises the one line."""

    def __init__(self, where: str):
        self.where = where

    def fail(self, path: str, what: str):
        raise SchemaError(f"{self.where}: {path}: {what}")

    def dict_(self, x, path, required=(), optional=()) -> dict:
        if not isinstance(x, dict):
            self.fail(path, f"expected an object, got {_tname(x)}")
        for k in required:
            if k not in x:
                self.fail(f"{path}.{k}" if path else k, "missing")
        return x

    def list_(self, x, path, max_len=10_000_000) -> list:
        if not isinstance(x, list):
            self.fail(path, f"expected a list, got {_tname(x)}")
        if len(x) > max_len:
            self.fail(path, f"{len(x)} entries (at most {max_len})")
        return x

    def str_(self, x, path, max_len=MAX_NAME, pattern=None, empty=True) -> str:
        if not isinstance(x, str):
            self.fail(path, f"expected a string, got {_tname(x)}")
        if len(x) > max_len:
            self.fail(path, f"{len(x)} characters (at most {max_len})")
        if not empty and not x:
            self.fail(path, "empty")
        if pattern is not None and not pattern.fullmatch(x):
            self.fail(path, f"{_short(x)} is not a valid value here")
        return x

    def opt_str(self, x, path, **kw):
        return None if x is None else self.str_(x, path, **kw)

    def int_(self, x, path, lo=0, hi=INT64_MAX) -> int:
        if not isinstance(x, int) or isinstance(x, bool):
            self.fail(path, f"expected an integer, got {_tname(x)}")
        if not lo <= x <= hi:
            self.fail(path, f"{x} is outside {lo}..{hi}")
        return x

    def strs(self, x, path, **kw) -> list:
        for i, s in enumerate(self.list_(x, path)):
            self.str_(s, f"{path}[{i}]", **kw)
        return x

    def free(self, x, path, depth=0):
        """Free-form JSON (shown, never interpreted): only its depth and sizes are bounded."""
        if depth > MAX_DEPTH:
            self.fail(path, f"nested deeper than {MAX_DEPTH}")
        if isinstance(x, dict):
            for k, v in x.items():
                self.free(v, f"{path}.{_key(k)}", depth + 1)
        elif isinstance(x, list):
            for i, v in enumerate(x):
                self.free(v, f"{path}[{i}]", depth + 1)
        elif isinstance(x, str):
            self.str_(x, path, max_len=MAX_TEXT)
        elif isinstance(x, float) and not math.isfinite(x):
            pass  # json writes NaN/Infinity for unmeasured numbers
        elif x is not None and not isinstance(x, (int, float, bool)):
            self.fail(path, f"unexpected {_tname(x)}")
        return x

    def dtype(self, x, path) -> str:
        from provmap.provenance.util.dtypes import itemsize

        self.str_(x, path, max_len=64)
        try:
            import numpy as np

            kind = np.dtype(x).kind
        except TypeError:
            try:
                itemsize(x)
                kind = "V"
            except (TypeError, AttributeError):
                kind = "?"
        if kind not in _DTYPE_KINDS:
            self.fail(path, f"{_short(x)} is not a tensor element type")
        return x

    def tensor(self, t, path, open_dims: bool) -> dict:
        """{name, dtype, shape[, bytes]}; dims are int64 (None: known at run time, only where
        `open_dims`) and the whole tensor must fit in this machine's memory."""
        from provmap.provenance.util.dtypes import itemsize

        self.dict_(t, path, required=("name", "dtype", "shape", "bytes"))
        self.str_(t["name"], f"{path}.name")
        self.dtype(t["dtype"], f"{path}.dtype")
        self.list_(t["shape"], f"{path}.shape", max_len=64)
        n = 1
        for i, d in enumerate(t["shape"]):
            if d is None and open_dims:
                continue
            n *= self.int_(d, f"{path}.shape[{i}]")
        self.int_(t["bytes"], f"{path}.bytes")
        if t.get("symbols") is not None:  # what an open dim is in the profile's symbols
            self.list_(t["symbols"], f"{path}.symbols", max_len=len(t["shape"]))
            for i, x in enumerate(t["symbols"]):
                if x is not None:
                    self.str_(x, f"{path}.symbols[{i}]", max_len=64, pattern=_DIM_TEXT)
        try:
            each = itemsize(t["dtype"])
        except (TypeError, AttributeError):
            each = None
        size = n * (each or 8)
        if size > memory_bytes():
            self.fail(f"{path}.shape", f"{t['shape']} of {t['dtype']} is {size} bytes, more "
                      "than this machine's memory")
        if each is not None and None not in t["shape"]:  # TensorSpec.nbytes (a 0 dim counts 1)
            written = each
            for d in t["shape"]:
                written *= d or 1
            if t["bytes"] != written:  # inspect printed a stranger's "1 B" for 64 KiB
                self.fail(f"{path}.bytes", f"{t['bytes']} is not the size of {t['dtype']}"
                          f"{t['shape']} ({written})")
        return t


def _tname(x) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            int: "an integer", float: "a number", type(None): "null"}.get(type(x), type(x).__name__)


#: a dimension as TIR prints it over the profile's symbols (`past + 1`, `seq * 2 // 3`)
_DIM_TEXT = re.compile(r"[A-Za-z0-9_ +\-*/%()]{1,64}")
_PLAIN = re.compile(r"[A-Za-z0-9_.:\-]{1,60}")


def _key(k) -> str:
    """A key in a field path: as is when plain, else quoted and cut short."""
    return k if isinstance(k, str) and _PLAIN.fullmatch(k) else _short(k, 40)


def _short(x, n=60) -> str:
    s = repr(x)
    return s if len(s) <= n else s[:n] + "..."
