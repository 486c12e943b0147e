"""Issue 36's fourteenth new-user afternoon, through the real CLI (H1 and M1 are in
test_index_bounds.py and test_backend_openvino.py, L2 in test_cli_malformed.py)."""

from __future__ import annotations

import onnx
from cli_runner import provmap
from onnx import TensorProto, helper


def test_run_escapes_an_output_name_as_inspect_does(tmp_path):
    """L1: an output named "out\\nput" split run's summary line in two (a name could forge a
    "latency over ..." line); inspect, compare and lookup showed out\\x0aput."""
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["out\nput"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("out\nput", TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              tmp_path / "m.onnx")
    art = tmp_path / "a.provmap"
    assert provmap("compile", tmp_path / "m.onnx", "-o", art, "--strategy",
                   "single:onnxruntime").returncode == 0
    r = provmap("run", art, "--random")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("out\\x0aput: float32[1, 4]"), r.stdout
    assert len(lines) == 2 and lines[1].startswith("latency over"), r.stdout
    assert "out\\x0aput" in provmap("inspect", art).stdout


def test_explain_headroom_times_a_kept_single_configuration_by_its_own_profile(tmp_path,
                                                                               monkeypatch):
    """L3: the kept plan "collage->single:onnxruntime[threads=1]" is that configuration, yet it
    was profiled a second time, and the noise between the two read "captured 9% of the
    headroom".  Its time is now that configuration's own profile (kept_is)."""
    import argparse

    import provmap.workbench.headroom as headroom
    from provmap.cli.explain_headroom import headroom_of
    from provmap.partition.compile import compile_model
    from provmap.runtime_module.module import load

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    compile_model(model, "single:onnxruntime", out=tmp_path / "a.provmap")
    seen = {}

    def oracle(view, backends, **kw):
        seen.update(kw, backends=sorted(backends))
        return {"headroom_share": None}

    monkeypatch.setattr(headroom, "node_oracle", oracle)
    args = argparse.Namespace(artifact=str(tmp_path / "a.provmap"), trust=True, repeats=3,
                              oracle_plans=False)
    mod = load(tmp_path / "a.provmap", trust=True)
    for strategy, kept_is in (("collage->single:onnxruntime", "onnxruntime"),
                              ("collage->refined", None), ("collage", None)):
        mod.manifest["strategy"] = strategy
        headroom_of(args, mod, model)
        assert seen["kept_is"] == kept_is and (seen["kept"] is None) == (kept_is is not None)
