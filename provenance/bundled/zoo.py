"""Bundled test models: the ONNX "light" model zoo shipped inside the onnx package, and a
synthetic transformer encoder block.

Nothing here downloads anything.  The light models live in the installed onnx package
(``onnx/backend/test/data/light``); they are real network topologies (ResNet-50, SqueezeNet,
VGG-19, Inception-v1, AlexNet) whose weights were replaced by ``ConstantOfShape`` nodes, so all
weights of one tensor are equal and every output class gets the same score (SqueezeNet's logits
are all about 6.8e9).  That is fine for import/partition tests, but it makes numerical
comparisons meaningless: a correct backend fails ``compare`` on rounding noise at 1e9, and every
example in the docs would show it.  So ``bundled:NAME`` is the light model with
:func:`with_random_weights` applied, seeded from the model's name (:func:`bundled_seed`), the same
in every process; ``bundled:NAME:original`` is the file as onnx ships it.

Quirks of the light models worth knowing (they are IR version 3, opset 9):

* every initializer is also listed in ``graph.input`` (required before IR 4), so "the model's
  inputs" means graph inputs that are *not* initializers (see :func:`random_inputs`);
* the weights are ``ConstantOfShape(<name>__SHAPE)`` where ``<name>__SHAPE`` is an int64
  initializer; a few real-valued initializers (biases, early BatchNorm statistics) remain;
* ResNet-50 carries an unused initializer (``gpu_0/imagenet1k_blobs_queue_..._0``) that
  onnxruntime warns about and drops;
* there is no ``test_data_set_0/input_0.pb`` next to them, only ``light_<name>_output_0.pb``.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .names import (ALL_LIGHT_MODELS, BUNDLED, BUNDLED_PREFIX as _BUNDLED_PREFIX,  # noqa: F401
                    LIGHT_MODELS, ORIGINAL_SUFFIX, bundled_name)
from .random_weights import is_float, with_random_weights

__all__ = [
    "LIGHT_DIR",
    "LIGHT_MODELS",
    "ALL_LIGHT_MODELS",
    "BUNDLED",
    "ORIGINAL_SUFFIX",
    "bundled_seed",
    "light_model_path",
    "load_light",
    "light_reference_output",
    "resolve",
    "transformer_block",
    "with_random_weights",
    "random_inputs",
]

LIGHT_DIR = Path(onnx.__file__).resolve().parent / "backend" / "test" / "data" / "light"


# --------------------------------------------------------------------------------------------
# Light models
# --------------------------------------------------------------------------------------------


def light_model_path(name: str) -> Path:
    """Path of ``light_<name>.onnx``.

    Any light model shipped by onnx is accepted (``LIGHT_MODELS`` is the curated set the project
    tests against); an unknown name raises ``ValueError``.
    """
    path = LIGHT_DIR / f"light_{name}.onnx"
    if not path.is_file():
        raise ValueError(
            f"unknown light model {name!r}; expected one of {', '.join(ALL_LIGHT_MODELS)} "
            f"(looked for {path})"
        )
    return path


def load_light(name: str) -> onnx.ModelProto:
    """Load a light model as onnx ships it (weights are all-equal ``ConstantOfShape`` nodes)."""
    return onnx.load(str(light_model_path(name)))


def light_reference_output(name: str) -> np.ndarray:
    """The reference output stored next to the model (``light_<name>_output_0.pb``)."""
    light_model_path(name)  # validate the name
    tensor = onnx.load_tensor(str(LIGHT_DIR / f"light_{name}_output_0.pb"))
    return numpy_helper.to_array(tensor)


def bundled_seed(name: str) -> int:
    """The weight seed of ``bundled:NAME``: from the name's SHA-256, not Python's ``hash`` (salted
    per process), so every process, and an artifact's ``--model bundled:NAME``, sees the same
    model and its SHA-256 matches the manifest."""
    return int.from_bytes(hashlib.sha256(f"provmap.bundled:{name}".encode()).digest()[:8], "little")


def resolve(spec: str) -> tuple[onnx.ModelProto, str]:
    """Turn a model spec into ``(model, display_name)``.

    ``bundled:NAME`` names a light model (see ``LIGHT_MODELS``) with seeded random weights, or
    ``transformer``; ``bundled:NAME:original`` a light model with the constant weights onnx ships
    (the transformer has no other form);
    anything else is a path to an ``.onnx`` file; a missing, empty or unreadable file is a
    ProvmapError naming it (importer.read_model), like every other user-input error.
    """
    if spec.startswith(_BUNDLED_PREFIX):
        name, original = bundled_name(spec)  # unknown names: names.py's refusal
        if name == "transformer":  # built with its own seeded weights: the original itself
            return transformer_block(), name
        if original:
            return load_light(name), f"{name}-original"
        return with_random_weights(load_light(name), seed=bundled_seed(name)), name
    from ..importer import read_model  # the importer needs TVM: only when a file is given

    # The file as it is: import_onnx normalizes and checks it, and its hash is the user's.
    model, _ = read_model(spec)
    return model, Path(spec).stem


# --------------------------------------------------------------------------------------------
# Transformer encoder block
# --------------------------------------------------------------------------------------------


def transformer_block(
    seq: int = 16,
    d_model: int = 64,
    heads: int = 4,
    d_ff: int = 256,
    seed: int = 0,
    opset: int = 17,
    ir_version: int = 10,
) -> onnx.ModelProto:
    """A pre-LN transformer encoder block, built node by node.

    ``y = x1 + FFN(LN2(x1))`` with ``x1 = x + MHA(LN1(x))``; ``FFN(h) = Gelu(h W1 + b1) W2 + b2``
    with the Erf form of Gelu spelled out as primitive ops.  Input ``x`` and output ``y`` are
    float32 ``[1, seq, d_model]``.  Weights are initializers drawn from
    ``np.random.default_rng(seed)``.  ``ir_version`` is set explicitly because onnx 1.23 writes IR
    14 by default, which onnxruntime rejects.
    """
    if d_model % heads:
        raise ValueError(f"d_model={d_model} is not divisible by heads={heads}")
    if opset < 17:
        raise ValueError("LayerNormalization needs opset >= 17")
    dk = d_model // heads
    rng = np.random.default_rng(seed)
    inits: list[TensorProto] = []

    def init(name: str, array: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(name: str, fan_in: int, fan_out: int) -> str:
        w = rng.standard_normal((fan_in, fan_out)) / math.sqrt(fan_in)
        return init(name, w.astype(np.float32))

    def bias(name: str, n: int) -> str:
        return init(name, (0.02 * rng.standard_normal(n)).astype(np.float32))

    def ln_params(prefix: str) -> tuple[str, str]:
        gamma = (1.0 + 0.1 * rng.standard_normal(d_model)).astype(np.float32)
        gamma = init(f"{prefix}.weight", gamma)
        beta = init(f"{prefix}.bias", (0.1 * rng.standard_normal(d_model)).astype(np.float32))
        return gamma, beta

    nodes: list[onnx.NodeProto] = []

    def node(op: str, name: str, inputs: list[str], **attrs) -> str:
        out = f"{name}_out"
        nodes.append(helper.make_node(op, inputs, [out], name=name, **attrs))
        return out

    def linear(prefix: str, x: str, fan_in: int, fan_out: int) -> str:
        w = weight(f"{prefix}.weight", fan_in, fan_out)
        b = bias(f"{prefix}.bias", fan_out)
        mm = node("MatMul", f"{prefix}/MatMul", [x, w])
        return node("Add", f"{prefix}/Add", [mm, b])

    # Shape / scalar constants.
    heads_shape = init("attn.heads_shape", np.array([1, seq, heads, dk], dtype=np.int64))
    merge_shape = init("attn.merge_shape", np.array([1, seq, d_model], dtype=np.int64))
    scale = init("attn.scale", np.array(math.sqrt(dk), dtype=np.float32))
    sqrt2 = init("ffn.gelu.sqrt2", np.array(math.sqrt(2.0), dtype=np.float32))
    one = init("ffn.gelu.one", np.array(1.0, dtype=np.float32))
    half = init("ffn.gelu.half", np.array(0.5, dtype=np.float32))

    # --- attention sub-block -----------------------------------------------------------------
    g1, b1 = ln_params("ln1")
    h = node("LayerNormalization", "ln1/LayerNormalization", ["x", g1, b1], axis=-1, epsilon=1e-5)

    def split_heads(prefix: str, t: str, perm: list[int]) -> str:
        r = node("Reshape", f"attn/{prefix}/Reshape", [t, heads_shape])
        return node("Transpose", f"attn/{prefix}/Transpose", [r], perm=perm)

    q = split_heads("q", linear("attn/q_proj", h, d_model, d_model), [0, 2, 1, 3])  # [1,H,S,dk]
    k = split_heads("k", linear("attn/k_proj", h, d_model, d_model), [0, 2, 3, 1])  # [1,H,dk,S]
    v = split_heads("v", linear("attn/v_proj", h, d_model, d_model), [0, 2, 1, 3])  # [1,H,S,dk]
    scores = node("MatMul", "attn/scores/MatMul", [q, k])                           # [1,H,S,S]
    scores = node("Div", "attn/scores/Div", [scores, scale])
    probs = node("Softmax", "attn/Softmax", [scores], axis=-1)
    ctx = node("MatMul", "attn/context/MatMul", [probs, v])                         # [1,H,S,dk]
    ctx = node("Transpose", "attn/context/Transpose", [ctx], perm=[0, 2, 1, 3])    # [1,S,H,dk]
    ctx = node("Reshape", "attn/context/Reshape", [ctx, merge_shape])               # [1,S,D]
    attn = linear("attn/out_proj", ctx, d_model, d_model)
    x1 = node("Add", "attn/residual/Add", ["x", attn])

    # --- feed-forward sub-block --------------------------------------------------------------
    g2, b2 = ln_params("ln2")
    h2 = node("LayerNormalization", "ln2/LayerNormalization", [x1, g2, b2], axis=-1, epsilon=1e-5)
    f = linear("ffn/fc1", h2, d_model, d_ff)
    t = node("Div", "ffn/gelu/Div", [f, sqrt2])
    t = node("Erf", "ffn/gelu/Erf", [t])
    t = node("Add", "ffn/gelu/Add", [t, one])
    t = node("Mul", "ffn/gelu/Mul", [f, t])
    gelu = node("Mul", "ffn/gelu/Mul_half", [t, half])
    f2 = linear("ffn/fc2", gelu, d_ff, d_model)
    nodes.append(helper.make_node("Add", [x1, f2], ["y"], name="ffn/residual/Add"))

    graph = helper.make_graph(
        nodes,
        "transformer_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, d_model])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, d_model])],
        initializer=inits,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset)],
        ir_version=ir_version,
        producer_name="provmap.zoo",
    )
    return model


# --------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------


def random_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Random feeds for the graph inputs that are not initializers.

    Floating inputs get standard-normal values (float32 unless the input declares another float
    type); integer and bool inputs get zeros.  Symbolic or unknown dimensions are taken as 1.
    """
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    feeds: dict[str, np.ndarray] = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        elem = tt.elem_type or TensorProto.FLOAT
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem))
        shape = tuple(
            d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1
            for d in tt.shape.dim
        )
        if is_float(dtype):
            feeds[vi.name] = rng.standard_normal(shape).astype(np.float32).astype(dtype)
        else:
            feeds[vi.name] = np.zeros(shape, dtype=dtype)
    return feeds
