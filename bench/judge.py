"""How the bench judges a run's outputs against a case's expected ones.

onnx's runner compares every output with one rtol/atol (1e-3 / 1e-7 for its node cases).  Two
kinds of output cannot be held to that without counting a correct library as wrong, so each gets
a bound of its own, taken from the model and the case's inputs, never a looser tolerance for all:

- Quantized 8-bit outputs (int8 / uint8 written by a quantization op: DynamicQuantizeLinear,
  QuantizeLinear, the QLinear* ops) are judged in quantization steps, one step apart passing, as
  `provmap compare --quant-steps` and the suite do (workbench/compare.py): libraries round the
  same real value to neighbouring steps (a tie, a scale rounded in another order), a legitimate
  difference.  OpenVINO's DynamicQuantizeLinear is one step off ONNX's on 1 of 6 values of
  onnx's test_dynamicquantizelinear.  An int8 output of any other op (Add, Cast, BitShift) stays
  exact.
- DFT and STFT outputs get an absolute error bound scaled to the transform.  Each output element
  is a sum of N products x_k * w_k with |w_k| = 1; summed in the output's float type, recursive
  summation's error bound (Higham, Accuracy and Stability of Numerical Algorithms, 4.2) is
  gamma_N * sum_k |x_k| ~ N * eps * sum_k |x_k| <= N * eps * N * max|x|, where eps is the
  output type's machine epsilon and max|x| the largest input magnitude (times the window's
  for STFT).  An inverse transform divides by N, and so does its bound.  An FFT's error is
  smaller (log N instead of N), so the naive sum's bound admits every algorithm a library may
  choose while still catching a wrong transform (a wrong twiddle or bin is off by about
  max|x|).  onnx's expected outputs are float64 transforms cast to float32: against them a
  float32 DFT of length 10 with inputs up to 99 is off by up to 2.4e-4 in ONNX Runtime, far
  over atol 1e-7, as plain ONNX Runtime is.
  bound = N^2 * eps * max|x| (forward), N * eps * max|x| (inverse); N the transform length.
"""

from __future__ import annotations

import numpy as np

from provmap.partition.measure import DEFAULT_QUANT_STEPS
from provmap.provenance.util.attrs import node_attr as _attr

#: Ops whose 8-bit integer outputs are quantized values (judged in steps).
QUANT_OPS = frozenset({"DynamicQuantizeLinear", "QuantizeLinear", "QLinearConv", "QLinearMatMul",
                       "QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu",
                       "QLinearAveragePool", "QLinearGlobalAveragePool", "QLinearConcat",
                       "QGemm", "QLinearSoftmax"})
QUANT_STEPS = DEFAULT_QUANT_STEPS  # the accuracy guard's and compare's
_QUANTIZED = ("int8", "uint8")


class Mismatch(AssertionError):
    pass


def _value(name, values):
    v = values.get(name) if name else None
    return None if v is None or isinstance(v, list) else np.asarray(v)


def _transform_bound(node, values: dict, expected, opset: int, dtype) -> float | None:
    """The DFT / STFT error bound of the module docstring; None when the data is unknown."""
    x = _value(node.input[0], values)
    if x is None or x.size == 0 or x.dtype.kind not in "fc":
        return None
    top = float(np.max(np.abs(x)))
    n = 0
    if node.op_type == "DFT":
        axis = _attr(node, "axis", 1)
        if opset >= 20:
            given = _value(node.input[2] if len(node.input) > 2 else "", values)
            axis = int(given) if given is not None else -2
        length = _value(node.input[1] if len(node.input) > 1 else "", values)
        n = max(int(length) if length is not None and length.size else 0, x.shape[axis],
                expected.shape[axis] if expected is not None and expected.ndim == x.ndim else 0)
        inverse = bool(_attr(node, "inverse", 0))
    else:  # STFT(signal, frame_step, window, frame_length)
        window = _value(node.input[2] if len(node.input) > 2 else "", values)
        length = _value(node.input[3] if len(node.input) > 3 else "", values)
        if window is not None and window.size:
            n, top = window.shape[0], top * max(1.0, float(np.max(np.abs(window))))
        n = int(length) if length is not None and length.size else (n or x.shape[1])
        inverse = False
    eps = float(np.finfo(dtype).eps)
    return n * eps * top * (1 if inverse else n)


def output_bounds(model, inputs: list, expected: list) -> list[dict]:
    """Per graph output: {} (the case's rtol/atol), {"steps": k} (quantized) or {"atol": x}
    (a transform's bound, when above the case's atol)."""
    producer = {o: n for n in model.graph.node for o in n.output if o}
    values = {i.name: x for i, x in zip(model.graph.input, inputs)}
    if any(n.op_type in ("DFT", "STFT") for n in model.graph.node):  # only they read values
        from onnx import numpy_helper

        for t in model.graph.initializer:
            values.setdefault(t.name, numpy_helper.to_array(t))
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    out = []
    for k, o in enumerate(model.graph.output):
        node, ref = producer.get(o.name), expected[k] if k < len(expected) else None
        bound: dict = {}
        if node is not None and isinstance(ref, np.ndarray):
            if node.op_type in QUANT_OPS and ref.dtype.name in _QUANTIZED:
                bound = {"steps": QUANT_STEPS}
            elif node.op_type in ("DFT", "STFT") and node.domain in ("", "ai.onnx") \
                    and ref.dtype.kind == "f":
                atol = _transform_bound(node, values, ref, opset, ref.dtype)
                bound = {"atol": atol} if atol is not None else {}
        out.append(bound)
    return out


def compare(expected: list, actual: list, rtol: float, atol: float, where: str = "output",
            bounds: list | None = None) -> None:
    """onnx's runner's check (Runner.assert_similar_outputs), with `bounds` (output_bounds) per
    output where given."""
    if len(actual) != len(expected):
        raise Mismatch(f"{len(actual)} {where}s, expected {len(expected)}")
    for i, (ref, out) in enumerate(zip(expected, actual)):
        w = f"{where} {i}"
        if isinstance(ref, list) or isinstance(out, (list, tuple)):
            if not (isinstance(ref, list) and isinstance(out, (list, tuple))):
                raise Mismatch(f"{w}: {type(out).__name__}, expected {type(ref).__name__}")
            compare(ref, list(out), rtol, atol, where=f"{w} element")
            continue
        if ref is None or out is None:
            if ref is not out:
                raise Mismatch(f"{w}: {type(out).__name__}, expected {type(ref).__name__}")
            continue
        out = np.asarray(out)
        if out.shape != ref.shape:
            raise Mismatch(f"{w}: shape {list(out.shape)}, expected {list(ref.shape)}")
        if ref.dtype == object:
            if not np.array_equal(out.astype(object), ref):
                raise Mismatch(f"{w}: strings differ")
            continue
        if out.dtype != ref.dtype:
            raise Mismatch(f"{w}: dtype {out.dtype}, expected {ref.dtype}")
        bound = (bounds[i] if bounds and i < len(bounds) else None) or {}
        if "steps" in bound:
            steps = np.abs(out.astype(np.int64) - ref.astype(np.int64))
            if steps.size and int(steps.max()) > bound["steps"]:
                raise Mismatch(f"{w}: values differ ({int((steps > bound['steps']).sum())} / "
                               f"{steps.size} more than {bound['steps']} quantization step "
                               f"apart; max {int(steps.max())})")
            continue
        # Two ULPs of a 16-bit float output's type: fp16 rounded after a few operations in another
        # order lands a rounding or two apart (test_attention_4d_causal_fp16_expanded on TVM:
        # 2 of 192 values 4.9e-4 off below 0.5); rtol 1e-3 is under two fp16 ULPs (2 ** -9).
        r = max(rtol, {"bfloat16": 2 ** -6, "float16": 2 ** -9}.get(out.dtype.name, 0))
        a = max(atol, bound.get("atol", 0.0))
        if out.dtype.kind == "V":  # ml_dtypes (bfloat16, float8, int4): no promotion to float
            out, ref = out.astype(np.float32), ref.astype(np.float32)
        try:
            np.testing.assert_allclose(out, ref, rtol=r, atol=a)  # equal_nan=True
        except AssertionError as e:
            lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
            detail = [ln for ln in lines if ln.startswith(("Mismatched", "Max abs"))
                      or "location mismatch" in ln]
            raise Mismatch(f"{w}: values differ ({'; '.join(detail) or lines[1]})") from None
