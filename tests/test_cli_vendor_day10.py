"""Issue 36's tenth new-user afternoon, through the real CLI."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import onnx
from onnx import TensorProto, helper


def _children(pid: int) -> list[int]:
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


def _small_cnn(path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = onnx.numpy_helper.from_array(__import__("numpy").full((4, 3, 3, 3), 0.1, "float32"), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["y"], name="gap")]
    g = helper.make_graph(nodes, "cnn", [x], [y], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              path)


def test_ctrl_c_while_the_measuring_worker_imports_is_one_line(tmp_path):
    """Ctrl-C reaches the terminal's whole process group; the spawned measuring worker was
    still importing (numpy, tvm, torch through tvm_ffi) with Python's default handler and
    printed a 50-line traceback above the CLI's `provmap: interrupted`."""
    model = tmp_path / "cnn.onnx"
    _small_cnn(model)
    env = {**os.environ, "PROVMAP_CACHE": str(tmp_path / "c.sqlite")}
    p = subprocess.Popen([sys.executable, "-m", "provmap.cli.main", "compile", model, "-o",
                          tmp_path / "x.provmap", "--search-budget", "60"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         start_new_session=True)  # its own group, as a shell's job
    try:
        deadline = time.monotonic() + 240
        while p.poll() is None and not _children(p.pid) and time.monotonic() < deadline:
            time.sleep(0.002)
        assert p.poll() is None, p.communicate()
        time.sleep(0.3)  # the worker is inside its imports (they take seconds)
        os.killpg(p.pid, signal.SIGINT)
        _, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert p.returncode == 130 and err.strip().splitlines()[-1] == "provmap: interrupted", err
    assert not (tmp_path / "x.provmap").exists()


def test_bisect_judges_the_whole_model_against_the_reference_compare_uses(tmp_path):
    """bisect's reference had every intermediate exposed, which keeps ONNX Runtime from fusing
    a QDQ model into int8 kernels: it said "matches ... max abs 0" (exit 0) where compare, on
    the same inputs, found OpenVINO one quantization step off ONNX Runtime (exit 1).  The two
    commands now report the same difference on every model output, and agree on the verdict."""
    import json

    import numpy as np
    from cli_runner import provmap

    model = _qdq_cnn(tmp_path)
    inputs = tmp_path / "in.npz"
    np.savez(inputs, img=np.random.default_rng(100).standard_normal((2, 3, 32, 32))
             .astype("float32"))
    art = tmp_path / "qdq.provmap"
    r = provmap("compile", model, "-o", art, "--strategy", "single:openvino",
                "--input-shape", "img=2x3x32x32")
    assert r.returncode == 0, r.stderr
    c = provmap("compare", art, "--model", model, "--inputs", inputs, "--quant-steps", "0",
                "--json")
    b = provmap("bisect", model, "--backend", "openvino", "--inputs", inputs, "--quant-steps",
                "0", "--json", "-o", tmp_path / "bis", "--input-shape", "img=2x3x32x32")
    assert c.returncode in (0, 1) and b.returncode in (0, 1), (c.stderr, b.stderr)
    compared = {t["tensor"]: t for t in json.loads(c.stdout)["tensors"] if t["model_output"]}
    bisected = {t["tensor"]: t for t in json.loads(b.stdout)["outputs"]}
    assert compared.keys() == bisected.keys() == {"prob"}
    for name, t in compared.items():
        assert bisected[name]["max_abs"] == t["max_abs"], (name, bisected[name], t)
        assert bisected[name]["ok"] == t["ok"]
    assert b.returncode == c.returncode, (b.stdout, c.stdout)


def _qdq_cnn(d):
    """The tenth afternoon's model: Conv/Relu/MaxPool/Conv/Relu/GAP/MatMul/Softmax through
    quantize_static (QDQ, per channel).  On the afternoon's host ONNX Runtime's fused int8
    kernels and its unfused graph gave Softmax outputs one step (1/255) apart."""
    import warnings

    import numpy as np
    from onnx import numpy_helper as nh
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)

    rng = np.random.default_rng(0)
    w = {n: nh.from_array((rng.standard_normal(s) * k).astype(np.float32), n)
         for n, s, k in (("W1", (8, 3, 3, 3), 0.3), ("B1", (8,), 0.1), ("W2", (16, 8, 3, 3), 0.2),
                         ("B2", (16,), 0.1), ("Wf", (16, 10), 0.3))}
    mk = helper.make_node
    g = helper.make_graph([
        mk("Conv", ["img", "W1", "B1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        mk("Relu", ["c1"], ["r1"], name="relu1"),
        mk("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2], name="pool1"),
        mk("Conv", ["p1", "W2", "B2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        mk("Relu", ["c2"], ["r2"], name="relu2"),
        mk("GlobalAveragePool", ["r2"], ["gap"], name="gap"),
        mk("Flatten", ["gap"], ["fl"], name="flat"),
        mk("MatMul", ["fl", "Wf"], ["logits"], name="fc"),
        mk("Softmax", ["logits"], ["prob"], axis=-1, name="sm")], "smallcnn",
        [helper.make_tensor_value_info("img", TensorProto.FLOAT, ["N", 3, 32, 32])],
        [helper.make_tensor_value_info("prob", TensorProto.FLOAT, ["N", 10])], list(w.values()))
    src, dst = d / "cnn.onnx", d / "cnn_qdq.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              src)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{"img": np.random.default_rng(i).standard_normal((1, 3, 32, 32))
                                  .astype(np.float32)} for i in range(4)])

        def get_next(self):
            return next(self.batches, None)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ,
                        per_channel=True, activation_type=QuantType.QUInt8,
                        weight_type=QuantType.QInt8)
    return dst


def test_ctrl_c_inside_a_librarys_import_waits_for_the_import_to_finish(tmp_path):
    """A KeyboardInterrupt raised inside onnx's import (Python code its pybind11 init runs)
    left it half-built and the process died of SIGSEGV with an empty stderr (CI, once; 1 in 40
    Ctrl-Cs at start-up here).  With the CLI's handler a library's import runs to its end and
    the Ctrl-C is raised after it, once; provmap's own modules stay interruptible."""
    pkg = tmp_path / "slowlib"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "import os, signal\n"
        "from . import inner\n"
        "done = True\n")
    (pkg / "inner.py").write_text(
        "import os, signal\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "total = sum(range(200000))  # a KeyboardInterrupt would land here\n")
    code = f"""if True:
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        from provmap.provenance.util import interrupt
        interrupt.install()
        try:
            import slowlib
        except KeyboardInterrupt:
            print("raised after:", "slowlib.inner" in sys.modules,
                  getattr(sys.modules.get("slowlib.inner"), "total", None))
        print("interrupted:", interrupt.interrupted())
        import json  # an import after the Ctrl-C was handled does not raise it again
        print("later import ok")
    """
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert r.stdout.splitlines() == ["raised after: True 19999900000", "interrupted: True",
                                     "later import ok"], r.stdout


def test_a_symbolic_or_wrong_rank_stale_value_info_is_said_too(tmp_path):
    """value_info ["N", 99] for a computed [N, 16], or of another rank, was dropped without a
    word, where [2, 99] warned (the tenth afternoon; docs/guide.md promises the warning)."""
    from cli_runner import provmap
    from test_cli_vendor_day6 import _saved_model

    model = _saved_model(tmp_path, [helper.make_node("Relu", ["x"], ["a"], name="relu"),
                                    helper.make_node("Sigmoid", ["a"], ["b"], name="sig"),
                                    helper.make_node("Neg", ["b"], ["y"], name="neg")],
                         [("x", TensorProto.FLOAT, ["N", 4, 8])],
                         [("y", TensorProto.FLOAT, ["N", 4, 8])],
                         value_info=[("a", TensorProto.FLOAT, ["N", 4, 2]),
                                     ("b", TensorProto.FLOAT, ["N", 4, 8, 1])])
    r = provmap("compile", model, "-o", tmp_path / "a.provmap", "--strategy",
                "single:onnxruntime", "--input-shape", "x=2x4x8")
    assert r.returncode == 0, r.stderr
    assert "tensor 'a' is declared [N, 4, 2] in value_info but the model computes" in r.stderr
    assert "tensor 'b' is declared [N, 4, 8, 1] in value_info but the model computes" in r.stderr


def test_an_artifact_given_where_the_onnx_model_goes_is_named_as_such(tmp_path):
    """`bisect x.provmap` said "not a readable ONNX model (DecodeError: ... Wire format was
    corrupt)" (tenth afternoon)."""
    from cli_runner import provmap, refused

    model = _qdq_cnn(tmp_path)
    art = tmp_path / "a.provmap"
    assert provmap("compile", model, "-o", art, "--strategy", "single:onnxruntime",
                   "--input-shape", "img=1x3x32x32").returncode == 0
    for argv in (("bisect", art, "--backend", "openvino"),
                 ("compile", art, "-o", tmp_path / "b.provmap")):
        refused(provmap(*argv), f"{art}: a provmap artifact, not an ONNX model; give the "
                    "ONNX model it was compiled from")
