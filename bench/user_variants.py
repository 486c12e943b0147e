"""The user-sized models as vendors ship them: `--user-models resnet50+qdq,bert_base+qdyn,...`
(issue 51).  Each variant is made from the exported float model with ONNX Runtime's own tools,
as their documentation shows: `qdq` quantize_static in QDQ format, per channel, calibrated on
seeded random batches; `qdyn` quantize_dynamic (DynamicQuantizeLinear + MatMulInteger /
ConvInteger); `fp16` convert_float_to_float16 keeping float32 inputs and outputs.

Why here and not in the export child: the tools are torch-free, and a variant is made once from
the cached float export (NAME+VARIANT.onnx beside it), so a second bench reads the file.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from provmap.provenance.util.errors import ProvmapError

VARIANTS = {"qdq": "quantize_static, QDQ, per channel", "qdyn": "quantize_dynamic",
            "fp16": "convert_float_to_float16 (keep_io_types)"}


def split(name: str) -> tuple[str, str | None]:
    """"resnet50+qdq" -> ("resnet50", "qdq"); a plain name -> (name, None)."""
    base, _, variant = name.partition("+")
    if variant and variant not in VARIANTS:
        raise ProvmapError(f"--user-models: unknown variant {variant!r} in {name!r}; known: "
                           f"{', '.join(VARIANTS)}")
    return base, variant or None


def random_feeds(model, seed: int) -> dict:
    """Seeded inputs of the model's declared types: normal floats, token ids under 1000, masks
    of ones (an attention mask of random ints would mask most tokens)."""
    from onnx import TensorProto
    from onnx.helper import tensor_dtype_to_np_dtype

    rng = np.random.default_rng(seed)
    inits = {i.name for i in model.graph.initializer}
    out = {}
    for i in model.graph.input:
        if i.name in inits:
            continue
        t = i.type.tensor_type
        shape = [d.dim_value if d.dim_value > 0 else 1 for d in t.shape.dim]
        dt = tensor_dtype_to_np_dtype(t.elem_type)
        if t.elem_type in (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE):
            out[i.name] = rng.standard_normal(shape).astype(dt)
        elif "mask" in i.name:
            out[i.name] = np.ones(shape, dt)
        else:
            out[i.name] = rng.integers(0, 1000, shape).astype(dt)
    return out


def make(base_path: str, variant: str, say=None) -> str:
    """NAME+VARIANT.onnx beside the float export, made once (atomically)."""
    import onnx

    from .user_models import quantize, to_fp16

    src = Path(base_path)
    dst = src.with_name(f"{src.stem}+{variant}.onnx")
    if dst.exists():
        return str(dst)
    if say is not None:
        say(f"making the {variant} variant with ONNX Runtime's tools ({VARIANTS[variant]})")
    model = onnx.load(str(src))
    if variant == "fp16":
        out = to_fp16(model)
    else:
        calib = [random_feeds(model, 100 + i) for i in range(8)]
        out = quantize(model, "dynamic" if variant == "qdyn" else "qdq", calib,
                       per_channel=variant == "qdq")
    tmp = dst.with_name(dst.name + ".tmp")
    onnx.save(out, str(tmp))
    os.replace(tmp, dst)
    return str(dst)
