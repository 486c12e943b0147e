"""The limit with cuts priced (workbench/cut_price.py): the price of a cut from measured plans,
the cheapest path with that price, and the break-even price."""

import pytest

from provmap.workbench.cut_price import (break_even, cut_prices, format_priced, priced_limit,
                                         priced_path)

# the best single "a": 12 ms (b: 12.7).  Free cuts: n1 on b (-1), n3+n4 on b (-2.3): 8.7 ms.
CAL = {"a": {"n1": 4.0, "n2": 3.0, "n3": 3.0, "n4": 2.0},
       "b": {"n1": 3.0, "n2": 7.0, "n3": 0.2, "n4": 2.5}}
UNITS = [["n1"], ["n2"], ["n3", "n4"]]
ORDER = {"n1": 0, "n2": 1, "n3": 2, "n4": 3}


def test_free_cuts_give_the_unit_oracle_and_a_high_price_the_best_single():
    ms, choice, cuts = priced_path(CAL, UNITS, ORDER, 0.0)
    assert ms == pytest.approx(3.0 + 3.0 + 2.7) and cuts == 2   # b | a | b
    assert choice == {"n1": "b", "n2": "a", "n3": "b", "n4": "b"}
    ms, choice, cuts = priced_path(CAL, UNITS, ORDER, 100.0)
    assert ms == pytest.approx(12.0) and cuts == 0 and set(choice.values()) == {"a"}


def test_the_price_chooses_which_units_still_move():
    # at 1.5 ms a cut, n1's 1 ms saving no longer pays for its cut: a, a, b = 9.7 + 1.5
    ms, choice, cuts = priced_path(CAL, UNITS, ORDER, 1.5)
    assert cuts == 1 and ms == pytest.approx(11.2)
    assert choice == {"n1": "a", "n2": "a", "n3": "b", "n4": "b"}
    assert priced_path(CAL, UNITS, ORDER, 3.0)[2] == 0       # 2.3 saved < 3: nothing moves
    # the limit never falls as the price rises
    seq = [priced_path(CAL, UNITS, ORDER, k)[0] for k in (0, 0.1, 0.2, 0.3, 0.5, 1, 2)]
    assert seq == sorted(seq)


def test_cut_prices_from_measured_plans_and_the_lowest_is_kept():
    o = {"best_single": "a", "best_single_ms": 10.0, "best_single_min_ms": 9.0,
         "tried": [{"plan": "oracle tau=0", "partitions": 4, "predicted_ms": 8.7,
                    "measured_ms": 12.0, "min_ms": 9.9},
                   {"plan": "one partition", "partitions": 1, "predicted_ms": 12,
                    "measured_ms": 10.0, "min_ms": 9.0},
                   {"plan": "did not build", "partitions": 3, "failed": "x"}]}
    prices = cut_prices(o, CAL)
    assert [(p["plan"], p["by"]) for p in prices] == [("oracle tau=0", "median"),
                                                       ("oracle tau=0", "minimum")]
    # by median: (1.2 - 8.7/12) * 12 / 3 = 1.9 ms a cut; by minimum: (1.1 - 0.725) * 4 = 1.5
    assert prices[0]["kappa_ms"] == pytest.approx(1.9)
    assert prices[1]["kappa_ms"] == pytest.approx(1.5)
    p = priced_limit(o, CAL, UNITS, ORDER)
    assert p["priced"] and p["kappa_ms"] == pytest.approx(1.5)
    assert p["kappa_from"]["by"] == "minimum"
    assert p["cuts"] == 1 and p["priced_ms"] == pytest.approx(11.2)
    assert p["choice"] == {"n1": "a", "n2": "a", "n3": "b", "n4": "b"}
    assert p["headroom_share"] == pytest.approx(1 - 11.2 / 12)
    lines = format_priced(p)
    assert lines[0].startswith("limit with cuts priced at 1.500 ms a cut")


def test_a_plan_faster_than_predicted_leaves_the_cut_unpriced():
    o = {"best_single": "a", "best_single_ms": 10.0, "best_single_min_ms": 10.0,
         "tried": [{"plan": "oracle tau=0", "partitions": 3, "predicted_ms": 8.7,
                    "measured_ms": 7.0, "min_ms": 7.0}]}
    p = priced_limit(o, CAL, UNITS, ORDER)
    assert not p["priced"] and p["kappa_ms"] == 0.0
    assert p["priced_ms"] == pytest.approx(8.7)
    assert "cuts free" in format_priced(p)[0]


def test_break_even_is_the_largest_price_leaving_five_percent():
    whole = 12.0
    k = break_even(CAL, UNITS, ORDER, whole)
    assert k is not None
    at = priced_path(CAL, UNITS, ORDER, k)[0]
    above = priced_path(CAL, UNITS, ORDER, k * 1.01 + 1e-6)[0]
    assert (whole - at) / whole >= 0.05 - 1e-9 > (whole - above) / whole - 1e-3
    # a model whose free-cut room is already under 5% has no break-even
    flat = {"a": {"n1": 1.0}, "b": {"n1": 0.99}}
    assert break_even(flat, [["n1"]], {"n1": 0}, 1.0) is None


def test_a_position_priced_by_its_own_cut_moves_the_path_elsewhere():
    """MobileNet-v3 (2026-11-27): the path kept returning to a one-cut plan whose cut its own
    twin measured at 1.6-1.8 ms (kappa 0.135), and the limit ended on that plan's 7.1% though
    it measured +24%.  That position now costs what it measured; the others keep kappa."""
    from provmap.workbench.tighten import _price_own_cut

    units = [["a"], ["b"], ["c"], ["d"]]
    order = {n: k for k, n in enumerate("abcd")}
    cal = {"x": {"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0},
           "y": {"a": 2.0, "b": 2.0, "c": 0.1, "d": 0.1}}
    ms, choice, cuts = priced_path(cal, units, order, 0.1)
    assert (choice, cuts) == ({"a": "x", "b": "x", "c": "y", "d": "y"}, 1)
    assert ms == pytest.approx(2.0 + 0.2 + 0.1)
    step = {"own_cuts": {"cuts": 1, "per_cut_median_ms": 1.8, "per_cut_min_ms": 1.6,
                         "vs_best_median": 0.87, "vs_best_min": 0.92, "kappa_ms": 0.1,
                         "below_kappa": False}}
    at = {}
    _price_own_cut(step, choice, units, order, 0.1, at)
    assert at == {"c": 1.6} and step["cut_priced_ms"] == {"before": "c", "ms": 1.6}
    from provmap.workbench.cut_price import format_rounds

    line = format_rounds({"tightened_share": 0.0, "tightened_ms": 4.0, "tightened_cuts": 0,
                          "stopped": "x", "rounds": [{"round": 1, "cuts": 1,
                                                      "predicted_vs_best": -0.4, **step}]})[0]
    assert "a cut at that position costs 1.600 ms from here on" in line
    ms2, choice2, cuts2 = priced_path(cal, units, order, 0.1, at)
    # a cut before c costs 1.6 now: the path cuts before d instead, at kappa
    assert choice2 == {"a": "x", "b": "x", "c": "x", "d": "y"} and cuts2 == 1
    assert ms2 == pytest.approx(3.0 + 0.1 + 0.1)
    # a several-cut twin, a cheaper one, or one under contention prices no position
    for own in ({"cuts": 2, "per_cut_median_ms": 1.8, "per_cut_min_ms": 1.6},
                {"cuts": 1, "per_cut_median_ms": 0.05, "per_cut_min_ms": 0.08},
                {"cuts": 1, "per_cut_median_ms": 1.8, "per_cut_min_ms": 1.6, "contended": "x"}):
        at = {}
        _price_own_cut({"own_cuts": own}, choice, units, order, 0.1, at)
        assert at == {}


def _tighten_with(row: dict, rounds: int = 4) -> tuple[dict, list[dict]]:
    """tighten over CAL at kappa 1.5 (its path: n3+n4 on b, 11.2 of 12 ms priced), every
    plan measured as `row` says and no region timed."""
    from types import SimpleNamespace

    from provmap.workbench.tighten import tighten

    art = SimpleNamespace(manifest={"partitions": []})
    o = {"best_single": "a", "priced": {"kappa_ms": 1.5, "whole_ms": 12.0}}
    rows = tighten(SimpleNamespace(node_ids=list(ORDER)), o, CAL, UNITS,
                   lambda choice, label: ({"plan": label, "breakdown": {}, **row}, art),
                   rounds=rounds)
    return o["priced"], rows


def test_a_final_path_already_measured_is_judged_by_its_measurement_not_its_price():
    # never measured: the price stands (12 - 11.2 of 12)
    p, _ = _tighten_with({}, rounds=0)
    assert p["tightened_share"] == pytest.approx(0.8 / 12) and p["final_plan"] is None
    # measured slower: the path returns to it, and the best single configuration stands
    p, rows = _tighten_with({"vs_best_median": 0.14, "vs_best_min": 0.20})
    assert p["stopped"] == "the path returned a plan already measured" and len(rows) == 1
    assert (p["tightened_share"], p["tightened_ms"], p["tightened_cuts"]) == (0.0, 12.0, 0)
    assert p["final_measured"] == {"plan": "priced limit", "vs_best_median": 0.14,
                                   "vs_best_min": 0.20, "faster": False, "decided": False}
    from provmap.workbench.cut_price import format_rounds

    line = format_rounds(p)[-1]
    assert "headroom 0.0%: no room" in line and "the best single configuration stands" in line
    assert "measured +14.0% by median, +20.0% by minimum" in line
    # faster once: what both statistics measured at least, until the decision settles it
    from provmap.workbench.tighten import settle

    p, rows = _tighten_with({"vs_best_median": -0.03, "vs_best_min": -0.02})
    assert p["final_plan"] == "priced limit" and p["tightened_share"] == pytest.approx(0.02)
    rows[0]["again"] = {"faster": False, "vs_best_median": 0.01}
    settle(p, rows)
    assert (p["tightened_share"], p["tightened_cuts"]) == (0.0, 0)
    rows[0]["again"] = {"faster": True, "vs_best_median": -0.04}
    settle(p, rows)
    assert p["tightened_share"] == pytest.approx(0.04) and p["tightened_cuts"] == 1
    assert p["tightened_ms"] == pytest.approx(12.0 * 0.96)
    # a contended "faster" is not one
    p, _ = _tighten_with({"vs_best_median": -0.03, "vs_best_min": -0.02, "contended": "load"})
    assert p["tightened_share"] == 0.0 and p["noisy"]
