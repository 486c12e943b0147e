"""ONNX element types <-> the dtype names numpy, TVM and the backends use: one table for all.

numpy has no bfloat16 (ml_dtypes supplies it, but `onnx.helper` does not map it), and a
string tensor is numpy's "object"; every place that converted on its own got one of those
wrong at some point, so the conversions live here."""

from __future__ import annotations

import numpy as np

# onnx is imported inside the conversions: reading an artifact sizes tensors with itemsize()
# alone, and an offline command must not pay onnx's import (issue 36's start-up).


def onnx_dtype(elem_type: int) -> str:
    """Dtype name of an ONNX element type ("float32", "bfloat16", "object" for STRING).

    Raises (KeyError/ValueError from onnx) for an element type numpy cannot hold."""
    import onnx

    if elem_type == onnx.TensorProto.BFLOAT16:
        return "bfloat16"
    return str(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)))


def onnx_elem(dtype: str) -> int:
    """ONNX element type of a dtype name; the inverse of `onnx_dtype`."""
    import onnx

    if str(dtype) == "bfloat16":
        return onnx.TensorProto.BFLOAT16
    return onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def itemsize(dtype: str) -> int:
    """Bytes per element, including the ml_dtypes types (bfloat16, float8 variants)."""
    try:
        return np.dtype(dtype).itemsize
    except TypeError:
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, dtype)).itemsize
