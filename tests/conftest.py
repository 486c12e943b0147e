import os
import tempfile
from pathlib import Path

import pytest

# The helper modules beside this file (small_models, cli_runner, ...) are on sys.path through
# pyproject's `pythonpath = ["tests"]`; the package itself is installed (pip install -e .).
from provmap.runtime_module.trust import trust_file  # stdlib only: no backend

# Tests never write to the user's own configuration: the trust list (~/.config/provmap), the
# cost cache and the tuning database (~/.cache/provmap) all go to one directory of this run,
# set here, before any test or the processes it starts can read the variables.  A test that
# needs its own (an empty trust list, a fresh cache) still sets them with monkeypatch.
_USER_TRUST = trust_file()  # the user's own list, before the redirection (read-only, at the end)
_HOME = Path(tempfile.mkdtemp(prefix="provmap-tests-"))
for _var, _name in (("PROVMAP_TRUST", "trusted"), ("PROVMAP_CACHE", "costs.sqlite"),
                    ("PROVMAP_TUNING_DB", "tuning"), ("MPLCONFIGDIR", "matplotlib")):
    os.environ[_var] = str(_HOME / _name)  # matplotlib (imported by TVM's tools) caches too
# The suite runs beside other jobs: a search's plumbing (plan reuse, cache hits) must not
# depend on the load.  Contention is still detected and recorded; the hygiene tests
# (test_contention*.py) set PROVMAP_CONTENTION=act to test what is done about it.
os.environ["PROVMAP_CONTENTION"] = "ignore"


# Fixtures more than one test file asks for.  They import inside the function so that a run of
# one file loads nothing it does not use, and keep the scope the files gave them: a
# module-scoped model is built once per file, as before, so no file sees another's leftovers.
#
# The artifacts below are session-scoped: each is built once for the whole run however many
# files read it (the CLI tests filed by feature share them), so no test may change one or write
# beside it; a test that edits an artifact repacks a copy into its own tmp_path.

@pytest.fixture(scope="session")
def squeezenet_cli_artifact(tmp_path_factory):
    """bundled:squeezenet on single:onnxruntime, built by the real CLI with its own trust list
    and cost cache."""
    from cli_runner import provmap

    d = tmp_path_factory.mktemp("cli_artifact")
    art = d / "sq.provmap"
    r = provmap("compile", "bundled:squeezenet", "-o", art, "--strategy", "single:onnxruntime",
                env={**os.environ, "PROVMAP_TRUST": str(d / "trusted"),
                     "PROVMAP_CACHE": str(d / "cost.sqlite")})
    assert r.returncode == 0, r.stderr
    return art


@pytest.fixture(scope="session")
def artifact(squeezenet_cli_artifact):
    """The artifact a CLI test reads and never changes (six feature files each had this alias;
    a file that needs another artifact under the name defines its own, as test_startup does)."""
    return squeezenet_cli_artifact


@pytest.fixture(scope="session")
def relu_art(tmp_path_factory):
    """x[4] -> Relu -> y compiled on single:onnxruntime (attack_kit.relu_artifact): no native
    code, so it runs without trust; relu.onnx beside it.  What the attacks and the malformed
    inputs start from."""
    from attack_kit import relu_artifact

    return relu_artifact(tmp_path_factory.mktemp("relu"))


@pytest.fixture(scope="session")
def received_tvm(tmp_path_factory):
    """A TVM artifact built under another trust list: on this one, it was received."""
    import onnx
    from attack_kit import relu_model
    from cli_runner import provmap

    d = tmp_path_factory.mktemp("recv")
    onnx.save(relu_model(), d / "relu.onnx")
    env = dict(os.environ, PROVMAP_TRUST=str(d / "builders-list"))
    r = provmap("compile", d / "relu.onnx", "-o", d / "tvm.provmap", "--strategy", "single:tvm",
                env=env)
    assert r.returncode == 0, r.stderr
    return d / "tvm.provmap"


@pytest.fixture(scope="session")
def int64_artifact(tmp_path_factory):
    """cli_models.int_model (int64 Add and Concat) on single:openvino: (its directory, the
    artifact, compile's stderr)."""
    from cli_models import int_model
    from cli_runner import provmap

    d = tmp_path_factory.mktemp("i64")
    model = int_model(d / "i64.onnx")
    art = d / "i64.provmap"
    r = provmap("compile", model, "-o", art, "--strategy", "single:openvino")
    assert r.returncode == 0, r.stderr
    return d, art, r.stderr


@pytest.fixture(scope="session")
def log_dir(tmp_path_factory):
    """x -> Log -> y on single:onnxruntime (log.onnx, log.provmap) and in.npz, whose inputs give
    a NaN and a -Inf (for the output statistics)."""
    import numpy as np
    import onnx
    from cli_runner import provmap
    from onnx import TensorProto, helper

    d = tmp_path_factory.mktemp("cli")
    g = helper.make_graph([helper.make_node("Log", ["x"], ["y"], name="log")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(m, d / "log.onnx")
    r = provmap("compile", d / "log.onnx", "-o", d / "log.provmap", "--strategy",
                "single:onnxruntime")
    assert r.returncode == 0, r.stderr
    np.savez(d / "in.npz", x=np.array([-1.0, 0.0, 1.0, np.e], np.float32))
    return d


@pytest.fixture(scope="session")
def log_relu_dir(tmp_path_factory):
    """x -> Log -> Relu -> y, split over two backends of different name lengths (Relu excluded
    from OpenVINO), so columns of compare and profile have something to misalign: m.onnx,
    m.provmap (the model embedded), compile.stderr, in.npz and inputs.txt (a text file where an
    .npz belongs)."""
    import numpy as np
    import onnx
    from cli_runner import provmap
    from onnx import TensorProto, helper

    d = tmp_path_factory.mktemp("names")
    g = helper.make_graph([helper.make_node("Log", ["x"], ["t"], name="log"),
                           helper.make_node("Relu", ["t"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(m, d / "m.onnx")
    r = provmap("compile", d / "m.onnx", "-o", d / "m.provmap", "--strategy",
                "greedy:openvino,onnxruntime", "--backend-option", "openvino.exclude_ops=Relu",
                "--embed-model")
    assert r.returncode == 0, r.stderr
    (d / "compile.stderr").write_text(r.stderr)
    np.savez(d / "in.npz", x=np.array([0.5, 1.0, 2.0, 3.0], np.float32))
    (d / "inputs.txt").write_text("x = 1.0, 2.0, 3.0, 4.0\n")
    return d


@pytest.fixture(scope="session")
def relu_embedded_dir(tmp_path_factory):
    """x[4] -> Relu -> y on single:onnxruntime with the model embedded (relu.onnx,
    relu.provmap) and in.npz: fast to build and to run."""
    import numpy as np
    import onnx
    from cli_runner import provmap
    from onnx import TensorProto, helper

    d = tmp_path_factory.mktemp("rob")
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(m, d / "relu.onnx")
    r = provmap("compile", d / "relu.onnx", "-o", d / "relu.provmap", "--strategy",
                "single:onnxruntime", "--embed-model")
    assert r.returncode == 0, r.stderr
    np.savez(d / "in.npz", x=np.array([-1.0, 0.0, 1.0, 2.0], np.float32))
    return d


@pytest.fixture
def own_config(tmp_path, monkeypatch):
    """A trust list and a cost cache of this test's own, for tests whose builds record a digest
    or a price (a file asks for it with `pytestmark = pytest.mark.usefixtures("own_config")`):
    the run-wide ones above would carry one test's entries into the next."""
    monkeypatch.setenv("PROVMAP_TRUST", str(tmp_path / "trusted"))
    monkeypatch.setenv("PROVMAP_CACHE", str(tmp_path / "cost.sqlite"))


@pytest.fixture(scope="module")
def transformer_model():
    """The bundled transformer block (its own seeded weights): the model most searches run on."""
    from provmap.provenance.bundled import zoo

    return zoo.transformer_block()


@pytest.fixture(scope="module")
def transformer_view(transformer_model):
    """The transformer block imported, from the very model object `transformer_model` gives
    (tests that compare against an ORT run of the model use both)."""
    from provmap.partition.model_source import load_view

    return load_view(transformer_model, "transformer")


@pytest.fixture(scope="module")
def squeezenet_view():
    """SqueezeNet with seed-0 random weights, imported.  Not the bundled file's constant
    weights: with those every logit is equal, and the softmax of 1000 equal ~7e9 logits is
    decided by float32 rounding, not by the plan."""
    from provmap.partition.model_source import load_view
    from provmap.provenance.bundled import zoo

    return load_view(zoo.with_random_weights(zoo.load_light("squeezenet"), seed=0), "squeezenet")


def _user_trust_entries_under(prefixes, since: str) -> list[str]:
    """Entries of the user's list recorded during this run for files in this run's directories
    (other processes on the machine may legitimately add their own meanwhile)."""
    import sqlite3

    if not _USER_TRUST.is_file():
        return []
    with open(_USER_TRUST, "rb") as f:
        legacy = f.read(16) != b"SQLite format 3\x00"
    if legacy:  # an old text list: `digest  # stamp note`
        rows = [(line.partition("#")[2].strip().partition(" ")[2],
                 line.partition("#")[2].strip().partition(" ")[0])
                for line in _USER_TRUST.read_text(errors="replace").splitlines()]
    else:
        con = sqlite3.connect(f"file:{_USER_TRUST}?mode=ro", uri=True)
        try:
            rows = con.execute("SELECT coalesce(path, note, ''), coalesce(added, '') "
                               "FROM trusted").fetchall()
        finally:
            con.close()
    return [p for p, added in rows if added >= since and any(s in p for s in prefixes)]


def pytest_sessionstart(session):
    import datetime

    session.config._provmap_started = datetime.datetime.now(datetime.timezone.utc) \
        .isoformat(timespec="seconds")


def pytest_sessionfinish(session, exitstatus):
    """The suite never writes to the user's trust list (issue 26): fail the run if it did.
    This run's own directory goes afterwards (it was left in /tmp by every run)."""
    import shutil

    try:
        _check_user_trust(session)
    finally:
        shutil.rmtree(_HOME, ignore_errors=True)


def _check_user_trust(session):
    factory = getattr(session.config, "_tmp_path_factory", None)
    prefixes = [str(_HOME)] + ([str(factory.getbasetemp())] if factory else [])
    since = getattr(session.config, "_provmap_started", "")
    try:
        leaked = _user_trust_entries_under(prefixes, since)
    except Exception as e:  # an unreadable list is not this run's doing
        print(f"\nconftest: could not read {_USER_TRUST}: {e}")
        return
    if leaked:
        print(f"\nconftest: the test run wrote {len(leaked)} entr(y/ies) to the user's trust list "
              f"{_USER_TRUST}: {leaked[:3]}")
        session.exitstatus = 1
