"""`provmap bench STEP`: the named steps, their records (bench/out/STEP/HOST.json and .md) and
the tree of records itself (issue 53: at most one record per step per host)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from provmap.bench.records import (DEFAULT_ROOT, check_output, host_slug, record_stem,
                                   write_record)
from provmap.bench.startup import _PROBE
from provmap.bench.steps import STEPS, listing

ROOT = Path(__file__).resolve().parents[1]
BACKENDS = {"tvm", "onnxruntime", "openvino"}


def _probe(*args):
    r = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True,
                       timeout=120)
    heavy = [json.loads(ln[len("HEAVY="):]) for ln in r.stderr.splitlines()
             if ln.startswith("HEAVY=")]
    return r, heavy[-1] if heavy else None


def test_every_step_names_a_module_with_a_main():
    import importlib

    for name, step in STEPS.items():
        assert importlib.util.find_spec(f"provmap.bench.{step.module}"), name
    text = listing()
    assert all(f"  {name} " in text for name in STEPS)
    # the three steps of `provmap bench` itself are told apart by the option that selects them
    assert [n for n, s in STEPS.items() if s.module == "suite"] == [
        "latency", "user_latency", "hog_search"]


@pytest.mark.parametrize("name", sorted(STEPS))
def test_a_steps_option_mistake_is_one_line_before_any_backend(name, tmp_path):
    """`provmap bench STEP --nosuch` reaches STEP's own parser, which answers in one line with
    exit status 2, and no backend library is imported to say so (tuning_anchor imported TVM,
    and torch with it, before reading its command line)."""
    r, heavy = _probe("bench", name, "--nosuch")
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if not ln.startswith("HEAVY=")]
    # (a step with a required argument says that one first)
    assert len(lines) == 1 and ("--nosuch" in lines[0] or "required" in lines[0]), lines
    prog = "provmap bench" if STEPS[name].module == "suite" else f"provmap bench {name}"
    assert lines[0].startswith(f"{prog}: error: ") and "Traceback" not in r.stderr
    assert not set(heavy) & BACKENDS, heavy


def test_listing_the_steps_imports_no_backend_and_needs_no_output():
    r, heavy = _probe("bench", "--list-steps")
    assert r.returncode == 0 and "container" in r.stdout and heavy == []


def test_the_suites_steps_are_its_own_options():
    from provmap.cli.bench import step_args, suite_words

    assert suite_words(["bench", "latency", "bundled:x", "-o", "o"]) == [
        "bench", "bundled:x", "-o", "o"]
    assert suite_words(["-v", "bench", "user_latency", "bert_base", "-o", "o"]) == [
        "-v", "bench", "--user-models=bert_base", "-o", "o"]
    assert suite_words(["bench", "user_latency", "-o", "o"]) == [
        "bench", "--user-models", "-o", "o"]
    assert suite_words(["bench", "hog_search", "ends", "m.onnx"]) == [
        "bench", "--search-beside-hog=ends", "m.onnx"]
    assert suite_words(["bench", "hog_search", "m.onnx"]) == [
        "bench", "m.onnx", "--search-beside-hog"]
    assert suite_words(["compile", "bench", "latency"]) == ["compile", "bench", "latency"]
    assert step_args(["bench", "latency"]) is None and step_args(["bench", "m.onnx"]) is None
    a = step_args(["-v", "bench", "corpus", "--sample", "3"])
    assert (a.step, a.step_argv, a.verbose) == ("corpus", ["--sample", "3"], True)


def test_a_step_named_after_the_models_is_pointed_at(tmp_path):
    r, _ = _probe("bench", "-o", str(tmp_path), "corpus")
    assert r.returncode == 2 and "provmap bench corpus ..." in r.stderr
    r, _ = _probe("bench", "corpu", "-o", str(tmp_path))
    assert r.returncode == 2 and "or the step corpus?" in r.stderr


def test_host_slug_is_short_and_stable():
    avx512 = {"avx2", "avx512f", "avx512_bf16"}
    assert host_slug("AMD EPYC", avx512, 2) == "amd-epyc-avx512-2cpu"
    assert host_slug("AMD EPYC 7R13 48-Core Processor", {"avx2"}, 8) == "amd-epyc-7r13-avx2-8cpu"
    assert host_slug("Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz", avx512, 4) == \
        "intel-xeon-platinum-8375c-avx512-4cpu"
    assert host_slug("unknown-cpu", {"asimd"}, 4, "aarch64") == "aarch64-neon-4cpu"
    assert host_slug() == host_slug()  # this machine: the same name on every call


def test_record_paths_and_contents(tmp_path):
    slug = host_slug()
    assert record_stem("limit") == Path(DEFAULT_ROOT) / "limit" / slug
    assert record_stem("limit", tmp_path) == tmp_path / "limit" / slug
    assert record_stem("corpus", tmp_path / "c.json") == tmp_path / "c"  # the old -o FILE
    md = write_record("limit", tmp_path, {"record": "stale", "rows": [1]}, "# t\n\n| a |\n")
    assert md == tmp_path / "limit" / f"{slug}.md"
    data = json.loads(md.with_suffix(".json").read_text())
    assert list(data) == ["record", "rows"] and data["rows"] == [1]
    rec = data["record"]
    assert rec["step"] == "limit" and rec["host"] == slug and rec["cpus"] >= 1
    assert rec["written"].endswith("UTC") and "onnx" in rec["versions"]
    text = md.read_text()
    assert text.startswith("# t\n\n| a |\n") and f"`provmap bench limit` on {slug}" in text
    assert sorted(p.name for p in md.parent.iterdir()) == [f"{slug}.json", f"{slug}.md"]


def test_an_output_no_record_could_be_written_under_is_refused_first(tmp_path):
    from provmap.provenance.util.errors import ProvmapError

    (tmp_path / "f").write_text("")
    for bad, why in ((tmp_path / "f", "not a directory"),
                     (tmp_path / "no" / "root", "does not exist"),
                     (tmp_path / "no" / "c.json", "does not exist"),
                     (tmp_path, None)):
        if why is None:
            check_output(bad)
            continue
        with pytest.raises(ProvmapError, match=why):
            check_output(bad)
    r, _ = _probe("bench", "compile_scaling", "-o", str(tmp_path / "f"))
    assert r.returncode == 2 and "not a directory" in r.stderr and "Traceback" not in r.stderr


def test_bench_out_holds_at_most_one_record_per_step_and_host():
    """The tree keeps a step's latest run on each host; earlier runs are git history.  Every
    file under bench/out is OUT/<step>/<host>.json, .md or .png, of a registered step."""
    out = ROOT / DEFAULT_ROOT
    stray = []
    for f in sorted(p for p in out.rglob("*") if p.is_file()):
        rel = f.relative_to(out)
        if (len(rel.parts) != 2 or rel.parts[0] not in STEPS or not STEPS[rel.parts[0]].record
                or f.suffix not in (".json", ".md", ".png")):
            stray.append(str(rel))
    assert not stray, "not a record of a step (bench/records.py):\n" + "\n".join(stray)
