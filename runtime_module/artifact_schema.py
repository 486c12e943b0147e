"""A stranger's manifest, checked once on read before anything uses it (docs/security.md):
its declared types (manifest_types), then what types cannot relate: members and their hashes,
sizes against this machine's memory, names that must agree; the tensors flowing between
partitions are manifest_flow's.  Every reader used to index the manifest as it expected it,
so a wrong field was a traceback deep in a command, or an allocation of hundreds of GiB."""

from __future__ import annotations

import math
from functools import partial

from msgspec import UNSET

from provmap.provenance.shapes import memory_bytes
from provmap.provenance.util.dtypes import itemsize
from provmap.provenance.util.errors import ProvmapError

from . import schema_base
from .manifest_flow import check_flow
from .manifest_types import Manifest
from .options import threads_option
from .schema_base import (SchemaError, _key, _short, convert, first_twice, free,  # noqa: F401
                          parse_json, quiet_gc)
from .trust import loads_native_code
# The members' own documents (map.json, .npy constants, profile files): member_schema.
from .member_schema import check_map, check_npy, check_profile  # noqa: F401


@quiet_gc
def check_manifest(m, where: str, formats: tuple[str, tuple[int, ...]]) -> dict:
    """Check manifest `m` of artifact `where` before any member is read.  `formats`: (format
    name, versions this provmap reads): another version is refused, never guessed at."""
    fmt, versions = formats
    got = m.get("format") if isinstance(m, dict) else None
    if got != fmt:
        raise SchemaError(f"{where}: not a provmap artifact (format {_short(got)})")
    if type(v := m.get("format_version")) is not int or v not in versions:  # 1.0, true
        raise SchemaError(f"{where}: artifact format version {_short(v)} is not supported "
                          f"(this provmap reads {', '.join(map(str, versions))})")
    fail = partial(schema_base.fail, f"{where}: manifest.json")
    man = convert(m, Manifest, f"{where}: manifest.json")
    if man.format_version >= 2 and man.schedule is None:  # docs/artifact.md
        fail("format_version", f"{v} goes with a schedule, and there is none")
    if "map.json" not in man.members:
        fail("members", "no map.json (every artifact carries its provenance map)")
    for k in ("host", "plan_info", "coverage"):
        free(m.get(k), k, fail)
    _check_model(fail, man, m["model"])
    for name, b in man.backends.items():
        if b.name is not UNSET and b.name != name:  # shown nowhere, read by scripts
            fail(f"backends{_key(name)}.name", f"{_short(b.name)}, but the entry is "
                 f"{_short(name)}")
        for k, val in b.options.items():
            at = f"backends{_key(name)}.options{_key(k)}"
            if isinstance(val, list) and k not in ("only_ops", "exclude_ops"):
                fail(at, "expected a string, number or boolean, got a list")
            why = k == "threads" and val not in (None, "") and threads_option("").problem(val)
            if why:  # 0..4096, 0 the library's default, as compile takes it
                fail(at, f"{_short(val)} is refused (expected {why})")
    _check_partitions(fail, man, m["partitions"])
    check_flow(fail, man)
    refs = [("model.member", man.model.member)] + [
        (f"partitions[{i}].source", p.source) for i, p in enumerate(man.partitions)] + [
        (f"constant_outputs{_key(n)}", c) for n, c in (man.constant_outputs or {}).items()]
    for at, name in refs:
        if name is not None and name not in man.members:
            fail(at, f"{_short(name)} is no member of the artifact")
    if man.schedule is not None:
        from .schedule import check_schedule  # which stage may read what

        try:
            check_schedule(m["partitions"], m["schedule"])
        except ProvmapError as e:
            raise SchemaError(f"{where}: {e}") from None
    return m


def _check_model(fail, man, raw: dict) -> None:
    model = man.model
    if model.derived and model.derived_sha256 is UNSET:  # inspect names both hashes
        fail("model.derived_sha256", "missing")
    for k in ("inputs", "outputs"):
        for i, t in enumerate(getattr(model, k)):
            check_tensor(fail, t, f"model.{k}[{i}]")
    # all inputs together (three unused 2 GB inputs passed one by one, and `run --random`
    # allocated them all: issue 52); a dimension known only at run time counts 1
    total = sum(itemsize(t.dtype) * math.prod(d or 1 for d in t.shape) for t in model.inputs)
    if total > memory_bytes():
        fail("model.inputs", f"{len(model.inputs)} inputs declare {total} bytes in all, more "
             f"than this machine's memory ({memory_bytes()} bytes)")
    if model.shape_profile is not UNSET:
        from provmap.provenance.profile import json_problem

        why = json_problem(raw["shape_profile"])
        if why is None and not set(model.shape_profile.inputs) <= {t.name for t in model.inputs}:
            why = "names an input the model does not take"
        if why:
            fail("model.shape_profile", why)
    for name, uses in model.index_inputs.items():
        for j, b in enumerate(uses if isinstance(uses, list) else [uses]):
            if (b.size is UNSET) == (b.sizes is UNSET):
                fail(f"model.index_inputs{_key(name)}" + f"[{j}]" * isinstance(uses, list),
                     "needs exactly one of size, sizes")


def check_tensor(fail, t, at: str) -> None:
    """What a tensor's type cannot relate: its symbols to its dims, its size to this machine's
    memory, and `bytes` to its shape (inspect printed a stranger's "1 B" for 64 KiB)."""
    if t.symbols is not None and len(t.symbols) > len(t.shape):
        fail(f"{at}.symbols", f"{len(t.symbols)} entries for {len(t.shape)} dimensions")
    size = itemsize(t.dtype) * math.prod(d for d in t.shape if d is not None)
    if size > memory_bytes():
        fail(f"{at}.shape", f"{t.shape} of {t.dtype} is {size} bytes, more than this machine's "
             "memory")
    written = itemsize(t.dtype) * math.prod(d or 1 for d in t.shape)  # TensorSpec.nbytes
    if None not in t.shape and t.bytes != written:
        fail(f"{at}.bytes", f"{t.bytes} is not the size of {t.dtype}{t.shape} ({written})")


def _check_partitions(fail, man, raw_parts: list) -> None:
    if twice := first_twice(p.id for p in man.partitions):  # a set: 100,000 read in seconds
        fail(f"partitions[{twice[0]}].id", f"{twice[1]} is used by two partitions")
    runs_in: dict = {}  # op node -> the partition that runs it (a node runs in one)
    for i, (p, raw) in enumerate(zip(man.partitions, raw_parts)):
        at = f"partitions[{i}]"
        if p.backend not in man.backends:
            fail(f"{at}.backend", f"{_short(p.backend)} is not in the manifest's backends")
        if p.type_key != f"provmap.{p.backend}":  # a relabelled TVM partition needed no trust
            fail(f"{at}.type_key", f"{_short(p.type_key)}, but the partition's backend is "
                 f"{_short(p.backend)}")
        for j, n in enumerate(p.ops):  # explain counted it twice, inspect once
            if n in runs_in:
                fail(f"{at}.ops[{j}]", f"{_short(n)} already runs in {runs_in[n]}")
            runs_in[n] = p.id
        if twice := first_twice(p.runner_outputs):
            fail(f"{at}.runner_outputs", f"{_short(twice[1])} is listed twice")
        for k in ("inputs", "outputs"):
            for j, t in enumerate(getattr(p, k)):
                check_tensor(fail, t, f"{at}.{k}[{j}]")
        if p.blob_meta is not UNSET:  # the backend is built from its options, never the blob's
            free(raw["blob_meta"], f"{at}.blob_meta", fail)
            want = man.backends[p.backend].options.get("precision", "f32")
            if p.blob_meta.precision not in (UNSET, want):
                fail(f"{at}.blob_meta.precision", f"{_short(p.blob_meta.precision)} differs "
                     f"from backends{_key(p.backend)}.options ({want})")
        for name, h in p.files.items():
            if not name.startswith(f"partitions/{p.id}/") or man.members.get(name) != h:
                fail(f"{at}.files[{_short(name)}]", f"not a member of the artifact under "
                     f"partitions/{p.id}/ with that SHA-256")
            if name.endswith((".so", ".dll", ".dylib")) and not loads_native_code(p.backend):
                fail(f"{at}.files[{_short(name)}]", f"native code in a partition of "
                     f"{_short(p.backend)}, whose partitions are model files")
        for j, k in enumerate(p.kernels):
            if not k.startswith(f"{p.id}:"):
                fail(f"{at}.kernels[{j}]", f"{_short(k)} is not qualified by {p.id}:")
