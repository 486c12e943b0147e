"""Backend option values checked against each backend's declared table before any work (issue 36).

Each case used to change where the model ran or fail late: `openvino.threads=abc` made OpenVINO
decline every node, so greedy put the whole model on TVM with exit 0; `single:onnxruntime[threads
=abc]` was a traceback; `onnxruntime.allow_spinning=maybe` and `threads=-3` were taken; the
`optimization` level failed only during the build; `greedy:openvino,,onnxruntime` was accepted;
`openvino.precision=bf16` ran f32 on a CPU without bf16 under a bf16 label.
"""

from __future__ import annotations

import json

import pytest

from cli_runner import one_error, provmap
from provmap.partition.compile import compile_model
from provmap.provenance.util.errors import ProvmapError
from provmap.runtime_module.backend import BackendError
from provmap.runtime_module.registry import backend_class
from small_models import conv_relu
from backend_cases import cpu_has


# Builds record their digest in the trust list and their prices in the cache: this test's own.
pytestmark = pytest.mark.usefixtures("own_config")


@pytest.mark.parametrize("strategy,option,words", [
    ("greedy:openvino,tvm", "openvino.threads=abc", ("openvino.threads=abc", "an integer >= 0")),
    ("greedy:openvino,tvm", "openvino.threads=-3", ("openvino.threads=-3", "an integer >= 0")),
    ("single:onnxruntime", "onnxruntime.threads=-3", ("onnxruntime.threads=-3", "integer")),
    ("single:onnxruntime", "onnxruntime.allow_spinning=maybe", ("allow_spinning", "a boolean")),
    ("single:onnxruntime", "onnxruntime.optimization=foo", ("optimization", "one of all")),
    ("single:openvino", "openvino.performance_hint=FAST", ("performance_hint", "LATENCY")),
    ("single:tvm", "tvm.trials=0", ("tvm.trials=0", "an integer >= 1")),
])
def test_a_bad_option_value_is_one_line_before_any_work(tmp_path, strategy, option, words):
    r = provmap("compile", "bundled:squeezenet", "-o", tmp_path / "a.provmap", "--strategy",
                strategy, "--backend-option", option)
    one_error(r, *words)
    assert "imported" not in r.stderr and not (tmp_path / "a.provmap").exists()


@pytest.mark.parametrize("strategy,words", [
    ("single:onnxruntime[threads=abc]", ("onnxruntime[threads=abc]", "an integer")),
    ("greedy:openvino[threads=x],onnxruntime", ("openvino[threads=x]", "an integer")),
    ("greedy:openvino,,onnxruntime", ("empty backend name",)),
    ("greedy:openvino,onnxruntime,", ("empty backend name",)),
    ("single:onnxruntime[thread=1]", ("no option 'thread'", "did you mean 'threads'")),
])
def test_a_bad_variant_in_the_strategy_is_one_line_before_any_work(tmp_path, strategy, words):
    r = provmap("compile", "bundled:squeezenet", "-o", tmp_path / "a.provmap", "--strategy",
                strategy)
    one_error(r, *words)
    assert "imported" not in r.stderr and not (tmp_path / "a.provmap").exists()


def test_the_python_api_and_the_backend_refuse_the_same_values(tmp_path):
    with pytest.raises(ProvmapError, match="an integer >= 0"):
        compile_model(conv_relu(), "single:onnxruntime", out=tmp_path / "a.provmap",
                      backend_options={"onnxruntime": {"threads": "abc"}})
    with pytest.raises(ProvmapError, match="a boolean"):
        compile_model(conv_relu(), "single:onnxruntime[allow_spinning=maybe]")
    assert not (tmp_path / "a.provmap").exists()
    for name, opts in (("onnxruntime", {"threads": 1.5}), ("openvino", {"threads": True}),
                       ("onnxruntime", {"optimization": "foo"}), ("tvm", {"tune": "fast"})):
        with pytest.raises(BackendError, match="expected"):
            backend_class(name)(**opts)


def test_good_values_in_every_spelling_are_taken():
    ort = backend_class("onnxruntime")
    for opts in ({"threads": "2"}, {"threads": 2}, {"threads": 0}, {"allow_spinning": "0"},
                 {"allow_spinning": False}, {"allow_spinning": "yes"}):
        assert ort(**opts).options() == opts  # recorded as given
    # ... except a choice, recorded in the table's spelling (issue 36: the library is exact)
    assert ort(optimization="BASIC").options() == {"optimization": "basic"}
    so = ort(allow_spinning="off")._session_options()
    assert so.get_session_config_entry("session.intra_op.allow_spinning") == "0"


def test_a_precision_the_cpu_lacks_is_refused_naming_its_capabilities(tmp_path):
    for prec, cap in (("bf16", "BF16"), ("f16", "FP16")):
        r = provmap("compile", "bundled:squeezenet", "-o", tmp_path / "a.provmap", "--strategy",
                    "single:openvino", "--backend-option", f"openvino.precision={prec}")
        if cpu_has(cap):
            assert r.returncode == 0, r.stderr
            info = json.loads(provmap("inspect", tmp_path / "a.provmap", "--json").stdout)
            assert prec in json.dumps(info)
            (tmp_path / "a.provmap").unlink()
        else:
            one_error(r, f"precision={prec}", f"this CPU cannot run {prec}", "would run f32")
            assert "imported" not in r.stderr


def test_backends_lists_each_option_with_its_type():
    r = provmap("backends", "--options", "--json")
    assert r.returncode == 0, r.stderr
    rows = {b["name"]: {o["name"]: o["expects"] for o in b["options"]}
            for b in json.loads(r.stdout)["backends"]}
    assert rows["openvino"]["threads"].startswith("an integer >= 0")
    assert rows["onnxruntime"]["optimization"] == "one of all, extended, basic, disable"
    assert "tune" in rows["tvm"] and "only_ops" in rows["openvino"]
    text = provmap("backends", "--options").stdout
    assert "allow_spinning" in text and "a boolean" in text
