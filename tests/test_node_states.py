"""One vocabulary of node states (issue 36, "Counts that disagree"): inspect (text and --json),
the placement table (JSON and SQLite) and annotate count the same nodes in the same states, on
the vendor walk-through's real export and on a bundled model, through the real CLI.

Before: on the export, inspect said 23 folded, placement 16 folded before import plus 22 at
import, a folded Constant was placed on OpenVINO with no kernel, and annotate said 31 nodes with
their backend while the partitions hold 21 op nodes."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import onnx
import pytest

from cli_runner import provmap as cli

EXPORT = Path(__file__).parent / "data" / "torchscript_attention_dynamic.onnx"
WORDS = {"ran": "ran on a backend", "folded_before_import": "folded before import",
         "folded_at_import": "folded at import", "elided": "elided by a pass",
         "not_compilable": "not compilable", "unmatched": "not in the compiled model"}
OV_ORT = ["--strategy", "greedy:openvino,onnxruntime", "--backend-option",
          "openvino.exclude_ops=Softmax"]
EXPORT_STATES = {"ran": 21, "folded_before_import": 23, "folded_at_import": 25}
CASES = {
    "export": ([EXPORT, "--input-shape", "x=2x5x16", *OV_ORT], EXPORT_STATES),
    # TVM's kernels map through Relax, not an ONNX region: the same states.
    "export-tvm": ([EXPORT, "--input-shape", "x=2x5x16", "--strategy", "greedy:tvm,onnxruntime"],
                   EXPORT_STATES),
    "bundled": (["bundled:transformer", *OV_ORT], {"ran": 33}),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def built(request, tmp_path_factory):
    d = tmp_path_factory.mktemp(f"states-{request.param}")
    model_args, want = CASES[request.param]
    r = cli("compile", *model_args, "-o", d / "a.provmap", "--embed-model")
    assert r.returncode == 0, r.stderr
    return d, want


def test_inspect_placement_and_annotate_count_the_same_states(built):
    d, want = built
    art = d / "a.provmap"
    r = cli("inspect", art, "--json", "--sqlite", d / "p.sqlite")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    table = info["placement"]
    rows = table["nodes"]
    assert table["version"] == 2 and set(table["states"]) == set(WORDS)
    counts = {s: sum(r["state"] == s for r in rows) for s in WORDS}
    assert table["states"] == counts and sum(counts.values()) == len(rows)
    assert {s: n for s, n in counts.items() if n} == want

    # The partitions' op nodes are exactly the nodes that ran; nothing else is placed.
    op_nodes = sum(1 for p in info["partitions"] for n in p["onnx_nodes"] if not n["helper"])
    assert op_nodes == counts["ran"]
    for row in rows:
        ran = row["state"] == "ran"
        assert bool(row["backends"]) == ran and bool(row["partitions"]) == ran
        assert bool(row["kernels"]) == ran and (row["reason"] is None) == ran
        assert not (ran and row["carried_by"])

    # inspect's text says the same numbers in the same words.
    text = cli("inspect", art)
    assert text.returncode == 0, text.stderr
    line = next(ln for ln in text.stdout.splitlines() if ln.startswith("  node states: "))
    said = {w: int(n) for n, w in re.findall(r"(\d+) ([a-z ]+?)(?:,|$)", line[15:])}
    assert said == {WORDS[s]: n for s, n in want.items()}

    # annotate: JSON summary, text line, and the metadata it wrote, all the same counts.
    r = cli("annotate", art, "-o", d / "ann.onnx", "--json")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["states"] == counts and summary["with_backend"] == counts["ran"]
    assert summary["with_reason"] == len(rows) - counts["ran"]
    got = [{p.key: p.value for p in n.metadata_props}.get("provmap.state")
           for n in onnx.load(d / "ann.onnx").graph.node]
    assert got == [r["state"] for r in rows]
    r = cli("annotate", art, "-o", d / "ann2.onnx")
    assert r.returncode == 0, r.stderr
    assert ", ".join(f"{n} {WORDS[s]}" for s, n in want.items()) in r.stdout

    # map-schema.md's query "every node OpenVINO runs" returns only nodes that ran there.
    con = sqlite3.connect(d / "p.sqlite")
    ov = con.execute("SELECT node, state, kernels FROM placement, json_each(placement.backends) "
                     "b WHERE b.value = 'openvino' ORDER BY idx").fetchall()
    assert all(state == "ran" and json.loads(k) for _, state, k in ov)
    assert len(ov) == sum(1 for r in rows if "openvino" in r["backends"])
    assert ov or "openvino" not in {p["backend"] for p in info["partitions"]}
    by_state = dict(con.execute("SELECT state, count(*) FROM placement GROUP BY state"))
    assert by_state == {s: n for s, n in counts.items() if n}


def test_a_folded_constant_names_the_partition_that_carries_it_not_a_backend(tmp_path):
    """The export's /Constant_2 (a Reshape's shape) was listed under backends ["openvino"] with
    no kernel: it runs nowhere, and p0 carries its value."""
    art = tmp_path / "a.provmap"
    r = cli("compile", EXPORT, "-o", art, "--strategy", "greedy:openvino,onnxruntime",
            "--backend-option", "openvino.exclude_ops=Softmax", "--input-shape", "x=2x5x16",
            "--embed-model")
    assert r.returncode == 0, r.stderr
    rows = {r["node"]: r for r in json.loads(cli("inspect", art, "--json").stdout)
            ["placement"]["nodes"]}
    c = rows["/Constant_2"]
    assert (c["state"], c["backends"], c["partitions"], c["carried_by"]) == \
        ("folded_at_import", [], [], ["p0"])
    m = rows["/Mul"]  # folded by onnx.reference; its value is in p0's Reshape shapes
    assert (m["state"], m["backends"], m["carried_by"]) == ("folded_before_import", [], ["p0"])
