"""`provmap bench`: the suite's outputs on a real (small) run, the scaling fit, and bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from provmap.bench import scaling
from provmap.bench.report import markdown


def _provmap(*args, timeout=900):
    return subprocess.run([sys.executable, "-c", "from provmap.cli.main import main; "
                           "raise SystemExit(main())", *args],
                          capture_output=True, text=True, timeout=timeout)


def test_synthetic_model_size_and_validity():
    import onnx

    m = scaling.synthetic_model(1000)
    assert len(m.graph.node) == 1000
    onnx.checker.check_model(m)


def test_fit_growth_recovers_exponents():
    pts = [{"nodes": n, "tag_s": 2e-5 * n, "search_s": 1e-7 * n ** 2, "map_write_s": 0.0}
           for n in (100, 1000, 10000)]
    fit = scaling.fit_growth(pts)
    assert fit["tag"]["exponent"] == pytest.approx(1.0, abs=1e-6)
    assert fit["search"]["exponent"] == pytest.approx(2.0, abs=1e-6)
    assert fit["search"]["coef_s"] == pytest.approx(1e-7, rel=1e-6)
    assert "map_write" not in fit  # no positive times: nothing to fit


def test_scaling_point_times_every_stage():
    row = scaling.time_size(200)
    assert row["nodes"] == 200 and row["bindings"] >= 200
    for stage in scaling.STAGES:
        assert row[f"{stage}_s"] > 0
    assert row["candidates_after_pruning"] <= row["candidates"]
    # Synthetic prices make both backends win some ops: the cover is mixed, not one partition.
    assert row["partitions"] > 1


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    r = _provmap("bench", "bundled:transformer", "-o", str(out), "--strategies",
                 "single:onnxruntime;single:openvino;single:onnxruntime[threads=1];"
                 "single:openvino[threads=1];greedy:openvino,onnxruntime;"
                 "collage:onnxruntime,openvino", "--repeats", "6", "--scaling-sizes", "100,300",
                 "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    return _stem("latency", out), json.loads(r.stdout), r.stderr


def _stem(step, out):
    """STEP's record under the root OUT, without suffix (bench/records.py names it)."""
    from provmap.bench.records import record_stem

    return record_stem(step, out)


def test_bench_results_json(small_run):
    out, res, _ = small_run
    on_disk = json.loads(out.with_suffix(".json").read_text())
    assert on_disk["rows"] == res["rows"]
    # the record says which step, host and versions it is, whatever the step's own keys
    from provmap.bench.records import host_slug

    assert on_disk["record"]["step"] == "latency" and on_disk["record"]["host"] == host_slug()
    assert out.name == host_slug() and out.parent.name == "latency"
    assert on_disk["record"]["versions"]["onnxruntime"] and on_disk["record"]["written"]
    assert res["schema"] == "provmap.bench/1"
    for k in ("tvm", "onnxruntime", "openvino"):
        assert res["versions"][k]
    assert res["host"]["cpus"] >= 1 and res["host"]["machine"]
    rows = {r["strategy"]: r for r in res["rows"]}
    assert set(rows) == {"single:onnxruntime", "single:openvino", "single:onnxruntime[threads=1]",
                         "single:openvino[threads=1]", "greedy:openvino,onnxruntime",
                         "collage:onnxruntime,openvino"}
    for r in rows.values():
        assert r["model"] == "transformer"
        assert 0 < r["min_ms"] <= r["median_ms"] <= r["p90_ms"]
        assert r["max_abs_err_vs_ort"] < 1e-4
        # a row far slower than the fastest in its warm-up (contention can do that to a
        # default-threads row beside a one-thread one) is measured once, marked capped
        assert r["capped"] or len(r["pass_medians_ms"]) == res["options"]["passes"] == 3
    # Greedy puts the whole block on OpenVINO: the very plan of single:openvino, measured once.
    assert rows["greedy:openvino,onnxruntime"]["same_plan_as"] == "single:openvino"
    for r in rows.values():
        if r["same_plan_as"]:
            twin = rows[r["same_plan_as"]]
            assert r["partitions"] == 1 and r["backends"] == twin["backends"]
            assert (r["median_ms"], r["min_ms"]) == (twin["median_ms"], twin["min_ms"])
    best = rows[rows["collage:onnxruntime,openvino"]["best_single"]]
    assert best["ratio_to_best_single"] == pytest.approx(1.0)
    # best single = the fastest configuration of one library, thread variants included
    # (issue 35); the best default backend is recorded beside it
    singles = [r["median_ms"] for s, r in rows.items() if s.startswith("single:")]
    assert best["median_ms"] == min(singles)
    defaults = {s: r["median_ms"] for s, r in rows.items()
                if s.startswith("single:") and "[" not in s}
    assert rows["collage:onnxruntime,openvino"]["best_default_single"] == min(defaults,
                                                                             key=defaults.get)
    assert min(r["ratio_min_to_best_single"] for s, r in rows.items()
               if s.startswith("single:")) == pytest.approx(1.0)


def test_bench_search_cold_then_warm(small_run):
    _, res, _ = small_run
    (s,) = res["search"]
    assert s["cache"] == "fresh (cold)"
    assert s["measured"] > 0 and s["after_pruning"] <= s["candidates"]
    assert s["warm_measured"] == 0 and s["warm_cache_hits"] > 0
    assert s["kept"].startswith("collage")
    # the first compile's command again: the kept plan from the cost cache, the same plan
    assert s["warm_e2e_plan_reused"] is True and s["warm_e2e_same_plan"] is True
    assert s["warm_e2e_s"] > 0


def test_bench_artifacts_container_provenance(small_run):
    _, res, _ = small_run
    assert {a["strategy"] for a in res["artifacts"]} == {r["strategy"] for r in res["rows"]}
    for a in res["artifacts"]:
        assert a["artifact_bytes"] > 0 and a["load_ms"] > 0
        assert 0 < a["lookup_us_p50"] <= a["lookup_us_p99"]
    assert {c["backend"] for c in res["container"]} == {"onnxruntime", "openvino"}
    for c in res["container"]:
        assert c["overhead"] == pytest.approx(c["container_ms"] / c["direct_ms"] - 1)
        # paired blocks of the two alone: a ratio per pass, their median, and by minimum
        assert c["paired_passes"] == 8
        assert -0.9 < c["paired_overhead"] < 10 and -0.9 < c["paired_overhead_min"] < 10
    (p,) = res["provenance"]
    assert p["plain_s"] > 0 and p["tracked_s"] > 0
    assert p["ratio"] == pytest.approx(p["tracked_s"] / p["plain_s"])
    assert [pt["nodes"] for pt in res["scaling"]["points"]] == [100, 300]
    assert set(res["scaling"]["fit"]) >= {"tag", "candidates", "search"}


def test_bench_markdown_and_chart(small_run):
    out, res, _ = small_run
    md = out.with_suffix(".md").read_text()
    assert md.startswith(markdown(res)) and "Record of `provmap bench latency` on " in md
    for r in res["rows"]:
        assert f"| {r['model']} | {r['strategy']} |" in md
    png = out.with_suffix(".png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image as mpimg

    img = mpimg.imread(out.with_suffix(".png"))
    assert img.shape[0] > 100 and img.shape[1] > 100
    assert np.std(img) > 0  # not a blank canvas
    assert not list(out.parent.glob(".*tmp*"))  # written atomically, no leftovers


def test_bench_rows_record_the_load_and_the_limit(small_run):
    out, res, _ = small_run
    for r in res["rows"]:  # every row: the latency run's load, and whether it is noisy
        assert set(r["load"]) - {"parallelism"} == {"load1", "others_cores", "steal_share",
                                                       "cores"}
        gauge = r["load"].get("parallelism")  # the gauge's probes, where it could pin a CPU
        assert gauge is None or gauge["probes"] >= gauge["uneven"] >= 0
        assert r["load"]["cores"] >= 1 and r["load"]["others_cores"] >= 0
        assert isinstance(r["noisy"], bool) and (r["noisy"] == bool(r["noisy_why"]))
    (h,) = res["headroom"]
    # the oracle over the searched backends and their one-thread variants
    assert set(h["profiled"]) == {"onnxruntime", "openvino", "onnxruntime[threads=1]",
                                  "openvino[threads=1]"}
    # the wholes are the latency run's medians (it measured every configuration), so a
    # bound: never above a measured single configuration nor the measured kept plan
    rows = {r["strategy"]: r for r in res["rows"]}
    assert h["wholes_from"] == "measured wholes"
    assert h["wholes"] == {b: rows[f"single:{b}"]["median_ms"] for b in h["profiled"]}
    assert all(v > 0 for v in h["profiled"].values())
    assert 0 < h["oracle_ms"] <= min(min(h["wholes"].values()), h["kept_ms"])
    assert set(h["attributed"]) == set(h["profiled"])  # no backend left out
    # saved compactly enough to recompute the calibrated bound offline
    from provmap.workbench.headroom import calibrated_oracle, saved_oracle

    assert set(h["calibrated_nodes"]) == set(h["scales"]) == set(h["profiled"])
    assert saved_oracle(h["calibrated_nodes"], h["units"]) == pytest.approx(h["calibrated_ms"],
                                                                           abs=1e-3)
    # fused groups priced whole: never below the per-node sum
    assert h["calibrated_ms"] >= calibrated_oracle(h["calibrated_nodes"])[0] - 1e-3
    kept = rows["collage:onnxruntime,openvino"]
    # one source: best single, kept and the bound all from the latency run
    assert h["best_single_ms"] == min(h["wholes"].values())
    assert h["best_single"] == "single:" + min(h["wholes"], key=h["wholes"].get)
    assert h["kept_ms"] == kept["median_ms"]
    assert h["kept_ms"] > 0
    if h["best_single_ms"] > h["oracle_ms"]:
        assert h["captured"] == pytest.approx((h["best_single_ms"] - h["kept_ms"])
                                              / (h["best_single_ms"] - h["oracle_ms"]))
    assert kept["oracle_ms"] == h["oracle_ms"] and kept["headroom_captured"] == h["captured"]
    md = out.with_suffix(".md").read_text()
    assert "| load |" in md and "The limit: the oracle (each ONNX node, or group" in md
    assert "| verdict |" in md and ("no room (<5%)" in md or "| room " in md)
    assert f"| {h['model']} | {h['best_single']} |" in md
    # the oracle's own plans, built and measured beside the best single, each alone
    plans = h["oracle_plans"]
    if h["headroom_share"]:
        assert plans is not None and "tried" in plans
        for r in plans["tried"]:
            assert r["partitions"] >= 1 and r["predicted_vs_best"] < 0
            assert "failed" in r or (r["measured_ms"] > 0 and "vs_best_min" in r)
        if plans["tried"]:
            assert "The oracle's own plans, built and measured" in md
        if plans.get("priced"):               # the limit again, each cut at its measured price
            p = plans["priced"]
            assert p["kappa_ms"] >= 0 and p["priced_ms"] <= p["whole_ms"] + 1e-9
            assert "The limit with cuts priced" in md


def test_a_contended_window_or_a_wide_spread_marks_a_row_noisy():
    from provmap.bench.limits import row_load
    from provmap.partition.measure.contention import judge

    quiet = judge(2, 0.8, 0.05, 0.0, seconds=5.0)
    assert row_load(quiet, {"spread": 0.1})["noisy"] is False
    busy = row_load(judge(2, 0.8, 1.1, 0.0, seconds=5.0), {"spread": 0.1})
    assert busy["noisy"] and "other processes used 1.10 of 2 CPUs" in busy["noisy_why"]
    wide = row_load(quiet, {"spread": 0.8})
    assert wide["noisy"] and "samples spread 0.80" in wide["noisy_why"]
    assert markdown_load({"load": busy["load"], "noisy": True}) == "1.1/2 **noisy**"


def markdown_load(row):
    from provmap.bench.report import _load

    return _load(row)


def test_bench_progress_on_stderr(small_run):
    _, _, err = small_run
    assert "[transformer] search collage" in err and "scaling:" in err


def test_bench_bad_inputs():
    r = _provmap("bench", "no/such/model.onnx", "-o", "/tmp/provmap-bench-never")
    assert r.returncode == 2 and "no/such/model.onnx" in r.stderr
    r = _provmap("bench", "bundled:transformer", "-o", "/tmp/provmap-bench-never",
                 "--strategies", "single:nosuchbackend")
    assert r.returncode == 2 and "nosuchbackend" in r.stderr


def test_bench_model_latency_step_with_a_direct_call_and_a_same_plan(tmp_path):
    """bench_model's latency step on its own (a one-Relu model, one backend): the interleaved
    alternatives (`fns`, with the library called directly) are measured and freed, and a
    strategy that kept the single plan is measured once.  pyflakes read `fns` there as
    undefined; this path runs it, cheaply, without the small_run fixture's search."""
    import onnx
    from onnx import TensorProto, helper

    from provmap.bench.suite import SuiteOptions, bench_model

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              tmp_path / "relu.onnx")
    opts = SuiteOptions(models=[], strategies=["single:onnxruntime", "greedy:onnxruntime"],
                        backends=["onnxruntime"], repeats=2, passes=1, quick=True,
                        provenance_repeats=0, headroom_repeats=0)
    said = []
    out = bench_model(str(tmp_path / "relu.onnx"), opts, said.append)
    rows = {r["strategy"]: r for r in out["rows"]}
    assert set(rows) == {"single:onnxruntime", "greedy:onnxruntime"}
    assert rows["greedy:onnxruntime"]["same_plan_as"] == "single:onnxruntime"
    assert rows["greedy:onnxruntime"]["median_ms"] == rows["single:onnxruntime"]["median_ms"]
    assert all(r["max_abs_err_vs_ort"] == 0 and "load" in r for r in rows.values())
    (c,) = out["container"]
    assert c["backend"] == "onnxruntime" and c["direct_ms"] > 0 and c["container_ms"] > 0
    assert c["paired_passes"] == 8 and c["paired_overhead"] is not None
    assert any("latency: 2 alternatives" in m for m in said), said  # single + direct


def test_readme_tables_between_markers(small_run, tmp_path):
    from provmap.bench.report import END, START, update_readme

    out, res, _ = small_run
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nbefore\n{START}\nold table\n{END}\nafter\n")
    update_readme(readme, res, "bench/out/latency/h")
    text = readme.read_text()
    assert text.startswith("# x\n\nbefore\n") and text.endswith("\nafter\n")
    assert "old table" not in text and markdown(res) in text
    assert "(bench/out/latency/h.png)" in text and "from bench/out/latency/h.json;" in text
    readme.write_text("no markers")
    r = _provmap("bench", "bundled:transformer", "-o", str(tmp_path / "o"), "--readme",
                 str(readme))
    assert r.returncode == 2 and "markers" in r.stderr


def test_report_rerenders_tables_into_a_docs_file_with_links_from_its_folder(small_run, tmp_path):
    """`provmap bench report RECORD.json docs/results.md` links the record from docs/, as
    `provmap bench --readme` does (the tables left README for docs/results.md); the record's
    JSON is left as measured, its .md and .png rendered again beside it."""
    import shutil

    from provmap.bench import report

    out, res, _ = small_run
    rec = tmp_path / "bench" / "out" / "latency" / "h.json"
    rec.parent.mkdir(parents=True)
    shutil.copy(out.with_suffix(".json"), rec)
    (tmp_path / "docs").mkdir()
    doc = tmp_path / "docs" / "results.md"
    doc.write_text(f"# results\n{report.START}\nthe previous tables\n{report.END}\n")
    assert _provmap("bench", "report", str(rec), str(doc)).returncode == 0
    text = doc.read_text()
    assert "](../bench/out/latency/h.png)" in text and "the previous tables" not in text
    assert markdown(res) in text
    assert rec.read_bytes() == out.with_suffix(".json").read_bytes()
    assert rec.with_suffix(".md").read_text() == out.with_suffix(".md").read_text()
    assert rec.with_suffix(".png").is_file()


def test_compile_scaling_times_every_stage_and_fits_both_series():
    from provmap.bench import compile_scaling

    res = compile_scaling.run([40, 80], [1, 2])
    for name in ("chain", "decoder"):
        pts = res["series"][name]["points"]
        assert [p["nodes"] for p in pts] == sorted(p["nodes"] for p in pts)
        assert all(p[f"{s}_s"] > 0 for p in pts for s in compile_scaling.STAGES)
        assert all(p["kernels"] > 0 for p in pts)
        assert "total" in res["series"][name]["fit"]
    assert res["series"]["chain"]["points"][0]["nodes"] == 40
    assert "| chain" in compile_scaling.markdown(res)


def test_startup_bench_reports_every_command_without_backend_libraries():
    from provmap.bench import startup

    res = startup.run(runs=1, large="bundled:squeezenet")
    assert [r["command"].split()[1] for r in res["rows"]] == [
        c[0] for c in startup.COMMANDS + startup.LARGE_COMMANDS]
    assert "SQUEEZENET(5 MB)" in res["rows"][-1]["command"]
    for r in res["rows"]:
        assert r["exit"] == [0], r
        assert r["backend_modules"] == [], r
        assert r["median_s"] > 0
    assert "| `provmap --help` |" in startup.markdown(res)


def test_bench_gains_from_the_same_run(small_run):
    """The honest baseline: both gains come from this run's rows, by minimum and by median."""
    out, res, _ = small_run
    (g,) = res["gains"]
    rows = {r["strategy"]: r for r in res["rows"]}
    singles = {s: r for s, r in rows.items() if s.startswith("single:")}
    assert set(g["configurations"]) == set(singles)  # thread variants are in the baseline
    kept = rows["collage:onnxruntime,openvino"]
    for by, key in (("median", "median_ms"), ("min", "min_ms")):
        best = min(singles.values(), key=lambda r: r[key])
        assert g[f"best_config_{by}"] == best["strategy"]
        assert g[f"best_config_{by}_ms"] == best[key]
        lib = best["strategy"].split(":")[1].split("[")[0]
        assert g[f"variant_gain_{by}"] == pytest.approx(1 - best[key] / rows[f"single:{lib}"][key])
        assert g[f"partitioning_gain_{by}"] == pytest.approx(1 - kept[key] / best[key])
        # measured again in a pair of its own (0 without a run when it is that very plan)
        assert isinstance(g[f"confirmed_gain_{by}"], float), g
        dflt = min((r for s, r in singles.items() if "[" not in s), key=lambda r: r[key])
        assert g[f"best_default_{by}"] == dflt["strategy"]
    assert g["load"] == kept["load"]
    # the limit is never above a measured single configuration of this run either
    assert g["limit_ms"] <= min(r["min_ms"] for r in singles.values())
    md = out.with_suffix(".md").read_text()
    assert md.index("| model | best default single | best single configuration | kept plan |"
                    " variant gain | partitioning gain |") < md.index("| model | strategy |")


def test_the_limit_alone_in_one_command(tmp_path):
    """`provmap bench limit`: the limit rows without a search, as the limit step's record
    (JSON and markdown, dated with the host); bad input is one line."""
    out = tmp_path / "lim"
    r = _provmap("bench", "limit", "bundled:squeezenet", "-o", str(out), "--repeats", "2",
                 timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(_stem("limit", out).with_suffix(".md"))
    res = json.loads(_stem("limit", out).with_suffix(".json").read_text())
    (row,) = res["limits"]
    assert row["model"] == "squeezenet" and res["host"]["cpus"] and res["date"]
    assert row["oracle_ms"] <= row["best_single_ms"] + 1e-9
    md = _stem("limit", out).with_suffix(".md").read_text()
    assert "| squeezenet | single:" in md and "The unpriced limit" in md
    p = (row.get("oracle_plans") or {}).get("priced")
    if p:                                          # room unpriced: priced, then tightened
        assert "The limit with cuts priced" in md and p["priced_ms"] <= p["whole_ms"] + 1e-9
    r = subprocess.run([sys.executable, "-m", "provmap.bench.limit_run", "no/such.onnx",
                        "-o", str(tmp_path / "x")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "no/such.onnx" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "x").exists()


def test_the_container_overhead_alone_in_one_command(tmp_path):
    """`python -m provmap.bench.container_run`: single:<b> against the library called directly,
    in paired blocks, for both libraries, without a search."""
    import json

    import onnx

    from provmap.bench import container_run
    from small_models import conv_relu

    model = tmp_path / "m.onnx"
    onnx.save(conv_relu(), model)
    out = tmp_path / "c"
    assert container_run.main([str(model), "--passes", "2", "-o", str(out)]) == 0
    res = json.loads(_stem("container", out).with_suffix(".json").read_text())
    assert [r["backend"] for r in res["rows"]] == ["onnxruntime", "openvino"]
    for r in res["rows"]:
        # rounds of 2 while the 2% bound is undecided, at most 4 (the A/A pair: one round)
        assert r["paired_passes"] in (2, 4, 6, 8) and r["paired_rounds"] == r["paired_passes"] // 2
        assert r["library_min_ms"] > 0 and r["container_min_ms"] > 0
        assert r["paired_overhead_min"] == pytest.approx(
            r["container_min_ms"] / r["library_min_ms"] - 1)
        # the noise floor (the library against itself) and the executor alone, measured too
        assert r["aa_paired_passes"] == 2 and r["aa_library_min_ms"] > 0
        assert r["executor_calls"] == 200 and r["executor_ms"] >= 0  # measured inside calls
        assert 0 <= r["executor_share"] < 1
        assert container_run.within(r) in ("yes", "no: the executor", "n/a (<1 ms)",
                                           "no: slower", "undecided")
    # the verdict on the interval (of the blocks' minimums: the one statistic)
    row = {"library_min_ms": 5.0, "executor_share": 0.005, "paired_interval_min": [0.0, 0.02]}
    assert container_run.within(row) == "yes"
    assert container_run.within({**row, "paired_interval_min": [0.01, 0.03]}) == "undecided"
    assert container_run.within({**row, "paired_interval_min": [0.021, 0.05]}) == "no: slower"
    assert container_run.within({**row, "executor_share": 0.03}) == "no: the executor"
    assert container_run.within({**row, "library_min_ms": 0.5}) == "n/a (<1 ms)"
    assert "| onnxruntime |" in _stem("container", out).with_suffix(".md").read_text()
    # only the pairs a shorter run left undecided; a backend it does not know is one line
    one = tmp_path / "one"
    assert container_run.main([str(model), "--passes", "1",
                               "--backends", "openvino", "-o", str(one)]) == 0
    res = json.loads(_stem("container", one).with_suffix(".json").read_text())
    assert [r["backend"] for r in res["rows"]] == ["openvino"]
    assert container_run.main([str(model), "--backends", "tvm", "-o",
                               str(tmp_path / "bad")]) != 0
    assert not (tmp_path / "bad").exists()


def test_a_users_compile_beside_a_hog_in_one_command(tmp_path, monkeypatch):
    """`python -m provmap.bench.hog_compile`: the user's own command beside a load that
    outlasts it; what they get is recorded as they get it (a refusal: non-zero, nothing
    written, the one line; else the artifact's strategy)."""
    import json

    import onnx

    from provmap.bench import hog_compile
    from small_models import conv_relu

    model = tmp_path / "m.onnx"
    onnx.save(conv_relu(), model)
    monkeypatch.setenv("PROVMAP_CONTENTION", "act")  # the subprocess's: conftest turns it off
    out = tmp_path / "h"
    assert hog_compile.main([str(model), "--quiet-wait", "1", "-o", str(out)]) == 0
    (row,) = json.loads(_stem("hog_compile", out).with_suffix(".json").read_text())["rows"]
    assert row["model"] == "m" and row["seconds"] > 0 and row["accept_contended"] is False
    if row["written"]:
        assert row["exit"] == 0 and row["strategy"].startswith("collage")
    else:
        assert row["exit"] != 0 and "no artifact written" in row["last_line"]
        assert "--accept-contended" in row["last_line"]
    assert "| m | no |" in _stem("hog_compile", out).with_suffix(".md").read_text()
    assert hog_compile.main([str(model), "--quiet-wait", "-1", "-o", str(tmp_path / "x")]) != 0


def test_memory_scaling_reports_peak_over_weights_and_fits_the_growth():
    """bench/memory_scaling.py on a record (no process run): the table's ratio is peak over
    weight bytes, and the fit recovers a linear growth of (peak - idle)."""
    from provmap.bench import memory_scaling as ms

    points = [{"model": n, "params": w // 4, "weight_bytes": w,
               "idle": {"s": 1.0, "peak_mb": 100, "peak_anon_mb": 50, "rc": 0},
               "map": {"s": 2.0, "peak_mb": 100 + 2 * w // 2 ** 20, "peak_anon_mb": 60, "rc": 0}}
              for n, w in (("a", 2 ** 28), ("b", 2 ** 30))]
    fit = ms.fit(points, "map")
    assert fit["exponent"] == pytest.approx(1.0, abs=1e-6)
    text = ms.markdown({"date": "d", "host": "h", "steps": ["idle", "map"], "points": points,
                        "fit": {"map": fit}})
    assert "(2.4x w; anon 0.2x)" in text and "(2.1x w; anon 0.1x)" in text


def test_memory_scaling_judges_a_loaded_artifact_against_the_librarys_own_session_in_passes(
        monkeypatch):
    """The 1.3x line of issue 51: `run_ort` over `ort_session` in peak RSS and time, in paired
    passes whose order alternates, judged on the interval of the per-pass ratio (one pairing
    once read x1.31 where five read x1.05); a failing step ends the passes with its error."""
    from provmap.bench import memory_scaling as ms

    calls = []
    times = {"own": iter([2.0, 2.1, 1.9, 2.0, 2.2, 2.0]),
             "ours": iter([2.2, 2.2, 2.0, 2.3, 2.3, 2.1]), "slow": iter([3.0] * 6)}

    def fake(argv, cwd):
        calls.append(argv[0])
        if argv[0] == "bad":
            return {"s": 1.0, "peak_mb": 10, "rc": 1, "error": "no such artifact"}
        return {"s": next(times[argv[0]]), "peak_mb": 1200 if argv[0] != "own" else 1000,
                "rc": 0}

    monkeypatch.setattr(ms, "measure", fake)
    ok = ms.paired(["ours"], [["own"]], ".", 6, ms.OWN["run_ort"])
    assert calls[:4] == ["ours", "own", "own", "ours"]  # the order alternates
    assert ok["verdict"] == "within" and ok["memory"]["median"] == pytest.approx(1.2)
    assert 1.0 < ok["time"]["low"] <= ok["time"]["median"] <= ok["time"]["high"] < 1.3
    times["own"] = iter([2.0] * 7)
    slow = ms.paired(["slow"], [["own"]], ".", 6, ms.OWN["run_ort"])
    assert slow["verdict"] == "slower"
    failed = ms.paired(["bad"], [["own"]], ".", 6, ms.OWN["run_ort"])
    assert failed == {"error": "no such artifact", "passes": 0}
    # undecided at 6 passes (up to x1.4): a round of 6 more, pooled, decides it (sequential)
    times["own"] = iter([2.0] * 12)
    times["ours"] = iter([2.8, 2.2] + [2.0] * 10)
    again = ms.paired(["ours"], [["own"]], ".", 6, ms.OWN["run_ort"], max_passes=24)
    assert again["passes"] == 12 and again["verdict"] == "within"
    # a compile against the library's own session plus map: their times add up, 2x in time
    # is its bound, memory is not (held to the weights instead)
    calls.clear()
    times.update(own=iter([2.0] * 6), map=iter([1.0] * 6), ours=iter([5.5] * 6))
    comp = ms.paired(["ours"], [["own"], ["map"]], ".", 6, ms.OWN["compile_ov"])
    assert calls[:6] == ["ours", "own", "map", "own", "map", "ours"]
    assert comp["time"]["median"] == pytest.approx(5.5 / 3, rel=1e-4) and comp["verdict"] == "within"
    assert comp["bounds"] == {"time": 2.0}
    times.update(own=iter([2.0] * 6), map=iter([1.0] * 6), ours=iter([6.5] * 6))
    assert ms.paired(["ours"], [["own"], ["map"]], ".", 6,
                     ms.OWN["compile_ov"])["verdict"] == "slower"

    def step(s, mb):
        return {"s": s, "peak_mb": mb, "peak_anon_mb": mb, "rc": 0}

    points = [{"model": n, "params": 1, "weight_bytes": 2 ** 30, "idle": step(1.0, 100),
               "ort_session": step(2.0, 1000), "run_ort": step(2.2, 1200),
               "paired": {"run_ort": r}} for n, r in (("a", ok), ("b", slow), ("c", failed))]
    text = ms.markdown({"date": "d", "host": "h", "steps": ["idle", "ort_session", "run_ort"],
                        "points": points, "fit": {}})
    t = ok["time"]
    assert (f"| a | memory x1.20, time x{t['median']:.2f} [{t['low']:.2f}, {t['high']:.2f}], "
            "6 passes: within |") in text
    assert "| b | memory x1.20, time x1.50 [1.50, 1.50], 6 passes: **slower** |" in text
    assert "| c | failed after 0 passes: no such artifact |" in text
    points[0]["paired"]["compile_ort"] = comp
    points[0]["compile_ort"], points[0]["map"] = step(5.5, 1500), step(1.0, 1100)
    text = ms.markdown({"date": "d", "host": "h",
                        "steps": ["idle", "ort_session", "run_ort", "map", "compile_ort"],
                        "points": points, "fit": {}})
    assert "| model | run_ort / ort_session | compile_ort / ort_session + map |" in text
    assert f"time x{5.5 / 3:.2f} [1.83, 1.83], 6 passes: within |" in text

def test_parallelism_summary_judges_windows_by_the_gauges_own_rule():
    """`provmap bench parallelism`: probes every 0.1 s; a 10 s window where half the probes
    found one CPU 1.5x slower is contended by the gauge's rule, an even one is not, and the
    percentiles are the one helper's (runtime_module.backend.percentile)."""
    from provmap.bench import parallelism as bp

    even = [(i * 0.1, 1.05) for i in range(100)]
    uneven = [(10 + i * 0.1, 1.5 if i % 2 else 1.05) for i in range(100)]
    res = bp.summary(even + uneven, 10.0)
    assert res["probes"] == 200 and res["uneven_share"] == 0.25
    assert res["ratio"]["p50"] == 1.05 and res["ratio"]["max"] == 1.5
    tens = res["windows_10s"]
    assert tens["windows"] == 2 and tens["contended"] == 1 and tens["share_max"] == 0.5
    assert "| 10" in bp.markdown(res) or "10 s" in bp.markdown(res)


def test_bench_report_merges_runs_of_one_step_and_host_into_one_record():
    """A long latency run split by model is still one record (README cites one): the rows
    joined, each run's start, duration and models kept, one result per model (the latest
    run's); runs with other versions refused."""
    from provmap.bench.record_docs import merge
    from provmap.provenance.util.errors import ProvmapError

    def run(model, started, openvino="2026.4.1"):
        rec = {"host": "h", "versions": {"openvino": openvino}}
        return {"record": rec, "started": started, "duration_s": 600.0,
                "options": {"models": [f"/m/{model}.onnx"], "repeats": 30},
                "rows": [{"model": model}], "search": [{"model": model}], "gains": [],
                "headroom": None}

    m = merge([run("a", "t1"), run("b", "t2")], ["a.json", "b.json"])
    assert [r["model"] for r in m["rows"]] == ["a", "b"] and m["duration_s"] == 1200.0
    assert [r["started"] for r in m["runs"]] == ["t1", "t2"] and m["options"]["repeats"] == 30
    assert m["options"]["models"] == ["/m/a.onnx", "/m/b.onnx"] and m["headroom"] is None
    again = merge([m, run("c", "t3")], ["m.json", "c.json"])  # a merged record merges on
    assert [r["started"] for r in again["runs"]] == ["t1", "t2", "t3"]
    # a model run again: its new run's entries replace the old ones, and a run left answering
    # for no model leaves the record (its time too); a model a run never reached is not in it
    redo = run("a", "t4")
    redo["rows"] = [{"model": "a", "strategy": "x"}, {"model": "a", "strategy": "y"}]
    redo["options"]["models"].append("/m/never.onnx")
    redo["record"]["written"] = "t4 UTC"
    latest = merge([again, redo], ["again.json", "a.json"])
    assert [(r["model"], r.get("strategy")) for r in latest["rows"]] == [
        ("b", None), ("c", None), ("a", "x"), ("a", "y")]
    assert [r["model"] for r in latest["search"]] == ["b", "c", "a"]
    assert [(r["started"], r["models"]) for r in latest["runs"]] == [
        ("t2", ["/m/b.onnx"]), ("t3", ["/m/c.onnx"]), ("t4", ["/m/a.onnx"])]
    assert latest["duration_s"] == 1800.0 and latest["record"]["written"] == "t4 UTC"
    assert latest["options"]["models"] == ["/m/b.onnx", "/m/c.onnx", "/m/a.onnx"]
    with pytest.raises(ProvmapError, match="c.json: record.versions"):
        merge([m, run("c", "t3", openvino="2025.1")], ["m.json", "c.json"])


def test_the_search_table_splits_a_compile_into_search_wait_for_quiet_and_the_rest():
    """Issue 51's 10-minute item is about provmap's work: the phases' waits for quiet (the
    record's conditions) are a column of their own, and the rest is what is left of the
    compile; a row from before the conditions were recorded waited 0."""
    from provmap.bench.search_table import search_tables, waited_s

    row = {"model": "m", "strategy": "collage:onnxruntime,openvino", "cache": "fresh (cold)",
           "first_s": 1151.6, "first_search_only_s": 222.9, "candidates": 10,
           "after_pruning": 9, "measured": 8, "cache_hits": 1, "invalid": 0, "warm_s": 6.0,
           "warm_measured": 0, "kept": "collage", "level": "first",
           "conditions": {"phases": {"candidates": None, "e2e": {"waited_s": 481.6},
                                     "refine": {"waited_s": 78.3}}}}
    assert waited_s(row) == pytest.approx(559.9)
    assert waited_s({"conditions": {}}) == 0.0
    text = "\n".join(search_tables([row]))
    assert "| first compile s | of it search s | of it waiting for quiet s | the rest s |" in text
    assert "| 1151.6 | 222.9 | 559.9 | 368.8 |" in text
    assert search_tables([]) == []


def test_timed_children_cache_their_bytecode_as_an_installed_package_does(monkeypatch):
    """bench/installed.py: a shell that sets PYTHONDONTWRITEBYTECODE would charge provmap's
    start-up with compiling its modules in every timed child; the child's environment drops it
    and keeps everything else, and the parent's environment is left as it was."""
    from provmap.bench.installed import installed_env

    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setenv("PROVMAP_TEST_KEPT", "yes")
    env = installed_env()
    assert "PYTHONDONTWRITEBYTECODE" not in env and env["PROVMAP_TEST_KEPT"] == "yes"
    assert os.environ["PYTHONDONTWRITEBYTECODE"] == "1"
    child = subprocess.run([sys.executable, "-c", "import sys; print(sys.dont_write_bytecode)"],
                           env=env, capture_output=True, text=True, check=True)
    assert child.stdout.strip() == "False"
