"""Run-time gather indices out of range (issue 36): ONNX Runtime raises, OpenVINO gave all zeros
with exit 0, TVM's fast-mode Gather reads outside the tensor, TVM's scatters write outside it.
provmap checks a graph input read straight by a Gather, GatherElements, GatherND,
ScatterElements or ScatterND before any backend runs, the same on every backend; a Gather on
indices the model computes is named at compile for the backends that do not check them."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto
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
    assert art.manifest["model"]["index_inputs"] == {"ids": [{"node": "embed", "op": "Gather",
                                                              "size": 10}]}
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
    assert art.manifest["model"]["index_inputs"] == {"ids": [{"node": "wte", "op": "Gather",
                                                              "size": 10}]}


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


def _scatter_nd() -> onnx.ModelProto:
    """The fourteenth afternoon's ScatterND: x [10, 4], one index tuple from a graph input."""
    ins = [helper.make_tensor_value_info("x", TP.FLOAT, [10, 4]),
           helper.make_tensor_value_info("ids", TP.INT64, [1, 1]),
           helper.make_tensor_value_info("u", TP.FLOAT, [1, 4])]
    g = helper.make_graph([helper.make_node("ScatterND", ["x", "ids", "u"], ["y"], name="snd")],
                          "snd", ins, [helper.make_tensor_value_info("y", TP.FLOAT, [10, 4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _gather_nd() -> onnx.ModelProto:
    """GatherND with batch_dims 1: data [2, 5, 3], ids [2, 4, 1] index axis 1 (size 5)."""
    data = numpy_helper.from_array(np.arange(30, dtype=np.float32).reshape(2, 5, 3), "data")
    g = helper.make_graph(
        [helper.make_node("GatherND", ["data", "ids"], ["y"], name="gnd", batch_dims=1)], "gnd",
        [helper.make_tensor_value_info("ids", TP.INT64, [2, 4, 1])],
        [helper.make_tensor_value_info("y", TP.FLOAT, [2, 4, 3])], [data])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _scatter_elements() -> onnx.ModelProto:
    ins = [helper.make_tensor_value_info("x", TP.FLOAT, [10, 4]),
           helper.make_tensor_value_info("ids", TP.INT64, [1, 4]),
           helper.make_tensor_value_info("u", TP.FLOAT, [1, 4])]
    g = helper.make_graph([helper.make_node("ScatterElements", ["x", "ids", "u"], ["y"],
                                            name="se", axis=0)],
                          "se", ins, [helper.make_tensor_value_info("y", TP.FLOAT, [10, 4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_scatter_and_gather_nd_indices_from_an_input_are_checked(tmp_path):
    """H1 of the fourteenth afternoon: GatherND read other memory on TVM and garbage on
    OpenVINO (exit 0); ScatterElements and ScatterND on TVM wrote outside the tensor and the
    process died (exit 139).  Each is refused in one line before any backend runs."""
    cases = [(_scatter_nd(), [{"node": "snd", "op": "ScatterND", "sizes": [10]}],
              {"ids": np.array([[1000000]], np.int64)}, "index 1000000", "ScatterND 'snd' "
              "(column 0 of the last axis, axis of size 10"),
             (_gather_nd(), [{"node": "gnd", "op": "GatherND", "sizes": [5]}],
              {"ids": np.array([[[0], [4], [-5], [5]], [[0]] * 4], np.int64)}, "index 5",
              "GatherND 'gnd' (column 0 of the last axis, axis of size 5"),
             (_scatter_elements(), [{"node": "se", "op": "ScatterElements", "size": 10}],
              {"ids": np.array([[0, 1, 2, 100000]], np.int64)}, "index 100000",
              "ScatterElements 'se' (axis of size 10")]
    for k, (model, uses, bad, shown, where) in enumerate(cases):
        onnx.save(model, tmp_path / f"m{k}.onnx")
        art = tmp_path / f"a{k}.provmap"
        r = provmap("compile", tmp_path / f"m{k}.onnx", "-o", art, "--strategy", "single:tvm")
        assert r.returncode == 0, r.stderr
        mod = load(art)
        assert mod.manifest["model"]["index_inputs"] == {"ids": uses}
        feeds = mod.random_inputs(0)  # random indices stay in range
        mod.run(feeds)
        np.savez(tmp_path / f"in{k}.npz", **{**feeds, **bad})
        one_error(provmap("run", art, "--inputs", tmp_path / f"in{k}.npz", "-o",
                          tmp_path / f"o{k}.npz"), f"input 'ids': {shown} is out of range", where,
                  "ONNX Runtime refuses it")
        assert not (tmp_path / f"o{k}.npz").exists()


def test_a_tuple_index_reshaped_on_its_way_is_not_checked_as_if_in_place():
    """A Reshape moves the elements of index tuples to other columns: such an input gets no
    bound (a wrong one would refuse good indices), and compile notes it as unchecked."""
    from provmap.partition.model_source import load_view
    from provmap.runtime_module.index_bounds import index_inputs, unchecked_gathers
    from provmap.runtime_module.subgraph import Subgraph

    m = _gather_nd()
    shape = numpy_helper.from_array(np.array([2, 4, 1], np.int64), "shape")
    m.graph.initializer.append(shape)
    m.graph.input[0].CopyFrom(helper.make_tensor_value_info("flat", TP.INT64, [8]))
    m.graph.node.insert(0, helper.make_node("Reshape", ["flat", "shape"], ["ids"], name="r"))
    view = load_view(m, "r")
    assert index_inputs(view) == {}
    assert unchecked_gathers(Subgraph(view, view.op_nodes)) == ["GatherND 'gnd'"]


def test_artifacts_with_the_old_one_use_entry_still_read():
    from provmap.runtime_module.index_bounds import check_indices, random_high

    old = {"node": "embed", "op": "Gather", "size": 10}
    assert random_high(old) == 10
    check_indices("ids", np.array([9, -10]), old)
    with pytest.raises(ProvmapError, match="index 10 is out of range for Gather 'embed'"):
        check_indices("ids", np.array([10]), old)


def test_a_gather_on_computed_indices_is_named_at_compile_on_tvm_and_openvino(tmp_path):
    """Indices the model computes (ids + 10) are not range-checked: OpenVINO returned zeros and
    TVM crashed (exit 139) on a large one (the eleventh afternoon; documented, but found by a
    crash).  compile now names such a Gather for the backends that do not check it."""
    import numpy as np
    from onnx import numpy_helper

    table = numpy_helper.from_array(np.ones((16, 4), np.float32), "table")
    ten = numpy_helper.from_array(np.array(10, np.int64), "ten")
    g = helper.make_graph([helper.make_node("Add", ["ids", "ten"], ["j"], name="shift"),
                           helper.make_node("Gather", ["table", "j"], ["y"], name="emb")], "g",
                          [helper.make_tensor_value_info("ids", TensorProto.INT64, [3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
                          [table, ten])
    model = tmp_path / "g.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              model)
    for backend, words in (("tvm", "TVM reads outside the tensor"),
                           ("openvino", "OpenVINO returns zeros")):
        r = provmap("compile", model, "-o", tmp_path / f"{backend}.provmap", "--strategy",
                    f"single:{backend}")
        assert r.returncode == 0, r.stderr
        assert "Gather 'emb': indices the model computes are not checked at run time" in r.stderr
        assert words in r.stderr, r.stderr
    r = provmap("compile", model, "-o", tmp_path / "ort.provmap", "--strategy",
                "single:onnxruntime")  # ONNX Runtime checks them itself
    assert r.returncode == 0 and "not checked" not in r.stderr, r.stderr
