"""Reading a stranger's manifest: its declared types (manifest_types, converted by msgspec),
then what types cannot say.

Why checked at all: every reader (inspect, lookup, explain, report, run) indexed the manifest
as it expected it to be, so a field of the wrong type from an edited artifact became a
traceback deep inside a command, and sizes nobody checked became allocations of hundreds of
GiB.  The whole document is checked once, on read, before anything uses it; anything wrong is
one line naming the artifact, the member and the field (docs/security.md).  The checks here
relate fields: a partition's files are members under its own folder with the same hashes, its
kernels are qualified by its id, a tensor fits in this machine's memory; the flow of tensors
between partitions is manifest_flow's."""

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
from .schema_base import (SchemaError, _key, _short, convert, first_twice, free,  # noqa: F401
                          parse_json)
from .schema_types import MAX_THREADS
# The members' own documents (map.json, .npy constants, profile files): member_schema.
from .member_schema import check_map, check_npy, check_profile  # noqa: F401


def check_manifest(m, where: str, formats: tuple[str, tuple[int, ...]]) -> dict:
    """Check manifest `m` of artifact `where` (before the members are read: sizes and names
    only need the manifest).  `formats`: (format name, versions this provmap reads)."""
    fmt, versions = formats
    got = m.get("format") if isinstance(m, dict) else type(m).__name__
    if got != fmt:
        raise SchemaError(f"{where}: not a provmap artifact (format {_short(got)})")
    v = m.get("format_version")
    if type(v) is not int or v not in versions:  # 1.0 and true are no version
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
            fail(f"backends{_key(name)}.name", f"{_short(b.name)}, but the entry is {_short(name)}")
        for k, val in b.options.items():
            _check_option(fail, val, f"backends{_key(name)}.options{_key(k)}", k)
    _check_partitions(fail, man, m["partitions"])
    check_flow(fail, man)
    for name, member in (man.constant_outputs or {}).items():
        if member not in man.members:
            fail(f"constant_outputs{_key(name)}", f"{_short(member)} is no member of the artifact")
    if man.schedule is not None:
        from .schedule import check_schedule  # which stage may read what

        try:
            check_schedule(m["partitions"], m["schedule"])
        except ProvmapError as e:
            raise SchemaError(f"{where}: {e}") from None
    return m


def _check_option(fail, val, path: str, key: str) -> None:
    if isinstance(val, list) and key not in ("only_ops", "exclude_ops"):
        fail(path, "expected a string, number or boolean, got a list")
    if key == "threads" and val not in (None, ""):
        try:
            n = -1 if isinstance(val, (bool, float)) else int(str(val))
        except ValueError:
            n = -1
        # 0 is the backends' "library default" (options.threads_option), as compile accepts
        # it: a range starting at 1 made run and inspect refuse such an artifact (issue 36).
        if not 0 <= n <= MAX_THREADS:
            fail(path, f"{_short(val)} is not a thread count (0..{MAX_THREADS})")


def _check_model(fail, man, raw: dict) -> None:
    model = man.model
    if model.derived and model.derived_sha256 is UNSET:  # inspect names both hashes
        fail("model.derived_sha256", "missing")
    for k in ("inputs", "outputs"):
        for i, t in enumerate(getattr(model, k)):
            check_tensor(fail, t, f"model.{k}[{i}]")
    # All declared inputs together, not only each one: three unused 2 GB inputs passed one by
    # one, and `run --random` allocated them all (9.8 GB RSS, issue 52).  A dimension known
    # only at run time counts 1; the shape profile bounds it when it is known.
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
    if model.member is not None and model.member not in man.members:
        fail("model.member", f"{_short(model.member)} is no member of the artifact")
    for name, uses in model.index_inputs.items():
        for j, b in enumerate(uses if isinstance(uses, list) else [uses]):
            if (b.size is UNSET) == (b.sizes is UNSET):
                fail(f"model.index_inputs{_key(name)}" + (f"[{j}]" * isinstance(uses, list)),
                     "needs exactly one of size, sizes")


def check_tensor(fail, t, path: str) -> None:
    """What a tensor's type cannot relate: its symbols to its dims, its size to this machine's
    memory, and `bytes` to its shape (inspect printed a stranger's "1 B" for 64 KiB)."""
    if t.symbols is not None and len(t.symbols) > len(t.shape):
        fail(f"{path}.symbols", f"{len(t.symbols)} entries for {len(t.shape)} dimensions")
    size = itemsize(t.dtype) * math.prod(d for d in t.shape if d is not None)
    if size > memory_bytes():
        fail(f"{path}.shape", f"{t.shape} of {t.dtype} is {size} bytes, more than this "
             "machine's memory")
    written = itemsize(t.dtype) * math.prod(d or 1 for d in t.shape)  # TensorSpec.nbytes
    if None not in t.shape and t.bytes != written:
        fail(f"{path}.bytes", f"{t.bytes} is not the size of {t.dtype}{t.shape} ({written})")


def _check_partitions(fail, man, raw_parts: list) -> None:
    twice = first_twice(p.id for p in man.partitions)
    if twice:
        fail(f"partitions[{twice[0]}].id", f"{twice[1]} is used by two partitions")
    runs_in: dict = {}  # op node -> the partition that runs it (a node runs in one)
    for i, (p, raw) in enumerate(zip(man.partitions, raw_parts)):
        at = f"partitions[{i}]"
        if p.backend not in man.backends:
            fail(f"{at}.backend", f"{_short(p.backend)} is not in the manifest's backends")
        if p.type_key != f"provmap.{p.backend}":  # what build_artifact writes
            fail(f"{at}.type_key", f"{_short(p.type_key)}, but the partition's backend is "
                 f"{_short(p.backend)}")
        for j, n in enumerate(p.ops):  # explain counted it twice, inspect once (nu17 L2)
            if n in runs_in:
                fail(f"{at}.ops[{j}]", f"{_short(n)} already runs in {runs_in[n]}")
            runs_in[n] = p.id
        twice = first_twice(p.runner_outputs)
        if twice:
            fail(f"{at}.runner_outputs", f"{_short(twice[1])} is listed twice")
        for k in ("inputs", "outputs"):
            for j, t in enumerate(getattr(p, k)):
                check_tensor(fail, t, f"{at}.{k}[{j}]")
        if p.blob_meta is not UNSET:
            free(raw["blob_meta"], f"{at}.blob_meta", fail)
            # the loader builds the backend from backends.<b>.options: a precision the blob
            # alone records would run unseen by inspect (issue 36's seventh afternoon)
            want = man.backends[p.backend].options.get("precision", "f32")
            if p.blob_meta.precision not in (UNSET, want):
                fail(f"{at}.blob_meta.precision", f"{_short(p.blob_meta.precision)} differs "
                     f"from backends{_key(p.backend)}.options ({want})")
        _check_files(fail, man.members, p, at)
        for j, k in enumerate(p.kernels):
            if not k.startswith(f"{p.id}:"):
                fail(f"{at}.kernels[{j}]", f"{_short(k)} is not qualified by {p.id}:")


def _check_files(fail, members: dict, p, at: str) -> None:
    from .trust import loads_native_code

    prefix = f"partitions/{p.id}/"
    for name, h in p.files.items():
        if not name.startswith(prefix) or members.get(name) != h:
            fail(f"{at}.files[{_short(name)}]", f"not a member of the artifact under {prefix} "
                 "with that SHA-256")
        if name.endswith((".so", ".dll", ".dylib")) and not loads_native_code(p.backend):
            # a TVM lib.so relabelled onnxruntime: `trust` said "needs no trust" and inspect
            # showed an ONNX Runtime partition (the eleventh afternoon)
            fail(f"{at}.files[{_short(name)}]", f"native code in a partition of "
                 f"{_short(p.backend)}, whose partitions are model files")
    if p.source not in members:
        fail(f"{at}.source", f"{_short(p.source)} is no member of the artifact")
