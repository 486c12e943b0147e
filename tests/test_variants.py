"""Backend variants (`onnxruntime[threads=1]`, `openvino[performance_hint=THROUGHPUT]`): a base
backend with options, searched and recorded as a backend of its own."""

from __future__ import annotations

import numpy as np
import pytest

from provmap.partition.compile import compile_model
from provmap.partition.strategy import parse_strategy
from provmap.provenance.bundled import zoo
from provmap.provenance.util.errors import ProvmapError
from provmap.runtime_module.backend import BackendError
from provmap.runtime_module.module import load
from provmap.runtime_module.registry import (
    get_backend, parse_variant, split_outside_brackets, variant_name)
from quick_rule import QUICK_RULE


def test_parsing():
    assert parse_variant("onnxruntime") == ("onnxruntime", {})
    assert parse_variant(" openvino[performance_hint=THROUGHPUT; threads=2] ") == (
        "openvino", {"performance_hint": "THROUGHPUT", "threads": "2"})
    assert variant_name("onnxruntime[ threads = 1 ]") == "onnxruntime[threads=1]"
    assert split_outside_brackets("a,b[x=1;y=2],c", ",") == ["a", "b[x=1;y=2]", "c"]
    s = parse_strategy("collage:onnxruntime,onnxruntime[threads=1; optimization=basic]")
    assert (s.kind, s.names) == (
        "collage", ["onnxruntime", "onnxruntime[threads=1;optimization=basic]"])
    for bad in ("onnxruntime[threads]", "onnxruntime[]", "onnxruntime[threads=1", "[x=1]"):
        with pytest.raises(BackendError, match="backend"):
            parse_variant(bad)
    with pytest.raises(ProvmapError, match="strategy"):
        parse_strategy("greedy:onnxruntime[threads]")


def test_a_variant_is_its_own_backend():
    be = get_backend("onnxruntime[threads=1;optimization=basic]")
    assert be.name == "onnxruntime[threads=1;optimization=basic]"
    assert be.options() == {"threads": "1", "optimization": "basic"}
    assert get_backend("onnxruntime").name == "onnxruntime"
    with pytest.raises(BackendError, match="unknown option"):
        get_backend("openvino[nonsense=1]")
    with pytest.raises(BackendError, match="optimization"):
        get_backend("onnxruntime[optimization=max]")._level()


def test_variant_artifact_records_and_reloads_it(tmp_path):
    model = zoo.transformer_block()
    path = tmp_path / "v.provmap"
    art = compile_model(model, "greedy:onnxruntime[optimization=disable;threads=1]", out=path)
    [p] = art.manifest["partitions"]
    assert p["backend"] == "onnxruntime[optimization=disable;threads=1]"
    assert p["blob_meta"]["graph_optimization_level"] == "ORT_DISABLE_ALL"
    assert art.manifest["backends"][p["backend"]]["options"] == {"optimization": "disable",
                                                                 "threads": "1"}
    mod = load(path)  # the variant is rebuilt from its name and options
    feeds = zoo.random_inputs(model, 0)
    out = mod.run(feeds)
    import onnxruntime as ort

    model.ir_version = 8
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    np.testing.assert_allclose(out["y"], want[0], rtol=1e-4, atol=1e-5)
    [hit] = mod.lookup.onnx_node(mod.lookup.node_ids()[0])[:1]
    assert hit["backends"] == ["onnxruntime[optimization=disable;threads=1]"]


def test_collage_searches_variants_as_backends(tmp_path):
    from provmap.partition.collage import CollageOptions

    model = zoo.transformer_block()
    names = {"onnxruntime", "onnxruntime[threads=1]"}
    art = compile_model(model, "collage:onnxruntime,onnxruntime[threads=1]",
                        collage_options=CollageOptions(
                            max_size=2, max_depth=2, cache_path=str(tmp_path / "c.sqlite"),
                            rule=QUICK_RULE, refine_budget_s=0, in_context=False))
    rep = art.manifest["plan_info"]["collage"]
    assert set(rep["backends"]) == names
    # both were priced: whole-model estimates exist for the base and the variant
    assert {"single:onnxruntime", "single:onnxruntime[threads=1]"} <= set(rep["estimated_ms"])
    assert {p["backend"] for p in art.manifest["partitions"]} <= names
    for name in {p["backend"] for p in art.manifest["partitions"]}:
        assert art.manifest["backends"][name]["name"] == name
