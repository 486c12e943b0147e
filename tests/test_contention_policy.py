"""Contention as one policy, decided before the search measures anything (issue 53,
partition/measure/hygiene.py `quiet_before_search`): beside a real CPU hog a compile says so at
once, waits (bounded) and ends with one line and no file, or, accepted, measures beside the load
and says so; a neighbour that leaves during the wait lets the search run.  What a decision does
with a round measured under a load: tests/test_decision.py."""

import os
import signal
import time

import pytest

from provmap.partition.measure import hygiene
from provmap.partition.measure.contention import Conditions, snapshot

from cpu_hog import cpu_hog

needs_proc = pytest.mark.skipif(not snapshot().known, reason="needs Linux /proc")


def test_a_quiet_machine_is_probed_once_and_not_told_anything(monkeypatch):
    monkeypatch.setenv("PROVMAP_CONTENTION", "act")
    monkeypatch.setattr(hygiene, "wait_for_quiet", lambda *a, **k: Conditions(contended=False))
    said: list = []
    assert not hygiene.quiet_before_search(120.0, False, said.append).contended and not said
    monkeypatch.setenv("PROVMAP_CONTENTION", "ignore")
    assert hygiene.quiet_before_search(120.0, False, said.append) is None and not said


def test_a_load_that_outlasts_the_wait_is_one_line_or_measured_beside_as_accepted(monkeypatch):
    from provmap.partition.decision import Busy

    busy = Conditions(contended=True, reasons=["other processes used 0.98 of 2 CPUs"])
    monkeypatch.setenv("PROVMAP_CONTENTION", "act")
    monkeypatch.setattr(hygiene, "wait_for_quiet", lambda *a, **k: busy)
    said: list = []
    with pytest.raises(Busy) as e:
        hygiene.quiet_before_search(3.0, False, said.append)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("no artifact written: the machine stayed busy for")
    assert "other processes used 0.98 of 2 CPUs" in msg and "--accept-contended" in msg
    assert said == ["the machine is busy (other processes used 0.98 of 2 CPUs): waiting up to "
                    "3 s for quiet before measuring anything"]
    said.clear()
    assert hygiene.quiet_before_search(3.0, True, said.append) is busy
    assert len(said) == 2 and "measuring beside the load as asked" in said[1]


@needs_proc
def test_a_compile_beside_a_load_ends_within_the_wait_with_one_line_and_no_file(
        tmp_path, monkeypatch, capsys):
    """`provmap compile --strategy collage` beside a one-core hog: the busy line at once, the
    refusal after the wait, nothing measured and nothing written; with --accept-contended the
    artifact is written and its record says the search was contended."""
    import onnx

    from provmap.cli.main import main
    from provmap.runtime_module.artifact import read_artifact
    from small_models import conv_relu

    model, out = tmp_path / "m.onnx", tmp_path / "a.provmap"
    onnx.save(conv_relu(), model)
    monkeypatch.setenv("PROVMAP_CONTENTION", "act")
    args = ["compile", str(model), "-o", str(out), "--strategy",
            "collage:onnxruntime,openvino", "--max-size", "2", "--max-depth", "2",
            "--refine-budget", "0", "--quiet-wait", "3", "--no-variants"]
    with cpu_hog(240.0):
        time.sleep(1.5)  # the hog's own start-up
        t0 = time.monotonic()
        code = main([*args, "--cache", str(tmp_path / "k0.sqlite")])
        took = time.monotonic() - t0
        err = capsys.readouterr().err
        assert code == 2 and not out.exists() and "Traceback" not in err
        lines = [ln for ln in err.splitlines() if "no artifact written" in ln]
        assert len(lines) == 1 and lines[0].startswith("provmap: ") and "--quiet-wait" in lines[0]
        assert "waiting up to 3 s for quiet before measuring anything" in err
        assert "measured " not in err and "candidates" not in err.split("waiting up to")[1]
        assert took < 60  # the wait, not a search (the import of the libraries included)
        assert main([*args, "--accept-contended", "--cache", str(tmp_path / "k.sqlite")]) == 0
    err = capsys.readouterr().err
    assert "measuring beside the load as asked" in err
    rep = read_artifact(out).manifest["plan_info"]["collage"]
    assert rep["conditions"]["phases"]["before"]["contended"]


@needs_proc
def test_a_neighbour_that_leaves_during_the_wait_lets_the_search_run(tmp_path, monkeypatch):
    from provmap.partition.collage import CollageOptions
    from provmap.partition.compile import compile_model, load_view
    from small_models import conv_relu

    monkeypatch.setenv("PROVMAP_CONTENTION", "act")
    view = load_view(conv_relu(), "conv_relu")
    said: list = []
    from provmap.partition.decision import Busy

    with cpu_hog(600.0) as pid:
        time.sleep(1.5)

        def progress(m):
            said.append(m)
            if "waiting up to" in m and "before measuring anything" in m:
                os.kill(pid, signal.SIGKILL)
        try:
                art = compile_model(view, "collage:onnxruntime,openvino", progress=progress,
                                collage_options=CollageOptions(
                                max_depth=2, max_size=2, cache_path=str(tmp_path / "c.sqlite"),
                                refine_budget_s=0.0, e2e_variants=(), quiet_wait_s=30.0))
        except Busy:
            pytest.skip("another job kept this host busy after the hog ended")
    if not any("before measuring anything" in m for m in said):
        pytest.skip("the probe missed the hog (another job's load on this host ended it)")
    assert any("quiet now: searching" in m for m in said)
    assert art.manifest["strategy"].startswith("collage")
