"""Run-time gather indices out of range (issue 36): ONNX Runtime raises, OpenVINO gave all zeros
with exit 0, TVM's fast-mode Gather reads outside the tensor.  provmap checks a graph input read
straight by a Gather or GatherElements before any backend runs, the same on every backend."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

from cli_runner import one_error, provmap
from provmap.partition.compile import compile_model
from provmap.provenance.util.errors import ProvmapError
from provmap.runtime_module.module import load


# Builds record their digest in the trust list and their prices in the cache: this test's own.
pytestmark = pytest.mark.usefixtures("own_config")


def embedding() -> onnx.ModelProto:
    """Token ids -> a 10 x 4 embedding table -> Relu: what every transformer starts with."""
    table = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((10, 4)).astype(np.float32), "table")
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"], name="embed", axis=0),
             helper.make_node("Relu", ["e"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "emb", [helper.make_tensor_value_info("ids", TP.INT64, [1, 3])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, [1, 3, 4])], [table])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino", "tvm"])
def test_out_of_range_ids_are_refused_on_every_backend(backend, tmp_path):
    art = compile_model(embedding(), f"single:{backend}")
    assert art.manifest["model"]["index_inputs"] == {"ids": {"node": "embed", "op": "Gather",
                                                             "size": 10}}
    art.save(tmp_path / "a.provmap", record_built=True)
    mod = load(tmp_path / "a.provmap")
    table = numpy_helper.to_array(embedding().graph.initializer[0])
    ok = np.array([[0, 9, -10]], np.int64)  # negative indices count from the end
    np.testing.assert_allclose(mod.run({"ids": ok})["y"][0], np.maximum(table[[0, 9, 0]], 0))
    for bad, shown in (([[0, 10, 1]], "index 10"), ([[0, -11, 1]], "index -11")):
        with pytest.raises(ProvmapError, match=f"input 'ids': {shown} is out of range for "
                                               "Gather 'embed' \\(axis of size 10"):
            mod.run({"ids": np.array(bad, np.int64)})


def reshaped_embedding(through: str) -> onnx.ModelProto:
    """GPT-2's export: ids reshaped (`view(-1, seq)`) or cast before the embedding Gather."""
    table = numpy_helper.from_array(np.ones((10, 4), np.float32), "table")
    shape = numpy_helper.from_array(np.array([-1, 3], np.int64), "shape")
    first = (helper.make_node("Reshape", ["ids", "shape"], ["flat"], name="view")
             if through == "Reshape" else
             helper.make_node("Cast", ["ids"], ["flat"], name="cast", to=TP.INT64))
    nodes = [first, helper.make_node("Gather", ["table", "flat"], ["y"], name="wte", axis=0)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("ids", TP.INT32, [1, 3])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, [1, 3, 4])],
                          [table, shape])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("through", ["Reshape", "Cast"])
def test_ids_that_pass_through_a_reshape_or_cast_are_checked_too(through):
    """GPT-2's token ids reach the embedding through a Reshape; they went unchecked, and
    OpenVINO returned zeros (exit 0) where TVM crashed (issue 36's sixth afternoon)."""
    art = compile_model(reshaped_embedding(through), "single:onnxruntime")
    assert art.manifest["model"]["index_inputs"] == {"ids": {"node": "wte", "op": "Gather",
                                                             "size": 10}}


def test_the_cli_says_it_in_one_line(tmp_path):
    onnx.save(embedding(), tmp_path / "m.onnx")
    art = tmp_path / "a.provmap"
    assert provmap("compile", tmp_path / "m.onnx", "-o", art, "--strategy",
                   "single:openvino").returncode == 0
    np.savez(tmp_path / "in.npz", ids=np.array([[1, 2, 99]], np.int64))
    one_error(provmap("run", art, "--inputs", tmp_path / "in.npz", "-o", tmp_path / "o.npz"),
              "input 'ids': index 99 is out of range", "OpenVINO would return zeros")
    assert not (tmp_path / "o.npz").exists()


def test_tvm_native_warnings_only_with_verbose(tmp_path):
    """TVM's C++ logger wrote "transform.h:1261: Warning: Fast mode segfaults..." twice into a
    plain compile's output (provmap/cli/native_log.py); `provmap -v` shows it."""
    onnx.save(embedding(), tmp_path / "m.onnx")
    r = provmap("compile", tmp_path / "m.onnx", "-o", tmp_path / "a.provmap", "--strategy",
                "single:tvm")
    assert r.returncode == 0, r.stderr
    assert "Fast mode" not in r.stderr and "transform.h" not in r.stderr, r.stderr
    lines = r.stderr.splitlines()
    assert lines[0].startswith("provmap: imported") and "building p0 on tvm" in lines[1]
    r = provmap("-v", "compile", tmp_path / "m.onnx", "-o", tmp_path / "b.provmap",
                "--strategy", "single:tvm")
    assert r.returncode == 0 and "Warning: Fast mode segfaults" in r.stderr, r.stderr
    one_error(provmap("compile", tmp_path / "nosuch.onnx", "-o", tmp_path / "c.provmap"),
              "nosuch.onnx")
