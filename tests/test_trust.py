"""Reading an artifact never runs code from it; running native code from one needs trust.

The attack this guards against: an artifact whose TVM library is replaced by one that does
something when loaded, with the member hashes recomputed (whoever writes an artifact writes
its hashes).  The crafted library here writes a marker file from a constructor at dlopen.
Trust is never gained by reading and saving a received artifact, and `--trust` on one without
native code says there was nothing to trust.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile

import numpy as np
import onnx
import pytest
from cli_runner import one_error, provmap
from onnx import TensorProto, helper

from provmap.partition.compile import compile_model
from provmap.provenance.util.errors import ProvmapError
from provmap.runtime_module import trust
from provmap.runtime_module.artifact import read_artifact
from provmap.runtime_module.artifact_edit import with_schedule
from provmap.runtime_module.module import load

_EVIL_C = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void on_load(void) {
    const char *p = getenv("PROVMAP_TEST_MARKER");
    if (p) { FILE *f = fopen(p, "w"); if (f) { fputs("loaded", f); fclose(f); } }
}
"""


def _model():
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.fixture
def received(tmp_path, monkeypatch):
    """A TVM artifact whose lib.so was swapped for the crafted one, as received from elsewhere
    (saved without asking for trust, and the trust list is emptied anyway)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.fail("a C compiler is needed to build the crafted library (Debian: gcc)")
    src = tmp_path / "evil.c"
    src.write_text(_EVIL_C)
    lib = tmp_path / "evil.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    trust_list = tmp_path / "trusted"
    marker = tmp_path / "marker"
    monkeypatch.setenv("PROVMAP_TRUST", str(trust_list))
    monkeypatch.setenv("PROVMAP_TEST_MARKER", str(marker))
    onnx.save(_model(), tmp_path / "m.onnx")
    art = compile_model(tmp_path / "m.onnx", "single:tvm", embed_model=True)
    art.members["partitions/p0/lib.so"] = lib.read_bytes()
    art.partition("p0")["files"]["partitions/p0/lib.so"] = \
        hashlib.sha256(art.members["partitions/p0/lib.so"]).hexdigest()
    path = tmp_path / "received.provmap"
    art.save(path)  # hashes recomputed: the file verifies
    trust_list.write_text("")
    return path, marker, tmp_path


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "provmap.cli.main", *map(str, args)],
                          capture_output=True, text=True, env=dict(os.environ))


def test_reading_commands_never_load_partition_code(received):
    path, marker, d = received
    for args in (("inspect", path), ("inspect", path, "--json"), ("lookup", path, "--onnx-node",
                 "relu"), ("explain", path), ("annotate", path, "-o", d / "a.onnx"),
                 ("report", path, "-o", d / "r.html")):
        r = _cli(*args)
        assert r.returncode == 0, (args, r.stderr)
        assert not marker.exists(), f"provmap {args[0]} ran code from the artifact"


def test_running_untrusted_native_code_is_refused_with_the_way_out(received):
    path, marker, _ = received
    r = _cli("run", path, "--random")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "refused to load partition p0 (tvm)" in r.stderr and "provmap trust" in r.stderr
    assert not marker.exists()
    with pytest.raises(ProvmapError, match="refused to load partition p0"):
        load(path)
    assert not marker.exists()


def test_inspection_only_modules_refuse_to_run(received):
    path, marker, _ = received
    mod = load(path, runnable=False)
    assert mod.lookup.onnx_node("relu")
    with pytest.raises(ProvmapError, match="inspection only"):
        mod.run({"x": np.zeros((2, 3), np.float32)})
    assert not marker.exists()


def test_trust_is_what_lets_the_code_load(received):
    path, marker, _ = received
    r = _cli("trust", path)
    assert r.returncode == 0 and "recorded" in r.stdout, r.stderr
    _cli("run", path, "--random")  # the crafted library is not a TVM module: the run fails
    assert marker.exists()  # ...but only after trust let it load


def test_artifacts_built_here_run_without_asking(tmp_path, monkeypatch):
    monkeypatch.setenv("PROVMAP_TRUST", str(tmp_path / "trusted"))
    path = tmp_path / "own.provmap"
    compile_model(_model(), "single:tvm", out=path)
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_array_equal(load(path).run({"x": x})["y"], np.maximum(x, 0))


def test_member_names_leaving_the_artifact_are_refused(tmp_path):
    data = b"x"
    import hashlib

    manifest = {"format": "provmap-artifact", "format_version": 1,
                "members": {"../evil": hashlib.sha256(data).hexdigest()}}
    path = tmp_path / "bad.provmap"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("manifest.json", json.dumps(manifest))
        z.writestr("../evil", data)
    with pytest.raises(ProvmapError, match=r"members\['\.\./evil'\]: .* is not a member name "
                       "inside the artifact"):
        read_artifact(path)


@pytest.fixture(scope="module")
def artifact(squeezenet_cli_artifact):
    return squeezenet_cli_artifact


@pytest.mark.parametrize("how", ["module", "with_schedule"])
def test_resaving_a_received_artifact_never_trusts_it(received_tvm, tmp_path, monkeypatch, how):
    monkeypatch.setenv("PROVMAP_TRUST", str(tmp_path / "mine"))
    copy = tmp_path / "copy.provmap"
    if how == "module":
        load(received_tvm, runnable=False).save(copy)
    else:
        with_schedule(read_artifact(received_tvm), None).save(copy)
    digest = read_artifact(copy).digest
    assert digest == read_artifact(received_tvm).digest  # the same artifact...
    assert not trust.is_trusted(digest) and trust.entries() == []  # ...and still not ours
    r = provmap("run", copy, "--random")
    one_error(r, "refused to load partition p0 (tvm)")


def test_trust_on_an_artifact_without_native_code_says_there_was_nothing_to_trust(artifact):
    """single:onnxruntime holds an ONNX file, no shared library: --trust vouched for nothing,
    and the user was not told so.  Said once; the run goes on (a script may pass --trust to
    every artifact it runs)."""
    r = provmap("run", artifact, "--random", "--trust")
    assert r.returncode == 0, r.stderr
    notes = [ln for ln in r.stderr.splitlines() if "nothing to trust" in ln]
    assert notes == [f"provmap: warning: --trust: {artifact} holds no native code (its "
                     "partitions run on onnxruntime), so there was nothing to trust"], r.stderr
    assert "nothing to trust" not in provmap("run", artifact, "--random").stderr
