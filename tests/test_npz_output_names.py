"""Outputs written to an .npz by name (issue 52): a name is never taken for one of np.savez's
keywords (`allow_pickle` was silently missing from `run -o`, `file` failed with "savez() got
multiple values") and never becomes a member path out of the archive (`../../tmp/x`).  How
names map to keys: docs/cli.md, provenance/util/npz_write.py."""

from __future__ import annotations

import zipfile

import numpy as np
import onnx
from cli_runner import provmap
from onnx import TensorProto, helper

NAMES = {"allow_pickle": "Relu", "file": "Neg", "../../tmp/x": "Abs", "a%2Fb": "Identity"}


def _model() -> onnx.ModelProto:
    nodes = [helper.make_node(op, ["x"], [name], name=f"n{i}")
             for i, (name, op) in enumerate(NAMES.items())]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4])
                           for n in NAMES])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_run_writes_every_output_under_its_own_key_inside_the_archive(tmp_path):
    onnx.save(_model(), tmp_path / "m.onnx")
    art = tmp_path / "m.provmap"
    r = provmap("compile", tmp_path / "m.onnx", "-o", art, "--strategy", "single:onnxruntime")
    assert r.returncode == 0, r.stderr
    x = np.array([1.5, -2.0, 0.0, 3.0], np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    out = tmp_path / "out.npz"
    r = provmap("run", art, "--inputs", tmp_path / "in.npz", "-o", out)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    with zipfile.ZipFile(out) as z:
        names = z.namelist()
    assert all("/" not in n and "\\" not in n for n in names), names
    got = np.load(out)
    assert sorted(got.files) == sorted(["allow_pickle", "file", "..%2F..%2Ftmp%2Fx", "a%252Fb"])
    np.testing.assert_array_equal(got["allow_pickle"], np.maximum(x, 0))
    np.testing.assert_array_equal(got["file"], -x)
    np.testing.assert_array_equal(got["..%2F..%2Ftmp%2Fx"], np.abs(x))
    np.testing.assert_array_equal(got["a%252Fb"], x)
    warned = [ln for ln in r.stderr.splitlines() if ln.startswith("provmap: warning:")]
    assert len(warned) == 2 and "'..%2F..%2Ftmp%2Fx'" in warned[0] + warned[1], r.stderr


def test_a_name_written_escaped_reads_back_as_itself(tmp_path):
    """bisect's reproducer stores boundary tensors (`attn/Softmax_out`) and `run --save-inputs`
    inputs by these keys; reading them back (check_reproducer, `--inputs`) gives the names."""
    from provmap.provenance.util.npz_write import npz_key, npz_name, read_npz, write_npz

    names = ["attn/Softmax_out", "a%b", "x\\y", "plain", "é/ü", "\x01z", "../../tmp/x"]
    for n in names:
        assert npz_name(npz_key(n)) == n
    with open(tmp_path / "a.npz", "wb") as f:
        write_npz(f, {n: np.full(2, k) for k, n in enumerate(names)})
    got = read_npz(tmp_path / "a.npz")
    assert list(got) == names and [int(v[0]) for v in got.values()] == list(range(len(names)))
