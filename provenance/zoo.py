"""Bundled test models: the ONNX "light" model zoo shipped inside the onnx package, and a
synthetic transformer encoder block.

Nothing here downloads anything.  The light models live in the installed onnx package
(``onnx/backend/test/data/light``); they are real network topologies (ResNet-50, SqueezeNet,
VGG-19, Inception-v1, AlexNet) whose weights were replaced by ``ConstantOfShape`` nodes, so all
weights of one tensor are equal and every output class gets the same score.  That is fine for
import/partition tests, but useless for numerical comparisons, so :func:`with_random_weights`
materialises those weights as seeded random initializers.

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

import math
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = [
    "LIGHT_DIR",
    "LIGHT_MODELS",
    "BUNDLED",
    "light_model_path",
    "load_light",
    "light_reference_output",
    "resolve",
    "transformer_block",
    "with_random_weights",
    "random_inputs",
]

LIGHT_DIR = Path(onnx.__file__).resolve().parent / "backend" / "test" / "data" / "light"
LIGHT_MODELS = ("resnet50", "squeezenet", "vgg19", "inception_v1", "bvlc_alexnet")
#: Names accepted after ``bundled:`` by :func:`resolve`.
BUNDLED = LIGHT_MODELS + ("transformer",)

_BUNDLED_PREFIX = "bundled:"


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
            f"unknown light model {name!r}; expected one of {', '.join(LIGHT_MODELS)} "
            f"(looked for {path})"
        )
    return path


def load_light(name: str) -> onnx.ModelProto:
    """Load a light model (weights are all-equal ``ConstantOfShape`` nodes)."""
    return onnx.load(str(light_model_path(name)))


def light_reference_output(name: str) -> np.ndarray:
    """The reference output stored next to the model (``light_<name>_output_0.pb``)."""
    light_model_path(name)  # validate the name
    tensor = onnx.load_tensor(str(LIGHT_DIR / f"light_{name}_output_0.pb"))
    return numpy_helper.to_array(tensor)


def resolve(spec: str) -> tuple[onnx.ModelProto, str]:
    """Turn a model spec into ``(model, display_name)``.

    ``bundled:NAME`` names a light model (see ``LIGHT_MODELS``) or ``transformer``; anything else
    is a path to an ``.onnx`` file; a missing, empty or unreadable file is a ProvmapError naming
    it (importer.load_model), like every other user-input error.
    """
    if spec.startswith(_BUNDLED_PREFIX):
        name = spec[len(_BUNDLED_PREFIX):]
        if name == "transformer":
            return transformer_block(), name
        if name in LIGHT_MODELS:
            return load_light(name), name
        from .errors import ProvmapError

        raise ProvmapError(f"{spec}: unknown bundled model {name!r}; expected one of "
                           f"{', '.join(BUNDLED)}")
    from .importer import load_model  # the importer needs TVM: only when a file is given

    model, _ = load_model(spec, check=False)  # import_onnx runs the checker
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
# Random weights for the light models
# --------------------------------------------------------------------------------------------


def _is_float(dtype: np.dtype) -> bool:
    """numpy floats plus ml_dtypes' (bfloat16, float8_*), which numpy does not class as floating."""
    return dtype.kind == "f" or "float" in dtype.name


def _constant_values(graph: onnx.GraphProto, wanted: set[str]) -> dict[str, np.ndarray]:
    """Values of the `wanted` names that are initializers or plain-tensor Constant outputs.

    Only the wanted tensors are converted, so big weight initializers are never copied out.
    """
    values: dict[str, np.ndarray] = {}
    for t in graph.initializer:
        if t.name in wanted:
            values[t.name] = numpy_helper.to_array(t)
    for n in graph.node:
        if n.op_type != "Constant" or n.domain not in ("", "ai.onnx") or len(n.output) != 1:
            continue
        if n.output[0] not in wanted:
            continue
        for a in n.attribute:
            if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
                values[n.output[0]] = numpy_helper.to_array(a.t)
            elif a.name == "value_ints":
                values[n.output[0]] = np.array(list(a.ints), dtype=np.int64)
            elif a.name == "value_int":
                values[n.output[0]] = np.array(a.i, dtype=np.int64)
    return values


def _fan_in(shape: tuple[int, ...], uses: list[tuple[onnx.NodeProto, int]]) -> int:
    """Fan-in of a weight tensor, from how it is consumed."""
    for consumer, idx in uses:
        if idx != 1:
            continue
        if consumer.op_type in ("Conv", "ConvTranspose") and len(shape) >= 2:
            return max(1, int(np.prod(shape[1:])))
        if consumer.op_type == "Gemm" and len(shape) == 2:
            trans_b = next((a.i for a in consumer.attribute if a.name == "transB"), 0)
            return max(1, shape[1] if trans_b else shape[0])
        if consumer.op_type == "MatMul" and len(shape) >= 2:
            return max(1, shape[-2])
    if len(shape) >= 2:
        return max(1, int(np.prod(shape[1:])))
    return max(1, int(np.prod(shape)) if shape else 1)


def _random_fill(
    rng: np.random.Generator,
    shape: tuple[int, ...],
    dtype: np.dtype,
    uses: list[tuple[onnx.NodeProto, int]],
    residual: set[str],
) -> np.ndarray:
    roles = {(c.op_type, i) for c, i in uses}
    f32 = np.float32

    def uniform(lo: float, hi: float) -> np.ndarray:
        values = rng.random(shape, dtype=f32)
        values *= hi - lo
        values += lo
        return values

    def normal(std: float) -> np.ndarray:
        values = rng.standard_normal(shape, dtype=f32)
        values *= std
        return values

    bn_scale_of = [c for c, i in uses if c.op_type == "BatchNormalization" and i == 1]
    if any(c.output[0] in residual for c in bn_scale_of):
        # Scale of a BN that feeds a residual join: damped, in the spirit of the "zero-gamma"
        # ResNet init.  With random running statistics BN does not normalise, so at O(1) scales
        # ResNet-50's activations grow ~1.6x per block (logits ~1e5, one-hot softmax); (0.2, 0.4)
        # keeps its logits O(1) (checked for seed 0; the result is not very sensitive to it).
        values = uniform(0.2, 0.4)
    elif roles & {("BatchNormalization", 1), ("BatchNormalization", 4),
                  ("InstanceNormalization", 1), ("LayerNormalization", 1)}:
        # BN scale and variance: positive and O(1), so normalisation neither explodes nor
        # divides by ~0.
        values = uniform(0.5, 1.5)
    elif roles & {("BatchNormalization", 2), ("BatchNormalization", 3)}:
        values = normal(0.1)
    elif len(shape) >= 2:
        # He-style scale (~1/sqrt(fan_in)) keeps ReLU-network activations O(1) even through
        # ResNet-50 and VGG-19, so the final logits differ and the softmax is not uniform.
        values = normal(math.sqrt(2.0 / _fan_in(shape, uses)))
    else:
        values = normal(0.01)
    return values.astype(dtype, copy=False)


def _add_initializer(graph: onnx.GraphProto, name: str, array: np.ndarray) -> None:
    """Append `array` as an initializer, writing it in place (appending a built TensorProto
    copies it, which is noticeable for VGG-19's 400 MB fc6 weight)."""
    if array.dtype.kind == "f" and array.dtype.name in ("float16", "float32", "float64"):
        t = graph.initializer.add()
        t.name = name
        t.data_type = helper.np_dtype_to_tensor_dtype(array.dtype)
        t.dims.extend(array.shape)
        t.raw_data = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()
    else:
        graph.initializer.append(numpy_helper.from_array(array, name))


def with_random_weights(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """Copy of `model` whose constant-shaped ``ConstantOfShape`` weights are random initializers.

    Every ``ConstantOfShape`` node whose shape input is constant (an initializer or a ``Constant``
    node output) becomes an initializer with the node's output name, shape and dtype.  Floating
    tensors get seeded random values: He-scaled (~1/sqrt(fan_in)) for weights, small for biases
    and BatchNorm means/offsets, uniform (0.5, 1.5) for BatchNorm scales and variances and
    (0.2, 0.4) for the scale of a BatchNorm feeding a residual Sum/Add.  Non-floating tensors keep
    the node's fill value, since random integers could change semantics (indices, shapes).  Shape
    producers that become unused (initializers, their IR<4 graph-input entries, Constant nodes)
    are removed.  Other nodes, their order and all names are kept; subgraphs are not visited.
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    rng = np.random.default_rng(seed)
    def is_cos(n: onnx.NodeProto) -> bool:
        return n.op_type == "ConstantOfShape" and n.domain in ("", "ai.onnx") and bool(n.input)

    constants = _constant_values(graph, {n.input[0] for n in graph.node if is_cos(n)})

    uses: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for n in graph.node:
        for i, name in enumerate(n.input):
            if name:
                uses.setdefault(name, []).append((n, i))

    graph_outputs = {o.name for o in graph.output}
    # Tensors that feed a Sum / Add, i.e. possibly a residual join.
    residual = {name for n in graph.node if n.op_type in ("Sum", "Add") for name in n.input}
    keep_nodes: list[onnx.NodeProto] = []
    new_inits: list[tuple[str, np.ndarray]] = []
    maybe_unused: set[str] = set()
    for n in graph.node:
        if not is_cos(n) or n.input[0] not in constants:
            keep_nodes.append(n)
            continue
        shape = tuple(int(d) for d in constants[n.input[0]].reshape(-1))
        fill = np.zeros(1, dtype=np.float32)
        for a in n.attribute:
            if a.name == "value":
                fill = numpy_helper.to_array(a.t)
        dtype = fill.dtype
        name = n.output[0]
        if _is_float(dtype):
            array = _random_fill(rng, shape, dtype, uses.get(name, []), residual)
        else:
            array = np.full(shape, fill.reshape(-1)[0], dtype=dtype)
        new_inits.append((name, array))
        maybe_unused.add(n.input[0])

    still_used = {i for n in keep_nodes for i in n.input} | graph_outputs
    dead = maybe_unused - still_used
    keep_nodes = [
        n for n in keep_nodes
        if not (n.op_type == "Constant" and len(n.output) == 1 and n.output[0] in dead)
    ]

    new_names = {name for name, _ in new_inits}
    del graph.node[:]
    graph.node.extend(keep_nodes)
    # Edit the initializer list in place: copying VGG-19's ~570 MB of weights again is slow.
    for i in reversed(range(len(graph.initializer))):
        if graph.initializer[i].name in dead or graph.initializer[i].name in new_names:
            del graph.initializer[i]
    for name, array in new_inits:
        _add_initializer(graph, name, array)

    # Before IR 4 every initializer must also be a graph input.
    old_inputs = [i for i in graph.input if i.name not in dead and i.name not in new_names]
    del graph.input[:]
    graph.input.extend(old_inputs)
    if out.ir_version < 4:
        for name, array in new_inits:
            elem = helper.np_dtype_to_tensor_dtype(array.dtype)
            graph.input.append(helper.make_tensor_value_info(name, elem, list(array.shape)))

    # Drop value_info for names that are now initializers (their type is on the tensor).
    vis = [vi for vi in graph.value_info if vi.name not in new_names and vi.name not in dead]
    del graph.value_info[:]
    graph.value_info.extend(vis)
    return out


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
        if _is_float(dtype):
            feeds[vi.name] = rng.standard_normal(shape).astype(np.float32).astype(dtype)
        else:
            feeds[vi.name] = np.zeros(shape, dtype=dtype)
    return feeds
