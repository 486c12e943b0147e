"""Tests for provmap.provenance.store: exact round trips, identical answers from both index classes,
indexed SQL plans, atomic writes, and clear errors for bad files."""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
from pathlib import Path

import pytest
import sqlite_utils
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from provmap.provenance import map_index, store
from provmap.provenance.model import (
    ROLE_COMPUTE,
    ROLE_CONSTANT,
    ROLE_FOLDED,
    ROLE_PRODUCED,
    SCHEMA_VERSION,
    Kernel,
    KernelSite,
    OnnxNode,
    ProvenanceMap,
    RelaxExpr,
)

# ---- a small hand-built map --------------------------------------------------------------
#
#   ONNX:  n_cos (ConstantOfShape, folded into e_add) ; n_id (Identity, elided) ;
#          n_add (Add) ; n_relu (Relu)
#   Relax: e_add = add(x, const) ; e_relu = relu(e_add) ; e_add2 = add(e_relu, x) ;
#          e_out = relu(e_add2)
#   Kernels: fused_add_relu called twice (sites #0, #1), copy called once.

N_COS, N_ID, N_ADD, N_RELU = "n000000000c05", "n0000000001d0", "n000000000add", "n00000000e1e0"
E_ADD, E_RELU, E_ADD2, E_OUT = "e000000000001", "e000000000002", "e000000000003", "e000000000004"
K_FUSED, K_COPY = "fused_add_relu", "copy"
S_F0, S_F1, S_C0 = "main/fused_add_relu#0", "main/fused_add_relu#1", "main/copy#0"


def small_map() -> ProvenanceMap:
    return ProvenanceMap(
        meta={"model": "tiny.onnx", "target": "cuda", "opset": 17, "tags": ["a", "ü"]},
        nodes=[
            OnnxNode(N_COS, "cos", "ConstantOfShape", "", 0, ["shape"], ["c"]),
            OnnxNode(N_ID, "", "Identity", "", 1, ["x"], ["x_id"], elided="identity"),
            OnnxNode(N_ADD, "add", "Add", "", 2, ["x_id", "c"], ["y"]),
            # A second node also named "add": names are not keys.
            OnnxNode(N_RELU, "add", "Relu", "", 3, ["y"], ["z"]),
        ],
        exprs=[
            RelaxExpr(E_ADD, "main", "lv", "relax.add", "(1, 4)", "float32", 0),
            RelaxExpr(E_RELU, "main", "lv1", "relax.nn.relu", "(1, 4)", "float32", 1),
            RelaxExpr(E_ADD2, "main", "lv2", "relax.add", None, None, 2),
            RelaxExpr(E_OUT, "main", "gv", "relax.nn.relu", "(1, 4)", "float32", 3),
        ],
        kernels=[
            Kernel(K_FUSED, "fused_add_relu", "cuda", "primfunc"),
            Kernel(K_COPY, "vm.builtin.copy", "vm", "builtin"),
        ],
        sites=[
            KernelSite(S_F0, K_FUSED, "main", 0),
            KernelSite(S_F1, K_FUSED, "main", 1),
            KernelSite(S_C0, K_COPY, "main", 2),
        ],
        node_exprs=[
            (N_ADD, E_ADD, ROLE_PRODUCED),
            (N_COS, E_ADD, ROLE_FOLDED),
            (N_RELU, E_RELU, ROLE_PRODUCED),
            (N_ADD, E_ADD2, ROLE_PRODUCED),
            (N_RELU, E_OUT, ROLE_PRODUCED),
        ],
        site_exprs=[
            (S_F0, E_ADD, ROLE_COMPUTE),
            (S_F0, E_RELU, ROLE_COMPUTE),
            (S_F1, E_ADD, ROLE_CONSTANT),   # e_add's value was folded into site #1's argument
            (S_F1, E_ADD2, ROLE_COMPUTE),
            (S_F1, E_OUT, ROLE_COMPUTE),
            (S_C0, E_OUT, ROLE_COMPUTE),
        ],
    )


# ---- round trips ---------------------------------------------------------------------------

def test_json_round_trip_exact(tmp_path):
    m = small_map()
    p = store.save_json(m, tmp_path / "m.json")
    assert store.load_json(p).to_dict() == m.to_dict()
    assert store.load(p).to_dict() == m.to_dict()
    assert json.loads(p.read_text(encoding="utf-8"))["schema_version"] == SCHEMA_VERSION


def test_sqlite_round_trip_exact(tmp_path):
    m = small_map()
    p = store.save_sqlite(m, tmp_path / "m.sqlite")
    assert store.load_sqlite(p).to_dict() == m.to_dict()
    assert store.load(p).to_dict() == m.to_dict()


def test_empty_map_round_trips_and_has_full_schema(tmp_path):
    m = ProvenanceMap()
    jp, sp = store.save(m, tmp_path / "empty")
    assert store.load(jp).to_dict() == m.to_dict()
    assert store.load(sp).to_dict() == m.to_dict()
    db = sqlite_utils.Database(sp)
    assert set(db.table_names()) == {
        "meta", "onnx_nodes", "relax_exprs", "kernels", "kernel_sites",
        "node_exprs", "site_exprs", "node_sites",
    }


def test_save_writes_both_files_with_version(tmp_path):
    m = small_map()
    jp, sp = store.save(m, tmp_path / "out.v1")  # a dotted prefix must not lose its "suffix"
    assert (jp.name, sp.name) == ("out.v1.json", "out.v1.sqlite")
    assert store.load(jp).to_dict() == store.load(sp).to_dict() == m.to_dict()
    with sqlite3.connect(sp) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == (
            json.dumps(SCHEMA_VERSION),)
        assert conn.execute("SELECT value FROM meta WHERE key='tags'").fetchone() == (
            '["a", "ü"]',)
        # The materialized view is exactly the model's derived node_sites() plus names.
        got = conn.execute(
            "SELECT node_id, node_name, site_id, kernel, role FROM node_sites "
            "ORDER BY node_id, site_id").fetchall()
    assert got == [
        (N_ADD, "add", S_F0, K_FUSED, ROLE_COMPUTE),
        (N_ADD, "add", S_F1, K_FUSED, ROLE_COMPUTE),
        (N_COS, "cos", S_F0, K_FUSED, ROLE_FOLDED),
        (N_COS, "cos", S_F1, K_FUSED, ROLE_FOLDED),
        (N_RELU, "add", S_C0, K_COPY, ROLE_COMPUTE),
        (N_RELU, "add", S_F0, K_FUSED, ROLE_COMPUTE),
        (N_RELU, "add", S_F1, K_FUSED, ROLE_COMPUTE),
    ]


@pytest.mark.parametrize("bad", [
    {"schema_version": 1},
    {1: "int key"},
])
def test_unsavable_meta_rejected_before_writing(tmp_path, bad):
    m = small_map()
    m.meta.update(bad)
    with pytest.raises(ValueError):
        store.save(m, tmp_path / "m")
    assert list(tmp_path.iterdir()) == []


def test_duplicate_ids_rejected(tmp_path):
    m = small_map()
    m.nodes.append(m.nodes[0])
    with pytest.raises(ValueError, match="duplicate ONNX node id"):
        store.save_sqlite(m, tmp_path / "m.sqlite")
    assert list(tmp_path.iterdir()) == []


# ---- queries -------------------------------------------------------------------------------

@pytest.fixture(params=["memory", "sqlite", "open_index_json", "open_index_sqlite"])
def index(request, tmp_path):
    m = small_map()
    if request.param == "memory":
        yield map_index.MapIndex(m)
    elif request.param == "sqlite":
        with map_index.SqliteMapIndex(store.save_sqlite(m, tmp_path / "m.sqlite")) as idx:
            yield idx
    elif request.param == "open_index_json":
        yield map_index.open_index(store.save_json(m, tmp_path / "m.json"))
    else:
        idx = map_index.open_index(store.save_sqlite(m, tmp_path / "m.sqlite"))
        assert isinstance(idx, map_index.SqliteMapIndex)
        yield idx
        idx.close()


def test_nodes_resolves_id_then_name(index):
    m = small_map()
    by_id = {n.id: n for n in m.nodes}
    assert index.nodes(N_ADD) == [by_id[N_ADD]]
    assert index.nodes("cos") == [by_id[N_COS]]
    assert index.nodes("add") == [by_id[N_ADD], by_id[N_RELU]]  # duplicate name, index order
    assert index.nodes("") == [by_id[N_ID]]
    assert index.nodes("nope") == []


def test_kernels_for_node(index):
    assert index.kernels_for_node(N_ADD) == [
        (S_F0, K_FUSED, ROLE_COMPUTE), (S_F1, K_FUSED, ROLE_COMPUTE)]
    # n_cos reaches the kernel only through a value folded at import: "folded" at both sites.
    assert index.kernels_for_node(N_COS) == [
        (S_F0, K_FUSED, ROLE_FOLDED), (S_F1, K_FUSED, ROLE_FOLDED)]
    assert index.kernels_for_node(N_RELU) == [
        (S_C0, K_COPY, ROLE_COMPUTE), (S_F0, K_FUSED, ROLE_COMPUTE),
        (S_F1, K_FUSED, ROLE_COMPUTE)]
    assert index.kernels_for_node(N_ID) == []  # elided
    assert index.kernels_for_node("nope") == []


def test_nodes_for_kernel(index):
    # The shared kernel's provenance is the union of its two sites; n_add is "compute" because
    # site #0 computes it even though site #1 only got it as a constant.
    assert index.nodes_for_kernel(K_FUSED) == [
        (N_ADD, "add", ROLE_COMPUTE), (N_COS, "cos", ROLE_FOLDED),
        (N_RELU, "add", ROLE_COMPUTE)]
    assert index.nodes_for_kernel(K_COPY) == [(N_RELU, "add", ROLE_COMPUTE)]
    assert index.nodes_for_kernel("nope") == []


def test_nodes_for_kernel_constant_only(tmp_path):
    m = small_map()
    m.site_exprs = [(S_F1, E_ADD, ROLE_CONSTANT)]
    expected = [(N_ADD, "add", ROLE_CONSTANT), (N_COS, "cos", ROLE_FOLDED)]
    assert map_index.MapIndex(m).nodes_for_kernel(K_FUSED) == expected
    with map_index.SqliteMapIndex(store.save_sqlite(m, tmp_path / "m.sqlite")) as idx:
        assert idx.nodes_for_kernel(K_FUSED) == expected


def test_exprs_and_nodes_for_expr(index):
    assert index.exprs_for_node(N_ADD) == [(E_ADD, ROLE_PRODUCED), (E_ADD2, ROLE_PRODUCED)]
    assert index.exprs_for_node(N_COS) == [(E_ADD, ROLE_FOLDED)]
    assert index.exprs_for_node(N_ID) == []
    assert index.nodes_for_expr(E_ADD) == [(N_ADD, ROLE_PRODUCED), (N_COS, ROLE_FOLDED)]
    assert index.nodes_for_expr(E_OUT) == [(N_RELU, ROLE_PRODUCED)]
    assert index.nodes_for_expr("nope") == []


def test_kernels_for_expr(index):
    assert index.kernels_for_expr(E_ADD) == [
        (S_F0, K_FUSED, ROLE_COMPUTE), (S_F1, K_FUSED, ROLE_CONSTANT)]
    assert index.kernels_for_expr(E_OUT) == [
        (S_C0, K_COPY, ROLE_COMPUTE), (S_F1, K_FUSED, ROLE_COMPUTE)]
    assert index.kernels_for_expr("nope") == []


@pytest.mark.parametrize("query", [
    "kernels_for_node", "nodes_for_kernel", "exprs_for_node", "nodes_for_expr",
    "kernels_for_expr", "node_by_id", "nodes_by_name",
])
def test_lookups_use_an_index(tmp_path, query):
    p = store.save_sqlite(small_map(), tmp_path / "m.sqlite")
    with sqlite3.connect(p) as conn:
        plan = conn.execute(
            "EXPLAIN QUERY PLAN " + map_index.SqliteMapIndex.QUERIES[query], ("x",)).fetchall()
    details = " | ".join(row[-1] for row in plan)
    assert "USING INDEX" in details or "USING COVERING INDEX" in details \
        or "USING PRIMARY KEY" in details, details
    assert "SCAN" not in details.replace("SCAN CONSTANT ROW", ""), details


def test_main_lookups_use_covering_index(tmp_path):
    p = store.save_sqlite(small_map(), tmp_path / "m.sqlite")
    with sqlite3.connect(p) as conn:
        for q in ("kernels_for_node", "nodes_for_kernel"):
            plan = conn.execute(
                "EXPLAIN QUERY PLAN " + map_index.SqliteMapIndex.QUERIES[q], ("x",)).fetchall()
            details = " | ".join(row[-1] for row in plan)
            assert "USING COVERING INDEX" in details, (q, details)
            assert "TEMP B-TREE" not in details, (q, details)


# ---- atomic writes -------------------------------------------------------------------------

def _old_and_new():
    old = small_map()
    new = small_map()
    new.meta["model"] = "changed.onnx"
    return old, new


def test_json_write_failure_leaves_destination_unchanged(tmp_path, monkeypatch):
    old, new = _old_and_new()
    dest = store.save_json(old, tmp_path / "m.json")
    before = dest.read_bytes()

    def half_then_fail(obj, f, **kw):
        f.write(json.dumps(obj)[:20])
        raise OSError("disk full")

    monkeypatch.setattr(store.json, "dump", half_then_fail)
    with pytest.raises(OSError, match="disk full"):
        store.save_json(new, dest)
    assert dest.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["m.json"]


def _fail_on_table(monkeypatch, table_name):
    orig = sqlite_utils.db.Table.insert_all

    def insert_all(self, records, *a, **kw):
        if self.name == table_name:
            raise OSError("disk full")
        return orig(self, records, *a, **kw)

    monkeypatch.setattr(sqlite_utils.db.Table, "insert_all", insert_all)


def test_sqlite_write_failure_leaves_destination_unchanged(tmp_path, monkeypatch):
    old, new = _old_and_new()
    dest = store.save_sqlite(old, tmp_path / "m.sqlite")
    before = dest.read_bytes()
    _fail_on_table(monkeypatch, "kernel_sites")  # after some tables were already written
    with pytest.raises(OSError, match="disk full"):
        store.save_sqlite(new, dest)
    assert dest.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["m.sqlite"]


def test_sqlite_write_failure_on_fresh_destination(tmp_path, monkeypatch):
    _fail_on_table(monkeypatch, "node_sites")
    with pytest.raises(OSError):
        store.save_sqlite(small_map(), tmp_path / "m.sqlite")
    assert os.listdir(tmp_path) == []


def test_save_is_both_or_neither(tmp_path, monkeypatch):
    _fail_on_table(monkeypatch, "meta")
    with pytest.raises(OSError):
        store.save(small_map(), tmp_path / "out")
    assert os.listdir(tmp_path) == []


def test_save_failure_keeps_previous_pair(tmp_path, monkeypatch):
    old, new = _old_and_new()
    jp, sp = store.save(old, tmp_path / "out")
    before = (jp.read_bytes(), sp.read_bytes())
    _fail_on_table(monkeypatch, "onnx_nodes")
    with pytest.raises(OSError):
        store.save(new, tmp_path / "out")
    assert (jp.read_bytes(), sp.read_bytes()) == before
    assert sorted(os.listdir(tmp_path)) == ["out.json", "out.sqlite"]


def test_save_removes_new_json_if_sqlite_rename_fails(tmp_path, monkeypatch):
    orig = os.replace

    def replace(src, dst):
        if str(dst).endswith(".sqlite"):
            raise OSError("rename failed")
        return orig(src, dst)

    monkeypatch.setattr(store.os, "replace", replace)
    with pytest.raises(OSError, match="rename failed"):
        store.save(small_map(), tmp_path / "out")
    assert os.listdir(tmp_path) == []


# ---- bad files -----------------------------------------------------------------------------

def _assert_value_error_names(path, fn):
    with pytest.raises(ValueError) as ei:
        fn(path)
    assert str(path) in str(ei.value)
    return ei.value


def test_json_wrong_schema_version(tmp_path):
    p = store.save_json(small_map(), tmp_path / "m.json")
    d = json.loads(p.read_text(encoding="utf-8"))
    d["schema_version"] = SCHEMA_VERSION + 1
    p.write_text(json.dumps(d), encoding="utf-8")
    err = _assert_value_error_names(p, store.load)
    assert "schema version" in str(err)


def test_sqlite_wrong_schema_version(tmp_path):
    p = store.save_sqlite(small_map(), tmp_path / "m.sqlite")
    with sqlite3.connect(p) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    for fn in (store.load, map_index.SqliteMapIndex):
        err = _assert_value_error_names(p, fn)
        assert "schema version" in str(err)


def test_sqlite_meta_version_disagrees(tmp_path):
    p = store.save_sqlite(small_map(), tmp_path / "m.sqlite")
    with sqlite3.connect(p) as conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    conn.close()
    _assert_value_error_names(p, store.load)


@pytest.mark.parametrize("fraction", [0.0, 0.01, 0.5, 0.9])
def test_truncated_json(tmp_path, fraction):
    p = store.save_json(small_map(), tmp_path / "m.json")
    data = p.read_bytes()
    p.write_bytes(data[: int(len(data) * fraction)])
    _assert_value_error_names(p, store.load)


@pytest.mark.parametrize("fraction", [0.01, 0.2, 0.5, 0.9])
def test_truncated_sqlite(tmp_path, fraction):
    p = store.save_sqlite(small_map(), tmp_path / "m.sqlite")
    data = p.read_bytes()
    p.write_bytes(data[: int(len(data) * fraction)])
    _assert_value_error_names(p, store.load)


@pytest.mark.parametrize("name,content", [
    ("m.json", b"\xff\xfe not json"),
    ("m.json", b"[1, 2, 3]"),
    ("m.json", b'{"schema_version": 1}'),
    ("m.json", b'{"schema_version": 1, "onnx_nodes": [{"bogus": 1}], "relax_exprs": [], '
               b'"kernels": [], "kernel_sites": [], "node_exprs": [], "site_exprs": []}'),
    ("m.sqlite", b"this is not a database at all" * 100),
    ("m.sqlite", b""),
])
def test_garbage_files(tmp_path, name, content):
    p = tmp_path / name
    p.write_bytes(content)
    _assert_value_error_names(p, store.load)
    if name.endswith(".sqlite"):
        _assert_value_error_names(p, map_index.SqliteMapIndex)


def test_sqlite_that_is_not_a_map(tmp_path):
    p = tmp_path / "other.sqlite"
    sqlite_utils.Database(p)["t"].insert({"a": 1})
    err = _assert_value_error_names(p, store.load)
    assert "not a provenance map" in str(err)


def test_missing_file_is_not_created(tmp_path):
    with pytest.raises(FileNotFoundError):
        store.load(tmp_path / "missing.sqlite")
    with pytest.raises(FileNotFoundError):
        map_index.SqliteMapIndex(tmp_path / "missing.sqlite")
    assert os.listdir(tmp_path) == []


def test_unknown_suffix(tmp_path):
    _assert_value_error_names(tmp_path / "m.txt", store.load)


# ---- property test -------------------------------------------------------------------------

_text = st.text(max_size=8)
_ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_json_scalars = st.none() | st.booleans() | _ints | st.floats(allow_nan=False) | _text
_json = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)
_roles_n = st.sampled_from([ROLE_PRODUCED, ROLE_FOLDED])
_roles_s = st.sampled_from([ROLE_COMPUTE, ROLE_CONSTANT])


@st.composite
def provenance_maps(draw):
    node_ids = draw(st.lists(_text, unique=True, max_size=6))
    expr_ids = draw(st.lists(_text, unique=True, max_size=6))
    kernel_names = draw(st.lists(_text, unique=True, max_size=3))
    site_ids = draw(st.lists(_text, unique=True, max_size=5))
    # Names drawn from a tiny pool so that duplicates and empty names are common.
    names = st.sampled_from(["", "a", "b"]) | _text
    nodes = [
        OnnxNode(i, draw(names), draw(_text), draw(_text), draw(_ints),
                 draw(st.lists(_text, max_size=3)), draw(st.lists(_text, max_size=3)),
                 draw(st.none() | _text))
        for i in node_ids
    ]
    exprs = [
        RelaxExpr(i, draw(_text), draw(_text), draw(_text), draw(st.none() | _text),
                  draw(st.none() | _text), draw(_ints))
        for i in expr_ids
    ]
    kernels = [Kernel(k, draw(_text), draw(_text), draw(_text)) for k in kernel_names]
    # Sites may name a kernel that is not in `kernels` (the model does not forbid it).
    site_kernel = st.sampled_from(kernel_names) | _text if kernel_names else _text
    sites = [KernelSite(s, draw(site_kernel), draw(_text), draw(_ints)) for s in site_ids]
    # Links may dangle and may repeat: the store must preserve them verbatim.
    any_node = st.sampled_from(node_ids) | _text if node_ids else _text
    any_expr = st.sampled_from(expr_ids) | _text if expr_ids else _text
    any_site = st.sampled_from(site_ids) | _text if site_ids else _text
    node_exprs = draw(st.lists(st.tuples(any_node, any_expr, _roles_n), max_size=8))
    site_exprs = draw(st.lists(st.tuples(any_site, any_expr, _roles_s), max_size=8))
    meta = draw(st.dictionaries(_text.filter(lambda k: k != "schema_version"), _json,
                                max_size=4))
    return ProvenanceMap(meta, nodes, exprs, kernels, sites, node_exprs, site_exprs)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=provenance_maps())
def test_round_trip_property(m):
    with tempfile.TemporaryDirectory() as d:
        jp, sp = store.save(m, Path(d) / "m")
        assert store.load(jp).to_dict() == m.to_dict()
        assert store.load(sp).to_dict() == m.to_dict()
        # Both index classes agree on every key the map mentions (and on unknown ones).
        mem = map_index.MapIndex(m)
        with map_index.SqliteMapIndex(sp) as sql:
            keys = ({n.id for n in m.nodes} | {n.name for n in m.nodes}
                    | {t[0] for t in m.node_exprs} | {"zz-unknown"})
            for k in keys:
                assert sql.nodes(k) == mem.nodes(k)
                assert sql.kernels_for_node(k) == mem.kernels_for_node(k)
                assert sql.exprs_for_node(k) == mem.exprs_for_node(k)
            for k in {s.kernel for s in m.sites} | {k.name for k in m.kernels}:
                assert sql.nodes_for_kernel(k) == mem.nodes_for_kernel(k)
            for e in {e.id for e in m.exprs} | {t[1] for t in m.node_exprs + m.site_exprs}:
                assert sql.nodes_for_expr(e) == mem.nodes_for_expr(e)
                assert sql.kernels_for_expr(e) == mem.kernels_for_expr(e)
