"""Backend option values checked against each backend's declared table before any work (issue 36).

Each case used to change where the model ran or fail late: `openvino.threads=abc` made OpenVINO
decline every node, so greedy put the whole model on TVM with exit 0; `single:onnxruntime[threads
=abc]` was a traceback; `onnxruntime.allow_spinning=maybe` and `threads=-3` were taken; the
`optimization` level failed only during the build; `greedy:openvino,,onnxruntime` was accepted;
`openvino.precision=bf16` ran f32 on a CPU without bf16 under a bf16 label.

Below those: names (a mistyped backend, option or op type gets a did-you-mean, an option for a
backend the strategy does not use is refused), values stored as the backend reads them (the
canonical spelling of a choice, a free string without its surrounding spaces, threads=0), values
that would do nothing or harm (an empty or contradicting op list, one naming only folded ops,
tuning options without tuning, threads far past the machine, an LLVM CPU that does not exist or
that this host is not), and the Python API refusing what the CLI refuses.
"""

from __future__ import annotations

import json
import os
import zipfile

import onnx
import pytest
from cli_models import float_model, relu_add_model, relu_file
from cli_runner import one_error, one_line_refusal, provmap, refused
from onnx import TensorProto, helper

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


# -- names, values and combinations, through the real CLI -------------------------------------

def test_an_unknown_llvm_cpu_is_refused_before_any_work(tmp_path):
    """`tvm.mcpu=bogus` was accepted: LLVM's C++ line reached the terminal, generic code was
    built and inspect recorded `mcpu: bogus`."""
    for args in (("--backend-option", "tvm.mcpu=skylak", "--strategy", "single:tvm"),
                 ("--strategy", "single:tvm[mcpu=bogus]")):
        r = provmap("compile", "bundled:squeezenet", "-o", tmp_path / "t.provmap", *args)
        line = one_line_refusal(r, "'tvm'", "mcpu", "an LLVM CPU name", "x86-64")
        assert ("did you mean skylake" in line) == ("skylak" in args[1])
        assert "imported" not in r.stderr
    assert not (tmp_path / "t.provmap").exists()


def test_mistyped_backends_and_contradicting_op_lists_are_refused_up_front(tmp_path):
    out = tmp_path / "t.provmap"
    r = provmap("compile", "bundled:squeezenet", "-o", out, "--strategy",
                "greedy:openvno,onnxruntime")
    one_line_refusal(r, "unknown backend 'openvno'", "did you mean 'openvino'?")
    r = provmap("compile", "bundled:squeezenet", "-o", out, "--strategy", "single:onnxruntime",
                "--backend-option", "onnxruntime.only_ops=Conv,Relu",
                "--backend-option", "onnxruntime.exclude_ops=Conv")
    one_line_refusal(r, "Conv is in both only_ops and exclude_ops")
    assert "imported" not in r.stderr and not out.exists()


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_threads_0_compiles_runs_and_inspects(tmp_path, backend):
    """The option table says 0 = the library's default; the manifest schema said 1..4096, so
    `run` and `inspect` refused the artifact `compile` had just written."""
    model, art = relu_add_model(tmp_path / "m.onnx"), tmp_path / "t0.provmap"
    r = provmap("compile", model, "-o", art, "--strategy", f"single:{backend}",
                "--backend-option", f"{backend}.threads=0")
    assert r.returncode == 0, r.stderr
    for cmd in ("run", "inspect"):
        r = provmap(cmd, art)
        assert r.returncode == 0, (cmd, r.stderr)
    assert "'threads': '0'" in r.stdout


def _host_flags():
    from provmap.runtime_module.host import cpu_flags

    return cpu_flags()


@pytest.mark.skipif("avx512f" in _host_flags() or "sse2" not in _host_flags(),
                    reason="needs an x86 host without AVX-512")
def test_native_code_for_a_cpu_this_host_is_not_is_refused_not_run(tmp_path):
    """`tvm.mcpu=skylake-avx512` without AVX-512 here compiled, and `run` died with "Illegal
    instruction" (exit 132)."""
    model, art = relu_add_model(tmp_path / "m.onnx"), tmp_path / "sk.provmap"
    mcpu = ("--backend-option", "tvm.mcpu=sapphirerapids")
    r = provmap("compile", model, "-o", art, "--strategy", "single:tvm", *mcpu)
    one_error(r, "mcpu=sapphirerapids", "avx512f", "tvm.cross=1")
    assert not art.exists()
    r = provmap("compile", model, "-o", art, "--strategy", "single:tvm", *mcpu,
                "--backend-option", "tvm.cross=1")
    assert r.returncode == 0, r.stderr
    for args in (("run", art), ("profile", art), ("compare", art, "--model", model)):
        one_error(provmap(*args), "mcpu=sapphirerapids", "avx512f", "this CPU lacks")
    assert provmap("inspect", art).returncode == 0  # reading it runs no native code


def test_choice_options_are_stored_in_their_canonical_spelling(tmp_path):
    """The up-front check was case-insensitive, the backend exact: `openvino.precision=F32`
    was refused late, `onnxruntime.optimization=ALL` stored as given."""
    model, art = relu_add_model(tmp_path / "m.onnx"), tmp_path / "e.provmap"
    for backend, option, stored in (("openvino", "precision=F32", "'precision': 'f32'"),
                                    ("onnxruntime", "optimization=ALL", "'optimization': 'all'")):
        r = provmap("compile", model, "-o", art, "--strategy", f"single:{backend}",
                    "--backend-option", f"{backend}.{option}")
        assert r.returncode == 0, r.stderr
        r = provmap("inspect", art)
        assert r.returncode == 0 and stored in r.stdout, r.stdout


@pytest.mark.parametrize("args", [
    ("--strategy", "single:openvino[threads=2;threads=3]"),
    ("--strategy", "single:openvino", "--backend-option", "openvino.threads=2",
     "--backend-option", "openvino.threads=3")])
def test_an_option_given_twice_is_refused_not_the_last_kept(tmp_path, args):
    r = provmap("compile", "bundled:squeezenet", "-o", tmp_path / "a.provmap", *args)
    refused(r, "given twice")


def test_tuning_options_without_tuning_are_refused(tmp_path):
    """tvm.trials, tune_budget, tuning_db and --tuning-db without tune=metaschedule did
    nothing, exit 0, and the artifact's label read `tvm[trials=5;tune_budget=3]` as if tuned."""
    model, out = relu_file(tmp_path), tmp_path / "a.provmap"
    why = "acts only with tune=metaschedule: nothing is tuned"
    for extra in (("--backend-option", "tvm.trials=5"), ("--backend-option", "tvm.tune_budget=5"),
                  ("--backend-option", f"tvm.tuning_db={tmp_path / 'db'}"),
                  ("--tuning-db", tmp_path / "db")):
        refused(provmap("compile", model, "-o", out, "--strategy", "single:tvm", *extra), why)
    refused(provmap("compile", model, "-o", out, "--strategy",
                    "single:tvm[trials=5;tune_budget=3]"), "option trials " + why)
    assert not out.exists() and not (tmp_path / "db").exists()


def test_the_option_table_says_what_tvm_builds_for_without_mcpu():
    """It said "default: this CPU"; untuned partitions are built for generic x86-64."""
    r = provmap("backends", "--options")
    assert r.returncode == 0, r.stderr
    row = next(ln for ln in r.stdout.splitlines() if "mcpu" in ln and "LLVM" in ln)
    assert "generic x86-64 untuned" in row and "default: this CPU" not in row, row


def _options(artifact, backend):
    with zipfile.ZipFile(artifact) as z:
        return json.loads(z.read("manifest.json"))["backends"][backend]["options"]


def test_a_free_string_option_loses_its_surrounding_spaces(tmp_path):
    """`tvm.mcpu= native` passed the check, was recorded as " native", and LLVM, knowing no
    such CPU, built generic x86-64 code (no AVX at all) under a manifest that reads native."""
    out = tmp_path / "a.provmap"
    r = provmap("compile", relu_file(tmp_path), "-o", out, "--strategy", "single:tvm",
                "--backend-option", "tvm.mcpu= native ")
    assert r.returncode == 0, r.stderr
    assert _options(out, "tvm")["mcpu"] == "native"


def test_an_empty_only_ops_is_refused(tmp_path):
    """`openvino.only_ops=` was stored as `only_ops: []` and ignored: every node ran on the
    backend the artifact says may run none."""
    model, out = relu_file(tmp_path), tmp_path / "a.provmap"
    for argv in (("--strategy", "greedy:openvino,onnxruntime",
                  "--backend-option", "openvino.only_ops="),
                 ("--strategy", "greedy:openvino,onnxruntime",
                  "--backend-option", "openvino.only_ops=,"),
                 ("--strategy", "greedy:openvino[only_ops=],onnxruntime")):
        refused(provmap("compile", model, "-o", out, *argv), "only_ops",
                "at least one ONNX op type")
    assert not out.exists()
    # exclude_ops= means "exclude nothing", which is what it does
    r = provmap("compile", model, "-o", out, "--strategy", "greedy:openvino,onnxruntime",
                "--backend-option", "openvino.exclude_ops=")
    assert r.returncode == 0, r.stderr


def test_threads_far_past_the_machine_are_refused_at_compile(tmp_path):
    """M3: onnxruntime.threads=4096 passed (within the table's typo guard) and a 17-node model
    then took 38.8 s a call on 2 CPUs."""
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              tmp_path / "m.onnx")
    out, many = tmp_path / "a.provmap", 8 * (os.cpu_count() or 1) + 1
    for argv in (("--strategy", "single:onnxruntime", "--backend-option",
                  f"onnxruntime.threads={many}"),
                 ("--strategy", f"single:openvino[threads={many}]")):
        refused(provmap("compile", tmp_path / "m.onnx", "-o", out, *argv), f"threads={many}",
                "CPU(s)")
    assert not out.exists()
    r = provmap("compile", tmp_path / "m.onnx", "-o", out, "--strategy", "single:onnxruntime",
                "--backend-option", f"onnxruntime.threads={many - 1}")
    assert r.returncode == 0, r.stderr


def test_an_op_list_naming_only_folded_ops_says_it_changes_nothing(tmp_path):
    """L4: exclude_ops=Shape where every Shape is folded before import compiled the same plan
    without a word."""
    model = float_model(tmp_path, [helper.make_node("Shape", ["x"], ["sh"], name="shape"),
                                   helper.make_node("Relu", ["x"], ["r"], name="relu"),
                                   helper.make_node("Reshape", ["r", "sh"], ["y"], name="reshape")],
                        [("x", [1, 4])], [("y", [1, 4])])
    r = provmap("compile", model, "-o", tmp_path / "a.provmap", "--strategy",
                "greedy:openvino,onnxruntime", "--backend-option", "openvino.exclude_ops=Shape")
    assert r.returncode == 0, r.stderr
    assert "openvino.exclude_ops: no node left to run has op type Shape" in r.stderr


# -- typos, and options for a backend the strategy does not use ---------------------------------

@pytest.mark.parametrize("option,strategy,words", [
    ("openvno.exclude_ops=Softmax", "greedy:openvino,onnxruntime",
     ("'openvno'", "did you mean 'openvino'")),
    ("openvino.exclude_ops=Softmx", "greedy:openvino,onnxruntime",
     ("openvino.exclude_ops", "'Softmx'", "did you mean 'Softmax'")),
    ("openvino.exclude_op=Softmax", "greedy:openvino,onnxruntime",
     ("'exclude_op'", "did you mean 'exclude_ops'")),
    ("openvino.precision=bf16", "single:onnxruntime", ("does not use backend 'openvino'",)),
    ("tvm.tune=metaschedule", "collage", ("does not use backend 'tvm'",)),
])
def test_backend_option_typos_are_refused_before_the_build(tmp_path, option, strategy, words):
    """Each of these used to build a different partition than the one asked for, exit 0."""
    r = provmap("compile", "bundled:squeezenet", "-o", tmp_path / "a.provmap", "--strategy",
                strategy, "--backend-option", option)
    one_error(r, "--backend-option", *words)
    assert "building" not in r.stderr and not (tmp_path / "a.provmap").exists()


@pytest.mark.parametrize("options,strategy,words", [
    ({"openvno": {"exclude_ops": "Softmax"}}, "greedy:openvino,onnxruntime", ("'openvno'",)),
    ({"openvino": {"exclude_ops": ["Rleu"]}}, "greedy:openvino,onnxruntime",
     ("'Rleu'", "did you mean 'Relu'")),
    ({"openvino": {"threads": 1}}, "single:onnxruntime", ("does not use backend 'openvino'",)),
])
def test_python_api_refuses_the_backend_options_the_cli_refuses(tmp_path, options, strategy,
                                                                 words):
    """provmap.compile() used to take them and build a plan without them."""
    from provmap.partition.compile import compile_model
    from provmap.provenance.util.errors import ProvmapError
    from small_models import conv_relu

    with pytest.raises(ProvmapError) as e:
        compile_model(conv_relu(), strategy, out=tmp_path / "a.provmap", backend_options=options)
    assert all(w in str(e.value) for w in words), str(e.value)
    assert not (tmp_path / "a.provmap").exists()


def test_backend_options_that_apply_are_still_taken(tmp_path):
    """A contrib op the model has is a valid exclude_ops entry though onnx.defs lacks it."""
    from provmap.partition.backend_options import check_op_lists

    check_op_lists({"onnxruntime": {"exclude_ops": ["FusedConv"]}}, {"FusedConv"})
    r = provmap("compile", "bundled:squeezenet", "-o", tmp_path / "a.provmap", "--strategy",
                "collage:onnxruntime,openvino", "--backend-option",
                "openvino.exclude_ops=Softmax,Concat", "--no-e2e-check", "--max-size", "1",
                "--cache", tmp_path / "c.sqlite")
    assert r.returncode == 0, r.stderr
