"""uint8 x int8 kernels saturate int16 pair sums on CPUs without VNNI (provenance/int8_pairs.py).

Issue 32: on an AMD EPYC without VNNI the suite failed because OpenVINO's MatMulInteger lost
1,633 integer steps on one logit of quantize_dynamic's convnet.  These tests pin down the
library behaviour that makes that legitimate, the warning provmap gives for it, and that
7-bit weights (reduce_range=True) make every backend agree with ONNX Runtime on every host.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

from provmap.partition.compile import compile_model
from provmap.provenance.int8_pairs import SAFE_WEIGHT, can_saturate, saturating_nodes
from provmap.runtime_module.host import int8_pairs_exact
from provmap.runtime_module.module import load
from test_published_models import _feeds, convnet, mlp, plain

# Builds record their digest in the trust list and their prices in the cache: this test's own.
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.usefixtures("own_config")]

K = 64


def _matmul_integer(w: np.ndarray) -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node("MatMulInteger", ["x", "w"], ["y"], name="mmi")], "g",
                          [helper.make_tensor_value_info("x", TP.UINT8, [4, K])],
                          [helper.make_tensor_value_info("y", TP.INT32, [4, w.shape[1]])],
                          [numpy_helper.from_array(w, "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _dynamic(source: onnx.ModelProto, tmp_path, reduce_range: bool) -> onnx.ModelProto:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src, dst = tmp_path / "f.onnx", tmp_path / f"q{int(reduce_range)}.onnx"
    onnx.save(source, src)
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, reduce_range=reduce_range)
    return onnx.load(dst)


def test_the_libraries_disagree_exactly_where_the_cpu_lacks_vnni():
    """255 x (127, 100) pairs: 57,885 does not fit int16.  Without VNNI one of the two libraries
    saturates (ORT on this MatMulInteger, measured); with VNNI both give the exact sum.  When
    this fails on a CPU without VNNI, the libraries changed: revisit int8_pairs.py."""
    w = np.full((K, 8), 127, np.int8)
    w[1::2] = 100
    model = _matmul_integer(w)
    assert [n.name for n in saturating_nodes(model)] == ["mmi"]
    x = {"x": np.full((4, K), 255, np.uint8)}
    exact = 255 * (127 + 100) * (K // 2)
    got = {b: int(plain(b, model, x)[0, 0]) for b in ("onnxruntime", "openvino")}
    if int8_pairs_exact():
        assert got == {"onnxruntime": exact, "openvino": exact}
    else:
        assert min(got.values()) < exact and max(got.values()) <= exact, got


def test_seven_bit_weights_cannot_saturate():
    w = np.full((K, 8), SAFE_WEIGHT, np.int8)
    model = _matmul_integer(w)
    assert not can_saturate(model)
    x = {"x": np.full((4, K), 255, np.uint8)}
    for b in ("onnxruntime", "openvino", "tvm"):
        assert int(plain(b, model, x)[0, 0]) == 255 * SAFE_WEIGHT * K


def test_the_import_warns_once_naming_the_first_node(tmp_path):
    model = _dynamic(convnet(), tmp_path, reduce_range=False)
    art = compile_model(model, strategy="single:onnxruntime")
    notes = [w for w in art.manifest["warnings"] if "saturating int16 pairs" in w]
    assert len(notes) == 1 and "'conv1_quant' (ConvInteger) and 2 more" in notes[0], notes


@pytest.mark.parametrize("backend", ["openvino", "tvm"])
@pytest.mark.parametrize("source", [convnet, mlp], ids=["conv", "mlp"])
def test_reduce_range_models_match_onnxruntime_on_every_host(source, backend, tmp_path):
    """With 7-bit weights no pair saturates: every backend provmap runs it on gives ONNX
    Runtime's numbers within one dynamic activation step (about 6/255 x |w| on these inputs;
    measured: 2.4e-7), on VNNI and non-VNNI hosts alike.  TVM has no ConvInteger: refused."""
    model = _dynamic(source(), tmp_path, reduce_range=True)
    assert not can_saturate(model)
    feeds = _feeds(model)
    if (backend, source) == ("tvm", convnet):
        with pytest.raises(Exception, match="ConvInteger"):
            compile_model(model, strategy=f"single:{backend}")
        return
    compile_model(model, strategy=f"single:{backend}").save(tmp_path / "a.provmap",
                                                               record_built=True)
    ours = load(tmp_path / "a.provmap").run(feeds)["y"]
    want = plain("onnxruntime", model, feeds)
    assert np.abs(ours - want).max() <= 1e-2, np.abs(ours - want).max()
