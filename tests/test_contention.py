"""Contention detection (provmap.partition.measure.contention): the verdict's logic on chosen
inputs, and the real counters with a real CPU hog.  This machine is shared (other jobs may run
while the tests do), so no test asserts that the real machine is quiet: quiet verdicts are
tested on chosen inputs, the real counters only where the test itself controls the load."""

import os
import time

import pytest

from provmap.partition.measure import contention as c

from cpu_hog import cpu_hog

pytestmark = pytest.mark.skipif(not c.snapshot().known, reason="needs Linux /proc")


def test_quiet_inputs_are_not_flagged():
    q = c.judge(cores=2, load1=1.1, others_cores=0.05, steal_share=0.0, spread=0.08,
                seconds=2.0, ours_cores=1.9)
    assert not q.contended and q.reasons == []
    assert "no contention" in q.line()


@pytest.mark.parametrize("kw,word", [
    ({"others_cores": 0.95}, "other processes used 0.95 of 2 CPUs"),
    ({"steal_share": 0.2}, "stole 20%"),
    ({"load1": 3.6, "seconds": 0.05}, "load average 3.60 on 2 CPUs"),
    ({"spread": 0.9}, "samples spread 0.90"),
])
def test_each_signal_alone_flags_contention(kw, word):
    args = dict(cores=2, load1=0.5, others_cores=0.0, steal_share=0.0, spread=0.1, seconds=2.0)
    args.update(kw)
    got = c.judge(**args)
    assert got.contended and word in got.line()


def test_a_window_too_short_for_the_counters_is_not_judged_by_them():
    # 0.05 s is 5 jiffies a CPU: one tick of someone else reads as 0.2 CPU.
    assert not c.judge(2, 0.5, 0.9, 0.5, seconds=0.05).contended


def test_the_load_average_alone_does_not_flag_a_window_the_counters_judged_quiet():
    """A one-minute mean that counts our own threads: a search's own pools (or a job that ended
    30 s ago) must not keep every plan out of the cache."""
    assert not c.judge(2, 3.5, 0.05, 0.0, seconds=2.0).contended


def test_combine_names_the_contended_phase():
    rec = c.combine({"candidates": c.judge(2, 0.5, 0.0, 0.0),
                     "e2e": c.judge(2, 0.5, 1.0, 0.0)})
    assert rec["contended"] and rec["reason"].startswith("e2e: other processes")
    assert not c.combine({"candidates": c.judge(2, 0.5, 0.0, 0.0)})["contended"]


def test_own_work_is_not_counted_as_other_processes():
    """This process spinning for a second is `ours`, not `others` (the measuring worker, a
    child, is counted the same way): the window's own share is the CPU time this process got,
    however much of a core a busy machine left it."""
    cpu0 = time.process_time()
    w = c.Window()
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        pass
    got = w.stop()
    used = time.process_time() - cpu0
    assert got.known and used > 0.1
    assert got.ours_cores * got.seconds == pytest.approx(used, abs=0.06)


def test_a_cpu_hog_is_detected():
    with cpu_hog(20.0):
        time.sleep(0.3)
        w = c.Window()
        time.sleep(1.5)
        got = w.stop()
    assert got.contended, got.to_dict()
    assert got.others_cores >= 0.7
    assert "other processes used" in got.line()


def test_a_short_window_is_judged_with_the_time_before_it():
    """Small candidates take a few ms each: alone, their windows are too short for the counters;
    judged with the recent past, a hog running through them is still seen."""
    with cpu_hog(20.0):
        time.sleep(0.3)
        c.RecentWindow()
        time.sleep(0.3)
        short = c.RecentWindow()
        time.sleep(0.01)
        got = short.stop()
        alone = c.Window()
        time.sleep(0.01)
        plain = alone.stop()
    assert got.seconds >= c.MIN_WINDOW_S and got.contended, got.to_dict()
    assert plain.seconds < c.MIN_WINDOW_S and "other processes" not in plain.line()


def test_only_an_end_to_end_phase_decides_whether_a_plan_was_chosen_under_contention():
    """A few contended candidate prices do not stop a plan the clean end-to-end check kept from
    being cached (the quiet bench host saw 1-6 of ~1,000 per model); a contended end-to-end
    check does, and without one the prices decide."""
    from provmap.partition.measure.hygiene import search_conditions

    clean = {"contended": False, "reasons": []}
    busy = {"contended": True, "reasons": ["others used 1.0 CPU"]}
    rec = search_conditions({"candidates": busy, "e2e": clean}, {"contended_prices": 3})
    assert not rec["contended"] and "3 price(s)" in rec["not_decisive"]
    assert "candidates contended" in rec["not_decisive"]
    rec = search_conditions({"candidates": clean, "e2e": busy}, {"contended_prices": 0})
    assert rec["contended"] and rec["reason"].startswith("e2e: others used")
    rec = search_conditions({"candidates": clean}, {"contended_prices": 2})
    assert rec["contended"] and "2 price(s)" in rec["reason"]
    rec = search_conditions({"candidates": busy}, {})
    assert rec["contended"]


def test_a_hog_stops_soon_after_its_owner_is_killed_past_its_finally():
    """A bench killed by SIGTERM never runs cpu_hog's `finally`; the detached hog (re-parented
    away) checks its owner and stops (2026-11-28: a 3600 s hog outlived its bench and loaded
    the next run's quiet phase)."""
    import signal as sig
    import subprocess
    import sys

    code = ("import time\nfrom provmap.bench.hog import cpu_hog\n"
            "with cpu_hog(60.0) as p:\n    print(p, flush=True)\n    time.sleep(60)\n")
    owner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    hog = int(owner.stdout.readline())
    owner.send_signal(sig.SIGTERM)
    owner.wait(timeout=30)

    def spinning() -> bool:
        try:
            with open(f"/proc/{hog}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except (FileNotFoundError, ProcessLookupError):
            return False

    end = time.monotonic() + 5.0
    while spinning() and time.monotonic() < end:
        time.sleep(0.1)
    alive = spinning()
    if alive:
        os.kill(hog, sig.SIGKILL)
    assert not alive


# The parallelism gauge (partition/measure/parallelism.py): a CPU shared with a neighbour.

from provmap.partition.measure import parallelism as par  # noqa: E402


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable CPUs")
def test_the_gauge_times_each_usable_cpu_and_restores_the_affinity():
    mine = os.sched_getaffinity(0)
    times = par.cpu_times()
    assert set(times) == mine and all(t > 0 for t in times.values())
    assert os.sched_getaffinity(0) == mine
    os.sched_setaffinity(0, {min(mine)})
    try:
        assert par.cpu_times() == {}  # one CPU: nothing to compare
    finally:
        os.sched_setaffinity(0, mine)


def test_a_window_is_contended_when_one_cpu_is_slow_in_most_probes():
    even, slow = {0: 2.5e-3, 1: 2.55e-3}, {0: 2.5e-3, 1: 4.3e-3}
    g = par.Gauge(probe_fn=lambda: slow)
    for _ in range(8):
        g.probe()
    assert g.reason() is None  # too few probes to judge: a 1 s window, which a burst fills
    for _ in range(4):
        g.probe()
    assert "1.7x slower" in g.reason() and "12 of 12 probes" in g.reason()
    bursts = par.Gauge(probe_fn=iter([slow, slow, slow] + [even] * 9).__next__)
    for _ in range(12):
        bursts.probe()
    assert bursts.reason() is None  # a burst, as a quiet guest has
    assert bursts.to_dict() == {"probes": 12, "uneven": 3, "max_ratio": 1.72,
                                "left_out_ours": 0}


def test_a_probe_our_own_threads_ran_through_is_left_out_not_blamed_on_a_neighbour():
    """A thread of ours busy on one CPU slows the probe there as a neighbour would (ONNX
    Runtime's workers spinning after a run); the probe is tried again and, still disturbed,
    left out of the window.  Quiet, every probe counts."""
    import hashlib
    import threading

    if par.own_cpu_s() is None:
        pytest.skip("no /proc/self/task schedstat here")
    quiet = par.Gauge()
    for _ in range(3):
        quiet.probe()
    assert len(quiet.ratios) == 3 and quiet.own == 0
    stop = threading.Event()
    data = bytes(1 << 24)

    def spin():  # hashlib drops the GIL on large buffers: a thread truly running beside us
        while not stop.is_set():
            hashlib.sha256(data).digest()

    t = threading.Thread(target=spin, daemon=True)
    t.start()
    try:
        busy = par.Gauge()
        for _ in range(3):
            busy.probe()
    finally:
        stop.set()
        t.join()
    assert busy.own == 3 and busy.ratios == []
    assert busy.to_dict()["left_out_ours"] == 3


def test_waiting_for_quiet_waits_out_an_uneven_cpu(monkeypatch):
    even, slow = {0: 2.5e-3, 1: 2.55e-3}, {0: 2.5e-3, 1: 4.3e-3}
    calls = []

    def probe():
        calls.append(1)
        return slow if len(calls) <= 8 else even
    monkeypatch.setattr(par, "cpu_times", probe)
    monkeypatch.setattr(c, "Window", lambda: type("W", (), {"stop": lambda self: c.Conditions()})())
    got = c.wait_for_quiet(max_wait_s=6.0, probe_s=1.5)
    assert not got.contended and len(calls) > 8 and got.parallelism["uneven"] == 0
    monkeypatch.setattr(par, "cpu_times", lambda: slow)
    got = c.wait_for_quiet(max_wait_s=0.0, probe_s=1.5)
    assert got.contended and "slower than another" in got.line(), got.to_dict()
