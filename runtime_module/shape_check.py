"""Whether ONNX Runtime itself runs a model at the input shapes a user gave.

A BERT export with 64 positions given `--input-shape input_ids=1x65` cannot run anywhere (ONNX
Runtime: "invalid expand shape"), but TVM's import then left its embeddings untyped, and the
refusal blamed a backend: "Add is not supported by openvino" (the eleventh afternoon).  When a
compile with given shapes fails, one run of the model on ONNX Runtime, zeros at those shapes,
tells the two apart.  Only on that failure path: it costs one inference."""

from __future__ import annotations

import numpy as np
import onnx

from provmap.provenance.util.dtypes import onnx_dtype
from provmap.provenance.weights import serialize


# ONNX Runtime's refusals of the model itself, at any shape: another backend may well run it,
# so the original failure is the one to show
_NOT_ABOUT_SHAPES = ("NOT_IMPLEMENTED", "No Op registered", "Could not find an implementation",
                     "is not a registered function/op")


def ort_refuses(model: onnx.ModelProto) -> str | None:
    """ONNX Runtime's own words when it cannot run `model` on zeros of its input shapes
    (symbolic dimensions as 1), else None (it runs, or ORT cannot even be asked)."""
    try:
        import onnxruntime as ort
    except ImportError:  # pragma: no cover - a dependency
        return None
    init = {t.name for t in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in init or not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in tt.shape.dim]
        try:
            feeds[vi.name] = np.zeros(shape, onnx_dtype(tt.elem_type))
        except Exception:  # noqa: BLE001 - a type zeros cannot stand for: no verdict
            return None
    so = ort.SessionOptions()
    so.log_severity_level = 4
    try:
        data = serialize(model)
    except Exception:  # noqa: BLE001 - over protobuf's 2 GB: no verdict on the shapes
        return None
    try:
        sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        sess.run(None, feeds)
    except Exception as e:  # noqa: BLE001 - its message is the answer
        text = " ".join(str(e).split())
        if any(w in text for w in _NOT_ABOUT_SHAPES):
            return None  # an op ORT lacks says nothing of the shapes; the first error stands
        for prefix in ("[ONNXRuntimeError] :",):
            if text.startswith(prefix):  # "[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : why"
                text = text.split(":", 3)[-1].strip()
        return text[:400]
    return None
