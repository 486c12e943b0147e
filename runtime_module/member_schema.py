"""The artifact's other documents, checked as the manifest is (artifact_schema): map.json and
profile files by their declared types (map_types) and then what types cannot relate, the
constants' .npy headers by hand."""

from __future__ import annotations

import math
from functools import partial

from . import schema_base
from .map_types import Profile, ProvenanceMap
from .schema_base import SchemaError, _short, convert, first_twice, free, quiet_gc


def check_npy(data: bytes, where: str) -> None:
    """A constant's .npy member: a plain numeric array whose header matches its size (an
    object array would need pickle, which is never used)."""
    import io

    import numpy as np

    f = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(f)
        shape, _order, dtype = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                                else np.lib.format.read_array_header_2_0)(f)
    except Exception as e:  # numpy raises ValueError and friends for a bad header
        raise SchemaError(f"{where}: not a valid .npy array ({str(e)[:200]})") from None
    if dtype.hasobject or dtype.kind not in "biufcV":
        raise SchemaError(f"{where}: holds {dtype} elements (Python objects), not numbers")
    if math.prod(shape) * dtype.itemsize != len(data) - f.tell():
        raise SchemaError(f"{where}: the header says {list(shape)} of {dtype}, the member "
                          f"holds {len(data) - f.tell()} bytes of data")


@quiet_gc
def check_map(d, where: str, manifest: dict | None = None) -> dict:
    """map.json: its types; each record listed once (every node twice read "132 ran on a
    backend" of 66); the join tables name records the map holds; with `manifest` (checked),
    the map and the partitions name the same nodes and kernels."""
    fail = partial(schema_base.fail, f"{where}: map.json")
    if type(v := d.get("schema_version") if isinstance(d, dict) else 1) is not int or v != 1:
        fail("schema_version", f"{_short(v)} is not supported (reads 1)")  # 1.0, true
    pm = convert(d, ProvenanceMap, f"{where}: map.json")
    free(d.get("meta"), "meta", fail)
    ids = {}
    for key, f in (("onnx_nodes", "id"), ("relax_exprs", "id"), ("kernels", "name"),
                   ("kernel_sites", "id")):
        if twice := first_twice(getattr(r, f) for r in getattr(pm, key)):
            fail(f"{key}[{twice[0]}].{f}", f"{_short(twice[1])} is listed twice")
        ids[key] = {getattr(r, f) for r in getattr(pm, key)}
    for i, r in enumerate(pm.kernel_sites):
        if r.kernel not in ids["kernels"]:
            fail(f"kernel_sites[{i}].kernel", f"{_short(r.kernel)} is no kernel of the map")
    for key, first in (("node_exprs", "onnx_nodes"), ("site_exprs", "kernel_sites")):
        for i, t in enumerate(getattr(pm, key)):
            if t[0] not in ids[first] or t[1] not in ids["relax_exprs"]:
                fail(f"{key}[{i}]", f"{_short(list(t[:2]))} names a record the map does not hold")
    if manifest is not None:
        _check_against(fail, partial(schema_base.fail, f"{where}: manifest.json"), pm, ids,
                       manifest)
    return d


def _check_against(fail, fail_manifest, pm, ids: dict, manifest: dict) -> None:
    """Each side names only what the other holds: a manifest whose partitions were emptied
    loaded, and inspect printed "0 partition(s)" beside "8 ran on a backend" (issue 36)."""
    parts = manifest["partitions"]
    lib = {r.name: (k, r.backend.split("[", 1)[0]) for k, r in enumerate(pm.kernels)}
    for i, p in enumerate(parts):
        for key, known in (("onnx_nodes", "onnx_nodes"), ("ops", "onnx_nodes"),
                           ("kernels", "kernels")):
            if (missing := next((x for x in p[key] if x not in ids[known]), None)) is not None:
                fail_manifest(f"partitions[{i}].{key}", f"{_short(missing)} is not in map.json")
        for k, runs_on in map(lib.get, p["kernels"]):  # a kernel's library is its partition's
            if runs_on != p["backend"].split("[", 1)[0]:
                fail(f"kernels[{k}].backend", f"{_short(pm.kernels[k].backend)}, but its "
                     f"partition {_short(p['id'])} runs on {_short(p['backend'])}")
    cov = manifest.get("coverage") or {}  # the counts inspect prints (999 of 8 was printed)
    for part, total, key in (("onnx_nodes_mapped", "onnx_nodes_total", "onnx_nodes"),
                             ("kernels_mapped", "kernels_total", "kernels")):
        if total in cov and cov[total] != len(ids[key]):
            fail_manifest(f"coverage.{total}", f"{_short(cov[total])}, but map.json holds "
                          f"{len(ids[key])} {key}")
        if part in cov and (type(cov[part]) is not int or not 0 <= cov[part] <= len(ids[key])):
            fail_manifest(f"coverage.{part}", f"{_short(cov[part])} is not a count of "
                          f"map.json's {len(ids[key])} {key}")
    kernels = {k for p in parts for k in p["kernels"]}
    nodes = {n for p in parts for n in p["onnx_nodes"]}
    for i, r in enumerate(pm.kernels):
        if r.name not in kernels:
            fail(f"kernels[{i}]", f"kernel {_short(r.name)} is compiled in no partition of "
                 "manifest.json")
    for i, r in enumerate(pm.onnx_nodes):
        if r.id not in nodes and not r.elided:
            fail(f"onnx_nodes[{i}]", f"node {_short(r.id)} runs in no partition of manifest.json")


@quiet_gc
def check_profile(d, where: str) -> dict:
    """A profile file (`provmap profile --json`, read back by report and overlays): its types,
    and its depth bounded, as it is shown whole."""
    convert(d, Profile, where)
    free(d, "", partial(schema_base.fail, where))
    return d
