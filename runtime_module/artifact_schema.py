"""The artifact's schema: manifest.json, map.json, the schedule, and profile files.

Why it exists: every reader (inspect, lookup, explain, report, run) indexed the manifest as it
expected it to be, so a field of the wrong type from an edited artifact became a KeyError or
TypeError traceback deep inside a command, and sizes nobody checked became allocations of
hundreds of GiB.  Now the whole document is checked once, on read, before anything uses it;
anything unexpected is one ProvmapError line naming the artifact, the member and the field
(`manifest.json: partitions[0].inputs[1].shape[0]: ...`).

Why hand-written rather than pydantic/jsonschema/msgspec: the checks that matter here are not
only types but cross-references (a partition's files must be members of the artifact under its
own folder, with the same hashes; kernels are qualified by their partition), sizes against the
machine's memory, and one line in provmap's wording; a validator library would still need most
of this code around it, and a new dependency in every install.  It is small, has no recursion
on input data except `_free` (bounded by MAX_DEPTH), and JSON parsing itself is guarded by
`parse_json` (deep nesting is one line, not a RecursionError).
"""

from __future__ import annotations

import json
import math
import os
import re

from provmap.provenance.errors import ProvmapError
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
        from provmap.provenance.dtypes import itemsize

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
        from provmap.provenance.dtypes import itemsize

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
        try:
            size = n * itemsize(t["dtype"])
        except (TypeError, AttributeError):
            size = n * 8
        if size > memory_bytes():
            self.fail(f"{path}.shape", f"{t['shape']} of {t['dtype']} is {size} bytes, more "
                      "than this machine's memory")
        return t


def _tname(x) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            int: "an integer", float: "a number", type(None): "null"}.get(type(x), type(x).__name__)


_PLAIN = re.compile(r"[A-Za-z0-9_.:\-]{1,60}")


def _key(k) -> str:
    """A key in a field path: as is when plain, else quoted and cut short."""
    return k if isinstance(k, str) and _PLAIN.fullmatch(k) else _short(k, 40)


def _short(x, n=60) -> str:
    s = repr(x)
    return s if len(s) <= n else s[:n] + "..."


# -- manifest --------------------------------------------------------------------------------

def check_manifest(m, where: str, formats: tuple[str, tuple[int, ...]]) -> dict:
    """Check manifest `m` of artifact `where` (before the members are read: sizes and names
    only need the manifest).  `formats`: (format name, versions this provmap reads)."""
    v = _V(f"{where}: manifest.json")
    fmt, versions = formats
    v.dict_(m, "")
    if m.get("format") != fmt:
        raise SchemaError(f"{where}: not a provmap artifact (format {_short(m.get('format'))})")
    if m.get("format_version") not in versions or isinstance(m.get("format_version"), bool):
        raise SchemaError(f"{where}: artifact format version {_short(m.get('format_version'))} "
                          f"is not supported (this provmap reads "
                          f"{', '.join(map(str, versions))})")
    members = v.dict_(v.dict_(m, "", required=("members",))["members"], "members")
    for name, h in members.items():
        at = f"members[{_short(name)}]"
        v.str_(name, at)
        if ".." in name.split("/") or name.startswith(("/", "\\")) or ":" in name:
            v.fail(at, "absolute or leaves the artifact (..)")
        v.str_(name, at, pattern=_MEMBER)
        v.str_(h, at, pattern=_HEX64)
    v.dict_(m, "", required=("model", "strategy", "backends", "partitions", "host",
                             "created_utc", "coverage"))
    if "map.json" not in members:
        v.fail("members", "no map.json (every artifact carries its provenance map)")
    _check_model(v, m["model"], members)
    v.str_(m["strategy"], "strategy")
    for k in ("provmap_version", "created_utc"):
        if k in m:
            v.str_(m[k], k)
    for k in ("host", "plan_info", "coverage"):
        if k in m and m[k] is not None:
            v.free(v.dict_(m[k], k), k)
    if "warnings" in m:
        v.strs(m["warnings"], "warnings", max_len=MAX_TEXT)
    backends = v.dict_(m["backends"], "backends")
    for name, b in backends.items():
        p = f"backends.{_key(name)}"
        v.str_(name, p, empty=False)
        v.dict_(b, p, required=("version", "options"))
        v.str_(b["version"], f"{p}.version")
        opts = v.dict_(b["options"], f"{p}.options")
        for k, val in opts.items():
            v.str_(k, f"{p}.options", max_len=128)
            _check_option(v, val, f"{p}.options.{_key(k)}", k)
    ids = _check_partitions(v, m["partitions"], members, backends)
    _check_dataflow(v, m)
    consts = v.dict_(m.get("constant_outputs") or {}, "constant_outputs")
    for name, member in consts.items():
        p = f"constant_outputs.{_key(name)}"
        v.str_(name, p)
        v.str_(member, p)
        if member not in members or not member.endswith(".npy"):
            v.fail(p, f"{_short(member)} is not an .npy member of the artifact")
    if m.get("schedule") is not None:
        check_schedule_doc(v, m["schedule"], m["partitions"], ids)
    return m


def _check_option(v: _V, val, path: str, key: str) -> None:
    if key in ("only_ops", "exclude_ops") and isinstance(val, list):
        v.strs(val, path, max_len=128)
        return
    if isinstance(val, float) and not math.isfinite(val):
        v.fail(path, "not a finite number")
    if not (val is None or isinstance(val, (str, int, float, bool))):
        v.fail(path, f"expected a string, number or boolean, got {_tname(val)}")
    if isinstance(val, str):
        v.str_(val, path, max_len=MAX_NAME)
    if key == "threads" and val not in (None, ""):
        try:
            n = int(str(val))
        except ValueError:
            v.fail(path, f"{_short(val)} is not a thread count")
        if not 1 <= n <= MAX_THREADS or isinstance(val, bool) or isinstance(val, float):
            v.fail(path, f"{_short(val)} is not a thread count (1..{MAX_THREADS})")


def _check_model(v: _V, model, members: dict) -> None:
    v.dict_(model, "model", required=("name", "sha256", "inputs", "outputs"))
    v.str_(model["name"], "model.name", max_len=MAX_TEXT)
    if model.get("derived"):
        v.strs(model["derived"], "model.derived", max_len=MAX_TEXT)
        v.dict_(model, "model", required=("derived_sha256",))  # inspect names both hashes
    for k in ("sha256", "derived_sha256"):
        if k in model:
            v.str_(model[k], f"model.{k}", pattern=_HEX64)
    for k in ("inputs", "outputs"):
        for i, t in enumerate(v.list_(model[k], f"model.{k}")):
            v.tensor(t, f"model.{k}[{i}]", open_dims=True)
    for k in ("onnx_nodes", "op_nodes", "folded_before_import"):
        if k in model:
            v.int_(model[k], f"model.{k}")
    if "input_shapes_given" in model:
        for name, dims in v.dict_(model["input_shapes_given"], "model.input_shapes_given").items():
            for i, d in enumerate(v.list_(dims, f"model.input_shapes_given.{_key(name)}",
                                          max_len=64)):
                v.int_(d, f"model.input_shapes_given.{_key(name)}[{i}]")
    if "not_compilable_by_tvm" in model:
        for nid, why in v.dict_(model["not_compilable_by_tvm"], "model.not_compilable_by_tvm").items():
            v.str_(why, f"model.not_compilable_by_tvm.{_key(nid)}", max_len=MAX_TEXT)
    if model.get("member") is not None:
        v.str_(model["member"], "model.member")
        if model["member"] not in members:
            v.fail("model.member", f"{_short(model['member'])} is no member of the artifact")
    if "member_is" in model:
        v.opt_str(model["member_is"], "model.member_is")


def _check_partitions(v: _V, parts, members: dict, backends: dict) -> list[str]:
    ids: list[str] = []
    for i, p in enumerate(v.list_(parts, "partitions", max_len=1_000_000)):
        at = f"partitions[{i}]"
        v.dict_(p, at, required=("id", "backend", "type_key", "ops", "onnx_nodes", "inputs",
                                 "outputs", "files", "source", "kernels"))
        pid = v.str_(p["id"], f"{at}.id", pattern=_PID)
        if pid in ids:
            v.fail(f"{at}.id", f"{pid} is used by two partitions")
        ids.append(pid)
        v.str_(p["backend"], f"{at}.backend", empty=False)
        if p["backend"] not in backends:
            v.fail(f"{at}.backend", f"{_short(p['backend'])} is not in the manifest's backends")
        v.str_(p["type_key"], f"{at}.type_key")
        if "why" in p:
            v.str_(p["why"], f"{at}.why", max_len=MAX_TEXT)
        for k in ("ops", "onnx_nodes", "exprs", "runner_inputs", "runner_outputs"):
            if k in p:
                v.strs(p[k], f"{at}.{k}")
        for k in ("inputs", "outputs"):
            for j, t in enumerate(v.list_(p[k], f"{at}.{k}")):
                v.tensor(t, f"{at}.{k}[{j}]", open_dims=True)
        if "blob_meta" in p:
            meta = v.free(v.dict_(p["blob_meta"], f"{at}.blob_meta"), f"{at}.blob_meta")
            for k in ("input_names", "output_names"):
                if meta.get(k) is not None:
                    v.strs(meta[k], f"{at}.blob_meta.{k}")
        prefix = f"partitions/{pid}/"
        for name, h in v.dict_(p["files"], f"{at}.files").items():
            fp = f"{at}.files[{_short(name)}]"
            v.str_(name, fp)
            if not name.startswith(prefix) or members.get(name) != h:
                v.fail(fp, f"not a member of the artifact under {prefix} with that SHA-256")
        v.str_(p["source"], f"{at}.source")
        if p["source"] not in members:
            v.fail(f"{at}.source", f"{_short(p['source'])} is no member of the artifact")
        for j, k in enumerate(v.list_(p["kernels"], f"{at}.kernels")):
            v.str_(k, f"{at}.kernels[{j}]")
            if not k.startswith(f"{pid}:"):
                v.fail(f"{at}.kernels[{j}]", f"{_short(k)} is not qualified by {pid}:")
        if "key" in p:
            v.str_(p["key"], f"{at}.key")
    return ids


def _check_dataflow(v: _V, m: dict) -> None:
    """Every tensor a partition's runner reads is a graph input or an earlier partition's
    output, and every tensor it names as produced is one of its declared outputs: the executor
    looks them up by name, and a dangling one was a KeyError in the middle of a run."""
    available = {t["name"] for t in m["model"]["inputs"]}
    for i, p in enumerate(m["partitions"]):
        meta = p.get("blob_meta") or {}
        ins = meta.get("input_names") or [t["name"] for t in p["inputs"]]
        outs = {t["name"] for t in p["outputs"]}
        for name in ins:
            if name not in available:
                v.fail(f"partitions[{i}].inputs", f"{_short(name)} is neither a graph input nor "
                       "an output of an earlier partition")
        for name in meta.get("output_names") or ():
            if name not in outs:
                v.fail(f"partitions[{i}].blob_meta.output_names",
                       f"{_short(name)} is not among the partition's outputs")
        available |= outs


def check_schedule_doc(v: _V, sched, partitions: list, ids: list[str]) -> None:
    """Types and ranges here; which stage may read what: schedule.check_schedule."""
    from .schedule import check_schedule

    v.dict_(sched, "schedule", required=("stages",))
    for k, stage in enumerate(v.list_(sched["stages"], "schedule.stages")):
        v.strs(stage, f"schedule.stages[{k}]")
    for pid, n in v.dict_(sched.get("threads") or {}, "schedule.threads").items():
        v.int_(n, f"schedule.threads.{_key(pid)}", lo=1, hi=MAX_THREADS)
    if "why" in sched:
        v.str_(sched["why"], "schedule.why", max_len=MAX_TEXT)
    try:
        check_schedule(partitions, sched)
    except ProvmapError as e:
        raise SchemaError(f"{v.where}: {e}") from None


# The members' own documents (map.json, .npy constants, profile files): member_schema.
from .member_schema import check_map, check_npy, check_profile  # noqa: E402,F401
