"""The one comparison procedure (partition/decision.py) and its statistic
(partition/measure/evidence.py), on scripted measurements: what evidence keeps which plan.
The phases that call it run it on real artifacts (tests/test_collage.py, test_refine.py)."""

from __future__ import annotations

import itertools

import pytest

from provmap.partition import decision
from provmap.partition.decision import Busy, decide, plan_complexity
from provmap.partition.measure import evidence
from provmap.partition.measure.contention import Conditions
from provmap.partition.measure.evidence import Rule, interval, median_interval, within
from provmap.partition.measure.interleave import Latency


def scripted(times: dict, calls: list | None = None):
    """A measure function: label -> iterator of per-pass fastest samples (seconds)."""
    its = {k: iter(v) for k, v in times.items()}

    def measure(fns, passes, never_cap=(), **_kw):
        if calls is not None:
            calls.append(sorted(fns))
        out = {}
        for k in fns:
            mins = [next(its[k]) for _ in range(passes)]
            out[k] = Latency(samples_s=list(mins), pass_medians_s=list(mins),
                             pass_mins_s=list(mins), first_call_s=mins[0])
        fastest = min(v.first_call_s for v in out.values())
        for k, v in out.items():
            if v.first_call_s > 10 * fastest and k not in never_cap:
                v.capped, v.pass_mins_s, v.samples_s = True, [], [v.first_call_s] * 3
        return out
    return measure


def noisy(base: float, jitter=(1.0, 1.01, 0.995, 1.02, 1.0, 1.005)):
    return (base * j for j in itertools.cycle(jitter))


SIMPLE, MIXED = (1, 0, 0), (3, 0, 0)


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    """No machine reading: every round is quiet unless a test says otherwise."""
    monkeypatch.setenv("PROVMAP_CONTENTION", "act")
    monkeypatch.setattr(decision, "Window", lambda: _Win(False))


class _Win:
    def __init__(self, contended):
        self.contended = contended

    def stop(self):
        return Conditions(contended=self.contended,
                          reasons=["other processes used 1.00 of 2 CPUs"] if self.contended else [])


def test_a_mixed_plan_faster_in_every_pass_is_kept_after_one_round():
    d = decide({"collage": None, "single:a": None}, {"collage": MIXED, "single:a": SIMPLE},
               measure=scripted({"collage": noisy(0.7), "single:a": noisy(1.0)}))
    assert d.kept == "collage" and d.decided and d.passes == 6
    assert "single:a" in d.left and d.versus["single:a"]["low"] > 1.3


def test_a_mixed_plan_not_worth_its_partitions_leaves_the_simpler_plan():
    # 1% faster in every pass: real, but under the rule's 2% minimum gain
    said: list = []
    d = decide({"collage": None, "single:a": None}, {"collage": MIXED, "single:a": SIMPLE},
               said.append, measure=scripted({"collage": noisy(0.99), "single:a": noisy(1.0)}),
               what="end-to-end check")
    assert d.kept == "single:a" and d.decided
    assert "not 2% faster than the simpler single:a: -1.0% (interval" in d.left["collage"]
    # one line, and it names the plan kept first: no message contradicts it
    assert said == [f"end-to-end check: {d.why}"] and d.why.startswith("single:a kept")
    # wholly slower: said so, not as a gain it lacks
    d = decide({"collage": None, "single:a": None}, {"collage": MIXED, "single:a": SIMPLE},
               measure=scripted({"collage": noisy(1.3), "single:a": noisy(1.0)}))
    assert d.left["collage"].startswith("slower than the simpler single:a: +30.0%")


def test_equally_simple_plans_within_the_drift_run_out_of_passes_and_keep_the_lower_median():
    # the two swap places pass by pass: no interval excludes a ratio of 1
    a = itertools.cycle([1.00, 1.03])
    b = itertools.cycle([1.02, 1.00])
    calls: list = []
    d = decide({"single:a": None, "single:b": None}, {"single:a": SIMPLE, "single:b": SIMPLE},
               measure=scripted({"single:a": a, "single:b": b}, calls))
    assert not d.decided and d.passes == Rule().max_passes and len(calls) == 4
    assert d.kept in ("single:a", "single:b") and "undecided after 24 passes" in d.why
    assert "lower median of pass minimums" in d.why


def test_past_its_deadline_a_decision_starts_no_further_round():
    """A phase's budget binds the decision it has begun (the second level ran 180 s of 120)."""
    import time

    a = itertools.cycle([1.00, 1.03])
    b = itertools.cycle([1.02, 1.00])
    calls: list = []
    d = decide({"single:a": None, "single:b": None}, {"single:a": SIMPLE, "single:b": SIMPLE},
               measure=scripted({"single:a": a, "single:b": b}, calls),
               until=time.monotonic() - 1)
    assert len(calls) == 1 and d.passes == Rule().round_passes and not d.decided
    assert "undecided after 6 passes, out of time" in d.why


def test_a_settled_question_measures_both_in_every_pass_until_it_is_answered():
    """`settled`: a pair's estimate, not a contest.  A plan 30% slower, which a contest drops
    after one round, is measured on (and never capped) until the caller's question is
    answered; a question never answered runs out of passes undecided."""
    calls: list = []
    seen: list = []

    def after(n):
        def settled(mins):
            seen.append(len(mins["collage"]))
            return len(mins["collage"]) >= n
        return settled

    d = decide({"collage": None, "single:a": None}, {"collage": SIMPLE, "single:a": SIMPLE},
               measure=scripted({"collage": noisy(1.3), "single:a": noisy(1.0)}, calls),
               settled=after(12))
    assert d.decided and d.passes == 12 and seen == [6, 12] and not d.left
    assert calls == [["collage", "single:a"]] * 2 and "settled after 12 passes" in d.why
    assert d.versus["collage"]["low"] > 1.25  # the interval of the pair, as a contest's
    d = decide({"collage": None, "single:a": None}, {"collage": SIMPLE, "single:a": SIMPLE},
               measure=scripted({"collage": noisy(20.0), "single:a": noisy(1.0)}),
               settled=lambda mins: False)
    assert not d.decided and d.passes == Rule().max_passes and not d.left
    assert "not settled after 24 passes" in d.why


def test_undecided_between_a_variant_and_the_default_keeps_the_default():
    a = itertools.cycle([1.00, 1.03])
    v = itertools.cycle([0.99, 1.04])
    d = decide({"single:a": None, "single:a[threads=1]": None},
               {"single:a": (1, 0, 0), "single:a[threads=1]": (1, 1, 0)},
               measure=scripted({"single:a": a, "single:a[threads=1]": v}))
    assert d.kept == "single:a"


def test_an_alternative_ten_times_slower_in_warm_up_leaves_at_once():
    d = decide({"collage": None, "single:tvm": None, "single:a": None},
               {"collage": MIXED, "single:tvm": SIMPLE, "single:a": SIMPLE},
               measure=scripted({"collage": noisy(0.5), "single:tvm": noisy(20.0),
                                 "single:a": noisy(1.0)}))
    assert d.kept == "collage" and "slower than the fastest in warm-up" in d.left["single:tvm"]
    assert "single:tvm" not in d.versus  # never measured in a pass


def test_a_contended_round_is_measured_again_after_quiet_and_a_lasting_load_is_one_line(
        monkeypatch):
    rounds = iter([True, False, False])
    monkeypatch.setattr(decision, "Window", lambda: _Win(next(rounds)))
    monkeypatch.setattr(decision, "wait_for_quiet", lambda *a, **k: Conditions(contended=False))
    said: list = []
    d = decide({"collage": None, "single:a": None}, {"collage": MIXED, "single:a": SIMPLE},
               said.append, measure=scripted({"collage": noisy(0.7), "single:a": noisy(1.0)}),
               what="end-to-end check")
    assert d.kept == "collage" and d.passes == 6 and d.contended_rounds == 0
    assert any("that round is not evidence" in s for s in said)

    monkeypatch.setattr(decision, "Window", lambda: _Win(True))
    monkeypatch.setattr(decision, "wait_for_quiet", lambda *a, **k: Conditions(contended=True))
    with pytest.raises(Busy) as e:
        decide({"collage": None, "single:a": None}, {"collage": MIXED, "single:a": SIMPLE},
               measure=scripted({"collage": noisy(0.7), "single:a": noisy(1.0)}), wait_s=5,
               what="end-to-end check")
    assert "\n" not in str(e.value) and "--accept-contended" in str(e.value)
    # accepted: the contended rounds count, and the record says how many
    d = decide({"collage": None, "single:a": None}, {"collage": MIXED, "single:a": SIMPLE},
               measure=scripted({"collage": noisy(0.7), "single:a": noisy(1.0)}),
               accept_contended=True)
    assert d.contended_rounds == 1 and d.conditions()["contended"]


def test_the_interval_is_the_sign_test_and_six_passes_mean_every_pass():
    lo, hi, cov = median_interval([1.0, 1.1, 0.9, 1.05, 0.95, 1.2])
    assert (lo, hi) == (0.9, 1.2) and cov == pytest.approx(1 - 2 / 64)
    lo, hi, cov = median_interval(list(range(1, 17)), 0.9)
    assert (lo, hi) == (5, 12) and cov >= 0.9  # bench's 16 passes: the 5th to the 12th
    iv = interval([1.003, 1.004, 1.006, 1.002, 1.001, 1.005])
    assert within(*iv.slowdown(), 0.01) == "within" and within(*iv.slowdown(), 0.0005) == "slower"
    assert within(*interval([0.98, 1.03, 1.0, 0.99, 1.02, 1.01]).slowdown(), 0.01) == "undecided"


def test_plan_complexity_orders_partitions_then_variants_then_schedules():
    one = {"partitions": [{"backend": "onnxruntime"}]}
    var = {"partitions": [{"backend": "onnxruntime[threads=1]"}]}
    two = {"partitions": [{"backend": "onnxruntime"}, {"backend": "openvino"}],
           "schedule": {"stages": [["p0", "p1"]], "threads": {}}}
    assert plan_complexity(one) < plan_complexity(var) < plan_complexity(two)
    assert plan_complexity(two) == (2, 0, 1)
    assert evidence.RULE.key() == Rule().key() and "min_gain=0.02" in Rule().key()


def test_a_round_while_one_cpu_runs_slow_is_measured_again(monkeypatch):
    """The parallelism gauge, probed between blocks, judges a round as the counters do."""
    from provmap.partition.measure.parallelism import Gauge

    uneven = iter([True, False, False, False])
    rounds: list = []

    def gauge():
        bad = next(uneven)
        rounds.append(bad)
        return Gauge(probe_fn=lambda: {0: 2.5e-3, 1: (4.3e-3 if bad else 2.5e-3)})
    monkeypatch.setattr(decision, "Gauge", gauge)
    monkeypatch.setattr(decision, "wait_for_quiet", lambda *a, **k: Conditions(contended=False))
    inner = scripted({"collage": noisy(0.7), "single:a": noisy(1.0)})

    def measure(fns, passes, **kw):
        for _ in range(passes * len(fns)):
            kw["between"]()  # one probe per block, as measure_interleaved does
        return inner(fns, passes, **kw)
    said: list = []
    d = decide({"collage": None, "single:a": None}, {"collage": MIXED, "single:a": SIMPLE},
               said.append, measure=measure, what="end-to-end check")
    assert rounds[:2] == [True, False] and d.kept == "collage" and d.passes == 6
    assert any("slower than another" in s and "not evidence" in s for s in said)
    assert d.conditions()["parallelism"][0]["uneven"] == 12


def test_a_cpu_slow_through_every_round_ends_within_the_wait(monkeypatch):
    """The 1 s probe between rounds can miss what a round's probes see (a CPU slow in bursts):
    the rounds' own time counts against the wait, so it ends with the one line, not never."""
    from provmap.partition.measure.parallelism import Gauge

    monkeypatch.setattr(decision, "Gauge", lambda: Gauge(probe_fn=lambda: {0: 2.5e-3, 1: 4.3e-3}))
    monkeypatch.setattr(decision, "Window", lambda: type("W", (), {
        "stop": lambda self: Conditions(seconds=30.0)})())
    monkeypatch.setattr(decision, "wait_for_quiet", lambda *a, **k: Conditions(contended=False))
    inner = scripted({"collage": noisy(0.7), "single:a": noisy(1.0)})
    rounds: list = []

    def measure(fns, passes, **kw):
        rounds.append(1)
        for _ in range(passes * len(fns)):
            kw["between"]()
        return inner(fns, passes, **kw)
    with pytest.raises(Busy) as e:
        decide({"collage": None, "single:a": None}, {"collage": MIXED, "single:a": SIMPLE},
               measure=measure, wait_s=100, what="end-to-end check")
    assert len(rounds) == 4 and "slower than another" in str(e.value)
