"""Fuzzing the artifact (issues 33 and 52): 500 deterministic mutations of a small ONNX Runtime
artifact, hashes recomputed each time: its documents (manifest.json, map.json, the schedule:
types swapped, fields dropped or added, sizes and depths blown up), its members (dropped,
added under hostile names, renamed, emptied, truncated, replaced by garbage; a weights member
large enough to be staged) and its counts (partitions and map entries repeated).  Reading
commands (inspect, inspect --json, lookup, explain) and `run` must each either succeed or
refuse in one deliberate `provmap: error:` line: no traceback, and never the CLI's fallback for
an exception nobody anticipated."""

from __future__ import annotations

import copy
import json
import os
import random

import pytest
from attack_kit import members, relu_artifact, repack

from provmap.cli.main import main

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
CASES = 500
SEED = int(os.environ.get("PROVMAP_FUZZ_SEED", "33"))  # fixed: the same cases every run

_VALUES = [None, True, False, 0, -1, 1.5, float("nan"), 2**63, 10**30, "", "x",
           "../../etc/passwd", "\x1b[31m", [], [1], [[[]]], {}, {"a": 1}, "p0", "onnxruntime",
           ["relu"], [None, 3], 1e308]


def _paths(doc, prefix=()):
    """Every (path) into a JSON document, containers included."""
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:6]):
            out += _paths(v, prefix + (i,))
    return out


def _get(doc, path):
    for k in path:
        doc = doc[k]
    return doc


def _mutate(rng: random.Random, doc):
    """One mutation of `doc` (in place where possible); returns the new document."""
    paths = [p for p in _paths(doc) if p]
    path = rng.choice(paths)
    parent, key = _get(doc, path[:-1]), path[-1]
    how = rng.random()
    if how < 0.55:
        parent[key] = copy.deepcopy(rng.choice(_VALUES))
    elif how < 0.7 and isinstance(parent, dict) and parent is not doc:
        del parent[key]
    elif how < 0.8:
        v = parent[key]
        nest = rng.choice([40, 300])
        for _ in range(nest):
            v = [v]
        parent[key] = v
    elif how < 0.9:
        v = parent[key]
        if isinstance(v, list) and v:
            parent[key] = v * rng.choice([2, 1000])
        elif isinstance(v, dict):
            v[rng.choice(["extra", "\x00", "../x", "id"])] = rng.choice(_VALUES)
        elif isinstance(v, str):
            parent[key] = v * rng.choice([2, 5000])
        elif isinstance(v, int) and not isinstance(v, bool):
            parent[key] = rng.choice([-v - 1, v * 10**9, 2**64])
        else:
            parent[key] = rng.choice(_VALUES)
    else:
        parent[key] = str(parent[key]) if not isinstance(parent[key], str) else 7
    return doc


_NAMES = ["partitions/p0/model.data", "partitions/p0/model.bin", "partitions/p9/lib.so",
          "map.sqlite", "../escape", "partitions/p0/\x1b[2J", "a" * 300, "source/model.onnx",
          "partitions/p0/model.onnx"]


def _mutate_members(rng: random.Random, files: dict) -> dict:
    """One change to the member set or a member's bytes (the manifest's hashes follow)."""
    name = rng.choice(sorted(files))
    how = rng.random()
    if how < 0.2:
        del files[name]
    elif how < 0.45:
        big = rng.random() < 0.2  # past staged.STAGE_MIN: a weights member kept on disk
        files[rng.choice(_NAMES)] = bytes(33 << 20) if big else rng.randbytes(rng.choice([0, 7,
                                                                                        4096]))
    elif how < 0.6:
        files[rng.choice(_NAMES)] = files.pop(name)
    elif how < 0.8:
        files[name] = files[name][:len(files[name]) // 2]
    else:
        files[name] = rng.choice([b"", b"\x00" * 64, b"{}", b"[]", rng.randbytes(256)])
    return files


def _repeat_counts(rng: random.Random, manifest: dict, files: dict) -> None:
    """Partitions or map entries repeated (duplicates, and sheer numbers)."""
    k = rng.choice([2, 50, 2000])
    if rng.random() < 0.5 and isinstance(manifest.get("partitions"), list):
        manifest["partitions"] = manifest["partitions"] * k
    else:
        doc = json.loads(files["map.json"])
        for key, v in doc.items():
            if isinstance(v, list) and v:
                doc[key] = v * k
                break
        files["map.json"] = json.dumps(doc).encode()


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return members(relu_artifact(tmp_path_factory.mktemp("fuzz")))


def test_mutated_documents_give_only_one_line_refusals_or_correct_runs(capsys, base, tmp_path):
    rng = random.Random(SEED)
    manifest0, files0 = base
    outcomes = {"ok": 0, "refused": 0}
    wrong = []
    for case in range(CASES):
        manifest, files = copy.deepcopy(manifest0), dict(files0)
        target = rng.choices(["manifest", "map", "schedule", "members", "counts"],
                             [6, 3, 1, 3, 1])[0]
        if target == "members":
            files = _mutate_members(rng, files)
        elif target == "counts":
            _repeat_counts(rng, manifest, files)
        elif target == "map":
            doc = _mutate(rng, {"m": json.loads(files["map.json"])})["m"]
            files["map.json"] = json.dumps(doc).encode()
        elif target == "schedule":
            manifest["format_version"] = 2
            manifest["schedule"] = {"stages": [["p0"]], "threads": {"p0": 1}, "why": "fuzz"}
            manifest["schedule"] = _mutate(rng, {"s": manifest["schedule"]})["s"]
        else:
            manifest = _mutate(rng, {"m": manifest})["m"]
        path = repack(tmp_path / f"c{case}.provmap", manifest, files)
        commands = [["inspect", path], ["inspect", path, "--json"],
                    ["lookup", path, "--onnx-node", "relu"], ["explain", path]]
        if case % 5 == 0:
            commands.append(["run", path, "--random"])
        for argv in commands:
            rc = main([str(a) for a in argv])
            err = capsys.readouterr().err
            errors = [ln for ln in err.splitlines() if ln.startswith("provmap: error:")]
            if rc == 0 and not errors:
                outcomes["ok"] += 1
            elif rc == 2 and len(errors) == 1 and "internal error" not in errors[0] \
                    and "Traceback" not in err:
                outcomes["refused"] += 1
            else:
                wrong.append(f"case {case} ({target}) {argv[0]}: rc {rc}: {err.strip()[:300]}")
        path.unlink()
    assert not wrong, f"{len(wrong)} bad outcome(s):\n" + "\n".join(wrong[:20])
    # the mutations reach past the schema, and the unmutated fields still work
    assert outcomes["ok"] > 50 and outcomes["refused"] > 200, outcomes
