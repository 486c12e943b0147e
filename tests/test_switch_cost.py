"""What a change of library costs inside a plan, measured with the real backends (issue 35).

Candidates are priced alone; inside a plan the library that ran last leaves threads spinning or
asleep.  The calibration gives the search a price for each ordered pair; these tests check its
shape and rules, never its size (that is the host's)."""

import pytest

from provmap.partition.measure.boundary import calibrate_switches, switch_key, switch_s
from provmap.runtime_module.registry import get_backend
from provmap.runtime_module.spinning import as_in_a_mixed_plan


def test_every_ordered_pair_of_libraries_gets_a_price_that_a_path_can_use():
    backends = {"onnxruntime": get_backend("onnxruntime"), "openvino": get_backend("openvino")}
    cal = calibrate_switches(backends, n=5, rounds=3, min_time_s=0.0)
    assert set(cal["switch_s"]) == {"onnxruntime->openvino", "openvino->onnxruntime"}
    assert set(cal["raw_s"]) == set(cal["switch_s"])
    for k, v in cal["switch_s"].items():
        assert v >= 0.0 and v == max(cal["raw_s"][k], 0.0)  # clamped for Dijkstra, raw kept
    assert all(t > 0 for t in cal["alone_s"].values())
    assert switch_s(cal, "openvino", "openvino") == 0.0
    assert switch_s(cal, "onnxruntime", "openvino") == cal["switch_s"][switch_key("onnxruntime", "openvino")]
    assert switch_s(cal, "onnxruntime", "tvm") == 0.0  # not calibrated: nothing assumed


def test_one_backend_has_no_switch_to_price():
    assert calibrate_switches({"onnxruntime": get_backend("onnxruntime")})["switch_s"] == {}


def test_the_switch_is_measured_with_the_options_a_mixed_plan_gives():
    ort = get_backend("onnxruntime")
    assert as_in_a_mixed_plan(ort).options()["allow_spinning"] == "0"
    mine = get_backend("onnxruntime", allow_spinning="1")  # the user's choice wins
    assert as_in_a_mixed_plan(mine) is mine
    variant = get_backend("onnxruntime[threads=1]")
    quiet = as_in_a_mixed_plan(variant)
    assert quiet.name == "onnxruntime[threads=1]" and quiet.options()["threads"] in ("1", 1)
    ov = get_backend("openvino")
    assert as_in_a_mixed_plan(ov) is ov  # nothing of OpenVINO's spins after a run


def test_a_backend_a_mixed_plan_runs_as_it_is_is_built_once(monkeypatch):
    """OpenVINO keeps its own options in a mixed plan: one convolution serves both sides of its
    switch; ORT, which a mixed plan runs without spinning, needs its second build."""
    backends = {"onnxruntime": get_backend("onnxruntime"), "openvino": get_backend("openvino")}
    builds = []
    for be in backends.values():
        cls = type(be)
        real = cls.build

        def counting(self, sub, *a, _real=real, **kw):
            builds.append(self.name)
            return _real(self, sub, *a, **kw)

        monkeypatch.setattr(cls, "build", counting)
    cal = calibrate_switches(backends, n=3, rounds=1, min_time_s=0.0)
    assert set(cal["switch_s"]) == {"onnxruntime->openvino", "openvino->onnxruntime"}
    assert builds.count("openvino") == 1 and builds.count("onnxruntime") == 2
