"""compile's strategies and search options, through the real CLI and the Python API: the default
search leaves TVM out and has a stated measuring budget; search limits must be positive; flags
that act only in a search are refused under single:; a TVM-only search skips the default
one-thread variant TVM does not take; provmap.compile() names a wrong argument."""

from __future__ import annotations

import json
import re

import onnx
import pytest
from cli_runner import one_error, provmap, refused
from onnx import TensorProto, helper

pytestmark = [pytest.mark.usefixtures("own_config"),
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def provmap_help(cmd):
    return " ".join(provmap(cmd, "--help").stdout.split())


def test_default_collage_search_leaves_tvm_out():
    from provmap.partition.compile import DEFAULT_COLLAGE_BACKENDS

    assert "tvm" not in DEFAULT_COLLAGE_BACKENDS
    assert "add tvm" in provmap("compile", "--help").stdout.replace("\n", " ").replace("  ", " ")


def test_a_search_without_a_budget_gets_the_stated_default(log_relu_dir, tmp_path):
    """compile and provmap.compile() used to search with no time limit at all."""
    from provmap.partition.collage import DEFAULT_SEARCH_BUDGET_S

    api = __import__("provmap")

    assert f"default {DEFAULT_SEARCH_BUDGET_S:g} s" in provmap_help("compile")
    r = provmap("compile", log_relu_dir / "m.onnx", "-o", tmp_path / "c.provmap", "--strategy",
                "collage", "--no-e2e-check", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["search"]["measure_budget_s"] == DEFAULT_SEARCH_BUDGET_S
    assert f"measuring budget {DEFAULT_SEARCH_BUDGET_S:g} s" in r.stderr
    # Counted before explain priced the kept partitions again ("priced 8 of 6 candidates").
    asked, total = map(int, re.search(r"asked for (\d+) of (\d+) candidates", r.stderr).groups())
    assert asked <= total, r.stderr
    r = provmap("compile", log_relu_dir / "m.onnx", "-o", tmp_path / "n.provmap", "--strategy",
                "collage", "--no-e2e-check", "--search-budget", "none", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["search"]["measure_budget_s"] is None
    a = api.compile(str(log_relu_dir / "m.onnx"), "collage", out=str(tmp_path / "api.provmap"))
    assert a.manifest["plan_info"]["collage"]["measure_budget_s"] == DEFAULT_SEARCH_BUDGET_S


@pytest.mark.parametrize("flag,value", [("--max-depth", 0), ("--max-size", -1)])
def test_collage_search_limits_must_be_positive(tmp_path, flag, value):
    r = provmap("compile", "bundled:squeezenet", "-o", tmp_path / "a.provmap", "--strategy",
                "collage", flag, value)
    line = one_error(r, flag, str(value))
    assert "imported" not in r.stderr, line  # refused before the import
    assert not (tmp_path / "a.provmap").exists()


@pytest.mark.parametrize("flags", [("--research",), ("--max-size", "3"), ("--no-e2e-check",),
                                   ("--variant", "threads=1"), ("--no-variants",)])
def test_search_flags_under_single_are_refused_not_ignored(tmp_path, flags):
    r = provmap("compile", "bundled:squeezenet", "-o", tmp_path / "a.provmap", "--strategy",
                "single:onnxruntime", *flags)
    refused(r, flags[0], "--strategy collage only")
    assert not (tmp_path / "a.provmap").exists()


def test_a_tvm_only_search_skips_the_default_one_thread_variant(tmp_path):
    """`compile --backends tvm` failed on the default variant threads=1, which TVM does not
    take (docs/collage.md says it is skipped), suggesting 'trials'."""
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["a"], name="relu"),
                           helper.make_node("Sigmoid", ["a"], ["y"], name="sig")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              model)
    r = provmap("compile", model, "-o", tmp_path / "a.provmap", "--backends", "tvm",
                "--search-budget", "3", "--refine-budget", "0")
    assert r.returncode == 0, r.stderr
    r = provmap("compile", model, "-o", tmp_path / "b.provmap", "--backends", "tvm",
                "--search-budget", "3", "--variant", "thred=1")
    assert r.returncode == 2 and "variant 'thred=1': no searched backend takes option 'thred'" \
        in r.stderr, r.stderr  # a typo is still one


@pytest.mark.parametrize("kw, words", [
    ({"backend_options": ["openvino.threads=1"]}, "backend_options: expected {backend:"),
    ({"strategy": None}, "strategy: expected text"),
    ({"model": b"\x08\x08:"}, "model: bytes are not read as a model"),
])
def test_the_python_api_names_a_wrong_argument(tmp_path, kw, words):
    """A list of options was an AttributeError; model bytes a 'no such file' of the bytes."""
    import provmap as pm

    from provmap.provenance.util.errors import ProvmapError

    args = {"model": "bundled:transformer", "out": tmp_path / "a.provmap", **kw}
    with pytest.raises(ProvmapError, match=words.replace("{", r"\{")):
        pm.compile(args.pop("model"), **args)
    assert not (tmp_path / "a.provmap").exists()
