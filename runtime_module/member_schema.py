"""The artifact's other documents: map.json, the constants' .npy headers, and profile files
(`provmap profile --json`, read back by report and overlays).  Same rules as the manifest's
(artifact_schema): checked whole before use, one line naming the file, member and field."""

from __future__ import annotations

import math

from provmap.provenance.model import ROLE_COMPUTE, ROLE_CONSTANT, ROLE_FOLDED, ROLE_PRODUCED

from .schema_base import _DTYPE_KINDS, MAX_TEXT, SchemaError, _HEX64, _V, _short, _tname


def check_npy(data: bytes, where: str) -> None:
    """A constant's .npy member: a plain numeric array whose header matches its size (an
    object array would need pickle, which is never used)."""
    import io

    import numpy as np

    f = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(f)
        read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                else np.lib.format.read_array_header_2_0)
        shape, _order, dtype = read(f)
    except Exception as e:  # numpy raises ValueError and friends for a bad header
        raise SchemaError(f"{where}: not a valid .npy array ({str(e)[:200]})") from None
    if dtype.hasobject or dtype.kind not in _DTYPE_KINDS.replace("O", ""):
        raise SchemaError(f"{where}: holds {dtype} elements (Python objects), not numbers")
    if math.prod(shape) * dtype.itemsize != len(data) - f.tell():
        raise SchemaError(f"{where}: the header says {list(shape)} of {dtype}, the member "
                          f"holds {len(data) - f.tell()} bytes of data")


# -- map.json --------------------------------------------------------------------------------

_MAP_RECORDS = {
    "onnx_nodes": (("id", "s"), ("name", "s"), ("op_type", "s"), ("domain", "s"),
                   ("index", "i"), ("inputs", "S"), ("outputs", "S"), ("elided", "o")),
    "relax_exprs": (("id", "s"), ("function", "s"), ("var", "s"), ("op", "s"), ("shape", "o"),
                    ("dtype", "o"), ("index", "i")),
    "kernels": (("name", "s"), ("function", "s"), ("backend", "s"), ("kind", "s")),
    "kernel_sites": (("id", "s"), ("kernel", "s"), ("caller", "s"), ("ordinal", "i")),
}


def check_map(d, where: str, manifest: dict | None = None) -> dict:
    """map.json: every record has exactly its fields, each of its type; the join tables are
    triples of strings naming records that exist; and (with `manifest`) every node and kernel
    a partition names is in the map."""
    v = _V(f"{where}: map.json")
    v.dict_(d, "", required=("schema_version", "onnx_nodes", "relax_exprs", "kernels",
                             "kernel_sites", "node_exprs", "site_exprs"))
    if type(d["schema_version"]) is not int or d["schema_version"] != 1:  # 1.0, True too
        v.fail("schema_version", f"{_short(d['schema_version'])} is not supported (reads 1)")
    if "meta" in d:
        v.free(v.dict_(d["meta"], "meta"), "meta")
    for key, fields in _MAP_RECORDS.items():
        names = {f for f, _ in fields}
        for i, r in enumerate(v.list_(d[key], key)):
            at = f"{key}[{i}]"
            v.dict_(r, at, required=[f for f, _t in fields if f != "elided"])
            extra = set(r) - names
            if extra:
                v.fail(at, f"unexpected field {_short(sorted(extra)[0])}")
            for f, t in fields:
                x = r.get(f)
                if t == "s":
                    v.str_(x, f"{at}.{f}", max_len=MAX_TEXT)
                elif t == "i":
                    v.int_(x, f"{at}.{f}")
                elif t == "S":
                    v.strs(x, f"{at}.{f}")
                else:
                    v.opt_str(x, f"{at}.{f}", max_len=MAX_TEXT)
    keyed = {"onnx_nodes": "id", "relax_exprs": "id", "kernels": "name", "kernel_sites": "id"}
    ids = {key: {r[f] for r in d[key]} for key, f in keyed.items()}
    for key, f in keyed.items():
        known = ids[key]
        if len(known) != len(d[key]):  # every node twice read "132 ran on a backend" of 66
            seen: set = set()
            i, r = next((i, r) for i, r in enumerate(d[key])
                        if r[f] in seen or seen.add(r[f]))
            v.fail(f"{key}[{i}].{f}", f"{_short(r[f])} is listed twice")
    for i, r in enumerate(d["kernel_sites"]):
        if r["kernel"] not in ids["kernels"]:
            v.fail(f"kernel_sites[{i}].kernel", f"{_short(r['kernel'])} is no kernel of the map")
    # the third entry is a role lookup prints as given (a stranger's "<script>" was printed:
    # twelfth afternoon); only the two each table documents are read
    for key, first, roles in (("node_exprs", "onnx_nodes", (ROLE_PRODUCED, ROLE_FOLDED)),
                              ("site_exprs", "kernel_sites", (ROLE_COMPUTE, ROLE_CONSTANT))):
        for i, t in enumerate(v.list_(d[key], key)):
            v.list_(t, f"{key}[{i}]")
            if len(t) != 3:
                v.fail(f"{key}[{i}]", f"expected 3 entries, got {len(t)}")
            for j, s in enumerate(t):
                v.str_(s, f"{key}[{i}][{j}]")
            if t[0] not in ids[first] or t[1] not in ids["relax_exprs"]:
                v.fail(f"{key}[{i}]", f"{_short(t[:2])} names a record the map does not hold")
            if t[2] not in roles:
                v.fail(f"{key}[{i}][2]", f"{_short(t[2])} is not one of {', '.join(roles)}")
    if manifest is None:
        return d
    parts = manifest.get("partitions", ())
    kernel_lib = {r["name"]: (k, r["backend"]) for k, r in enumerate(d["kernels"])}
    for i, p in enumerate(parts):
        for key, known in (("onnx_nodes", "onnx_nodes"), ("ops", "onnx_nodes"),
                           ("kernels", "kernels")):
            missing = [x for x in p.get(key, ()) if x not in ids[known]]
            if missing:
                raise SchemaError(f"{where}: manifest.json: partitions[{i}].{key}: "
                                  f"{_short(missing[0])} is not in map.json")
        # a kernel's library is its partition's (lookup printed a stranger's "openvino"
        # kernel inside an ONNX Runtime partition as given: tenth afternoon)
        runs_on = str(p.get("backend", "")).split("[", 1)[0]
        for name in p.get("kernels", ()):
            k, lib = kernel_lib[name]
            if lib.split("[", 1)[0] != runs_on:
                v.fail(f"kernels[{k}].backend", f"{_short(lib)}, but its partition "
                       f"{_short(p.get('id'))} runs on {_short(p.get('backend'))}")
    # the coverage counts inspect and compile print are the map's own (999 of 8 was printed)
    cov = manifest.get("coverage") or {}
    for part, total, key in (("onnx_nodes_mapped", "onnx_nodes_total", "onnx_nodes"),
                             ("kernels_mapped", "kernels_total", "kernels")):
        if total in cov and cov[total] != len(d[key]):
            raise SchemaError(f"{where}: manifest.json: coverage.{total}: {_short(cov[total])}, "
                              f"but map.json holds {len(d[key])} {key}")
        if part in cov and (isinstance(cov[part], bool) or not isinstance(cov[part], int)
                            or not 0 <= cov[part] <= len(d[key])):
            raise SchemaError(f"{where}: manifest.json: coverage.{part}: {_short(cov[part])} "
                              f"is not a count of map.json's {len(d[key])} {key}")
    # ... and the other way: the map's kernels and the nodes it says run belong to partitions
    # (a manifest whose partitions were emptied or whose onnx_nodes were cut short loaded, and
    # inspect printed "0 partition(s)" beside "8 ran on a backend": issue 36)
    kernels = {k for p in parts for k in p.get("kernels", ())}
    nodes = {n for p in parts for n in p.get("onnx_nodes", ())}
    for key, f, held, what in (("kernels", "name", kernels, "kernel"),
                               ("onnx_nodes", "id", nodes, "node")):
        for i, r in enumerate(d[key]):
            if r[f] not in held and not (key == "onnx_nodes" and r.get("elided")):
                raise SchemaError(f"{where}: map.json: {key}[{i}]: {what} {_short(r[f])} "
                                  f"{'runs' if key == 'onnx_nodes' else 'is compiled'} in no "
                                  "partition of manifest.json")
    return d


# -- profile files (provmap profile --json, read by report --profile) ------------------------

def check_profile(d, where: str) -> dict:
    v = _V(where)
    v.dict_(d, "", required=("partitions",))
    v.free(d, "")
    for i, p in enumerate(v.list_(d["partitions"], "partitions")):
        v.dict_(p, f"partitions[{i}]", required=("partition",))
        v.str_(p["partition"], f"partitions[{i}].partition")
        _num(v, p.get("ms"), f"partitions[{i}].ms")
    for i, r in enumerate(v.list_(d.get("onnx_nodes") or [], "onnx_nodes")):
        v.dict_(r, f"onnx_nodes[{i}]", required=("id",))
        v.str_(r["id"], f"onnx_nodes[{i}].id")
        _num(v, r.get("ms"), f"onnx_nodes[{i}].ms")
        if r.get("shared_with") is not None:
            v.strs(r["shared_with"], f"onnx_nodes[{i}].shared_with")
    _num(v, d.get("e2e_ms"), "e2e_ms")
    if d.get("artifact_digest") is not None:
        v.str_(d["artifact_digest"], "artifact_digest", pattern=_HEX64)
    return d


def _num(v: _V, x, path: str) -> None:
    if x is not None and (isinstance(x, bool) or not isinstance(x, (int, float))):
        v.fail(path, f"expected a number, got {_tname(x)}")
    # Python's json reads NaN and Infinity; the report's JSON.parse does not (a blank page).
    # An int of 400 digits is finite to Python but not to a float (OverflowError).
    if x is not None and not (abs(x) < 1e300 if isinstance(x, int) else math.isfinite(x)):
        v.fail(path, f"{_short(x)} is not a finite number")
