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

import math

from provmap.provenance.util.errors import ProvmapError

from .schema_base import (_DTYPE_KINDS, _HEX64, _MEMBER, _PID, INT64_MAX, MAX_NAME,  # noqa: F401
                          MAX_TEXT, MAX_THREADS, SchemaError, _key, _short, _tname, _V,
                          parse_json)
# The members' own documents (map.json, .npy constants, profile files): member_schema.
from .member_schema import check_map, check_npy, check_profile  # noqa: F401


# -- manifest --------------------------------------------------------------------------------

def check_manifest(m, where: str, formats: tuple[str, tuple[int, ...]]) -> dict:
    """Check manifest `m` of artifact `where` (before the members are read: sizes and names
    only need the manifest).  `formats`: (format name, versions this provmap reads)."""
    v = _V(f"{where}: manifest.json")
    fmt, versions = formats
    v.dict_(m, "")
    if m.get("format") != fmt:
        raise SchemaError(f"{where}: not a provmap artifact (format {_short(m.get('format'))})")
    if type(m.get("format_version")) is not int or m["format_version"] not in versions:
        raise SchemaError(f"{where}: artifact format version {_short(m.get('format_version'))} "
                          f"is not supported (this provmap reads "
                          f"{', '.join(map(str, versions))})")
    if m["format_version"] >= 2 and m.get("schedule") is None:  # docs/artifact.md (nu16 L3)
        v.fail("format_version", f"{m['format_version']} goes with a schedule, and there is none")
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
        if "name" in b and b["name"] != name:  # shown nowhere, read by scripts (nu16 L4)
            v.fail(f"{p}.name", f"{_short(b['name'])}, but the entry is {_short(name)}")
        opts = v.dict_(b["options"], f"{p}.options")
        for k, val in opts.items():
            v.str_(k, f"{p}.options", max_len=128)
            _check_option(v, val, f"{p}.options.{_key(k)}", k)
    ids = _check_partitions(v, m["partitions"], members, backends)
    _check_strategy(v, m["strategy"], m["partitions"])
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
        # 0 is the backends' "library default" (options.threads_option), as compile accepts
        # it: a range starting at 1 made run and inspect refuse such an artifact (issue 36).
        if not 0 <= n <= MAX_THREADS or isinstance(val, bool) or isinstance(val, float):
            v.fail(path, f"{_short(val)} is not a thread count (0..{MAX_THREADS})")


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
    _check_input_total(v, model["inputs"])
    if not model["outputs"]:  # `run` had written an empty .npz, exit 0
        v.fail("model.outputs", "empty: every model provmap compiles has an output")
    for k in ("onnx_nodes", "op_nodes", "folded_before_import"):
        if k in model:
            v.int_(model[k], f"model.{k}")
    if "input_shapes_given" in model:
        for name, dims in v.dict_(model["input_shapes_given"], "model.input_shapes_given").items():
            for i, d in enumerate(v.list_(dims, f"model.input_shapes_given.{_key(name)}",
                                          max_len=64)):
                v.int_(d, f"model.input_shapes_given.{_key(name)}[{i}]")
    if "shape_profile" in model:
        from provmap.provenance.profile import json_problem

        why = json_problem(model["shape_profile"])
        names = {t.get("name") for t in model["inputs"] if isinstance(t, dict)}
        if why is None and not set(model["shape_profile"]["inputs"]) <= names:
            why = "names an input the model does not take"
        if why:
            v.fail("model.shape_profile", why)
    if "not_compilable_by_tvm" in model:
        for nid, why in v.dict_(model["not_compilable_by_tvm"], "model.not_compilable_by_tvm").items():
            v.str_(why, f"model.not_compilable_by_tvm.{_key(nid)}", max_len=MAX_TEXT)
    if model.get("member") is not None:
        v.str_(model["member"], "model.member")
        if model["member"] not in members:
            v.fail("model.member", f"{_short(model['member'])} is no member of the artifact")
    if "member_is" in model:
        v.opt_str(model["member_is"], "model.member_is")
    if "given_as" in model:
        v.str_(model["given_as"], "model.given_as")
    if "index_inputs" in model:
        from .index_bounds import uses_of  # the runtime's own reading of the field

        for name, uses in v.dict_(model["index_inputs"], "model.index_inputs").items():
            at = f"model.index_inputs.{_key(name)}"
            for j, b in enumerate(v.list_(uses_of(uses), at, max_len=10_000)):
                _check_index_use(v, b, at if isinstance(uses, dict) else f"{at}[{j}]")


def _check_index_use(v: _V, b, at: str) -> None:
    from .index_bounds import INDEXED_OPS

    v.dict_(b, at, required=("node", "op"), optional=("size", "sizes"))
    v.str_(b["node"], f"{at}.node")
    if b["op"] not in INDEXED_OPS:
        v.fail(f"{at}.op", f"{_short(b['op'])} is not one of {', '.join(INDEXED_OPS)}")
    if ("size" in b) == ("sizes" in b):
        v.fail(at, "needs exactly one of size, sizes")
    if "size" in b:
        v.int_(b["size"], f"{at}.size")
    else:
        for j, n in enumerate(v.list_(b["sizes"], f"{at}.sizes", max_len=64)):
            v.int_(n, f"{at}.sizes[{j}]")
        if not b["sizes"]:
            v.fail(f"{at}.sizes", "is empty")


def _check_input_total(v: _V, inputs: list) -> None:
    """All declared inputs together must fit in this machine's memory, not only each one:
    three unused 2 GB inputs added to `model.inputs` passed one by one, and `run --random`
    allocated them all (9.8 GB RSS, issue 52).  A dimension known only at run time counts 1
    here; the shape profile and the inputs' own check bound it when it is known."""
    from provmap.provenance.shapes import memory_bytes
    from provmap.provenance.util.dtypes import itemsize

    total = 0
    for t in inputs:
        try:
            n = itemsize(t["dtype"]) or 8
        except (TypeError, AttributeError):
            n = 8
        for d in t["shape"]:
            n *= d if isinstance(d, int) and d > 0 else 1
        total += n
    if total > memory_bytes():
        v.fail("model.inputs", f"{len(inputs)} inputs declare {total} bytes in all, more than "
               f"this machine's memory ({memory_bytes()} bytes)")


def _check_partitions(v: _V, parts, members: dict, backends: dict) -> list[str]:
    ids: list[str] = []
    seen_ids: set = set()  # `pid in ids` scanned the list per partition: quadratic (issue 52)
    runs_in: dict = {}  # op node -> the partition that runs it (a node runs in one)
    for i, p in enumerate(v.list_(parts, "partitions", max_len=1_000_000)):
        at = f"partitions[{i}]"
        v.dict_(p, at, required=("id", "backend", "type_key", "ops", "onnx_nodes", "inputs",
                                 "outputs", "files", "source", "kernels"))
        pid = v.str_(p["id"], f"{at}.id", pattern=_PID)
        if pid in seen_ids:
            v.fail(f"{at}.id", f"{pid} is used by two partitions")
        ids.append(pid)
        seen_ids.add(pid)
        v.str_(p["backend"], f"{at}.backend", empty=False)
        if p["backend"] not in backends:
            v.fail(f"{at}.backend", f"{_short(p['backend'])} is not in the manifest's backends")
        v.str_(p["type_key"], f"{at}.type_key")
        if p["type_key"] != f"provmap.{p['backend']}":  # what build_artifact writes
            v.fail(f"{at}.type_key", f"{_short(p['type_key'])}, but the partition's backend "
                   f"is {_short(p['backend'])}")
        if "why" in p:
            v.str_(p["why"], f"{at}.why", max_len=MAX_TEXT)
        for k in ("ops", "onnx_nodes", "exprs", "runner_inputs", "runner_outputs"):
            if k in p:
                v.strs(p[k], f"{at}.{k}")
        for j, n in enumerate(p["ops"]):  # explain counted it twice, inspect once (nu17 L2)
            if n in runs_in:
                v.fail(f"{at}.ops[{j}]", f"{_short(n)} already runs in {runs_in[n]}")
            runs_in[n] = pid
        seen: set = set()  # one pass: a stranger's list may hold a million names
        for n in p.get("runner_outputs") or ():
            if n in seen:
                v.fail(f"{at}.runner_outputs", f"{_short(n)} is listed twice")
            seen.add(n)
        for k in ("inputs", "outputs"):
            for j, t in enumerate(v.list_(p[k], f"{at}.{k}")):
                v.tensor(t, f"{at}.{k}[{j}]", open_dims=True)
        if "blob_meta" in p:
            meta = v.free(v.dict_(p["blob_meta"], f"{at}.blob_meta"), f"{at}.blob_meta")
            if meta.get("device", "CPU") != "CPU":  # every backend here runs on the CPU
                v.fail(f"{at}.blob_meta.device", f"{_short(meta['device'])}: partitions run on "
                       "the CPU")
            for k in ("input_names", "output_names"):
                if meta.get(k) is not None:
                    v.strs(meta[k], f"{at}.blob_meta.{k}")
            # the loader builds the backend from backends.<b>.options: a precision the blob
            # alone records would run unseen by inspect (issue 36's seventh afternoon)
            opts = (backends.get(p["backend"]) or {}).get("options") or {}
            if "precision" in meta and meta["precision"] != opts.get("precision", "f32"):
                v.fail(f"{at}.blob_meta.precision",
                       f"{_short(meta['precision'])} differs from backends."
                       f"{_key(p['backend'])}.options ({opts.get('precision', 'f32')})")
        prefix = f"partitions/{pid}/"
        for name, h in v.dict_(p["files"], f"{at}.files").items():
            fp = f"{at}.files[{_short(name)}]"
            v.str_(name, fp)
            if not name.startswith(prefix) or members.get(name) != h:
                v.fail(fp, f"not a member of the artifact under {prefix} with that SHA-256")
            if name.endswith(_NATIVE_SUFFIXES) and not _native_backend(p["backend"]):
                # a TVM lib.so relabelled onnxruntime: `trust` said "needs no trust" and
                # inspect showed an ONNX Runtime partition (the eleventh afternoon)
                v.fail(fp, f"native code in a partition of {_short(p['backend'])}, whose "
                       "partitions are model files")
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


_NATIVE_SUFFIXES = (".so", ".dll", ".dylib")


def _native_backend(backend: str) -> bool:
    from .trust import loads_native_code

    return loads_native_code(backend)


def _check_strategy(v: _V, strategy: str, parts: list) -> None:
    """single:/greedy: name the libraries their partitions may use: a stranger's manifest
    saying `single:openvino` over an ONNX Runtime partition was printed as it said (issue 36).
    Collage and its fallbacks ("collage->single:b") are checked against `backends` only."""
    kind, _, rest = strategy.partition(":")
    if kind not in ("single", "greedy") or not rest:
        return
    allowed = {b.split("[", 1)[0] for b in (rest.split(",") if kind == "greedy" else [rest])}
    for i, p in enumerate(parts):
        if p["backend"].split("[", 1)[0] not in allowed:
            v.fail(f"partitions[{i}].backend", f"{_short(p['backend'])} is not a backend of "
                   f"strategy {_short(strategy)}")


def _same_type(a: tuple, b: tuple) -> bool:
    """One dtype and rank; a dimension known on both sides (an int) is the same number, one
    known at run time only (None, a name) matches any."""
    (da, sa), (db, sb) = a, b
    if da != db or not isinstance(sa, list) or not isinstance(sb, list) or len(sa) != len(sb):
        return da == db and sa == sb
    return all(x == y or not isinstance(x, int) or not isinstance(y, int)
               for x, y in zip(sa, sb))


def _check_dataflow(v: _V, m: dict) -> None:
    """Every tensor a partition's runner reads is a graph input or an earlier partition's
    output, and every tensor it names as produced is one of its declared outputs: the executor
    looks them up by name, and a dangling one was a KeyError in the middle of a run."""
    available = {t["name"] for t in m["model"]["inputs"]}
    if isinstance(m.get("constant_outputs"), dict):  # the executor provides these too
        available |= set(m["constant_outputs"])
    # one tensor, one type: a partition input declared otherwise than the graph input or the
    # earlier output it is (a stranger's [1,3,64,64] beside a 32x32 model) was printed as
    # given, and an edited model input ended a run in the library's own error (issue 36)
    declared = {t["name"]: (t.get("dtype"), t.get("shape")) for t in m["model"]["inputs"]}
    for i, p in enumerate(m["partitions"]):
        for j, t in enumerate(p["inputs"]):
            was = declared.get(t["name"])
            if was is not None and not _same_type(was, (t.get("dtype"), t.get("shape"))):
                v.fail(f"partitions[{i}].inputs[{j}]",
                       f"{_short(t['name'])} is {t.get('dtype')}{t.get('shape')} here but "
                       f"{was[0]}{was[1]} where it is made")
        for t in p["outputs"]:
            declared.setdefault(t["name"], (t.get("dtype"), t.get("shape")))
    for i, p in enumerate(m["partitions"]):
        meta = p.get("blob_meta") or {}
        outs = {t["name"] for t in p["outputs"]}
        # every list that names what the partition reads: a name only the manifest's inputs
        # held ("nope", with blob_meta still naming x) passed every offline command, and inspect
        # called it a graph input (the fourteenth afternoon)
        for field, names in (("inputs", [t["name"] for t in p["inputs"]]),
                             ("runner_inputs", p.get("runner_inputs") or []),
                             ("blob_meta.input_names", meta.get("input_names") or [])):
            for name in names:
                if not isinstance(name, str) or name not in available:
                    v.fail(f"partitions[{i}].{field}", f"{_short(name)} is neither a graph "
                           "input nor an output of an earlier partition")
        for name in meta.get("output_names") or ():
            if name not in outs:
                v.fail(f"partitions[{i}].blob_meta.output_names",
                       f"{_short(name)} is not among the partition's outputs")
        available |= outs
    _check_model_outputs(v, m, declared)


def _check_model_outputs(v: _V, m: dict, declared: dict) -> None:
    """The model's outputs as their makers declare them (inputs were checked, outputs not: a
    stranger's float64 output over a float32 partition was shown by inspect as given, and an
    output nothing makes was refused only by `run`, without naming the field)."""
    consts = m.get("constant_outputs") if isinstance(m.get("constant_outputs"), dict) else {}
    seen = set()
    for i, t in enumerate(m["model"]["outputs"]):
        at, name = f"model.outputs[{i}]", t["name"]
        if name in seen:
            v.fail(at, f"{_short(name)} is listed twice")
        seen.add(name)
        was = declared.get(name)
        if was is None:
            if name not in consts:
                v.fail(at, f"{_short(name)} is made by no partition, is no graph input and no "
                       "stored constant")
        elif not _same_type(was, (t.get("dtype"), t.get("shape"))):
            v.fail(at, f"{_short(name)} is {t.get('dtype')}{t.get('shape')} here but "
                   f"{was[0]}{was[1]} where it is made")


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


