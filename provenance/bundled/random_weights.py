"""Seeded random weights for the ONNX light models, whose weights are ``ConstantOfShape`` fills.

With every weight of a tensor equal, every class gets the same score and the scores grow to 1e9
and beyond through the network: a backend's rounding differences then look like wrong numbers.
The scales here keep activations O(1) through ResNet-50 and VGG-19 (``zoo.resolve`` applies this
to every ``bundled:NAME`` light model).
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper, numpy_helper

__all__ = ["with_random_weights", "is_float"]




def is_float(dtype: np.dtype) -> bool:
    """numpy floats plus ml_dtypes' (bfloat16, float8_*), which numpy does not class as floating."""
    return dtype.kind == "f" or "float" in dtype.name


def constant_values(graph: onnx.GraphProto, wanted: set[str]) -> dict[str, np.ndarray]:
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
    elif len(shape) <= 1 and {op for op, _i in roles} >= {"Unsqueeze", "Mul"}:
        # A second scale after a BatchNormalization (see with_random_weights): below 1 on
        # average, or the two scales compound (inception_v2's logits reached 109).
        values = uniform(0.4, 0.9)
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

    constants = constant_values(graph, {n.input[0] for n in graph.node if is_cos(n)})

    uses: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for n in graph.node:
        for i, name in enumerate(n.input):
            if name:
                uses.setdefault(name, []).append((n, i))

    # Caffe2's exports scale after BatchNormalization with a separate Mul by an Unsqueezed 1-D
    # weight (light inception_v2, densenet121): seen through the Unsqueeze, that weight is a
    # scale, not a bias (a 0.01-scale fill shrank inception_v2's logits to 0.04).
    for name in list(uses):
        through = [(c, i) for c, i in uses[name] if c.op_type == "Unsqueeze" and i == 0]
        for c, _i in through:
            uses[name] = uses[name] + [(d, j) for d, j in uses.get(c.output[0], ())
                                       if d.op_type in ("Mul", "Add")]

    graph_outputs = {o.name for o in graph.output}
    # Tensors that feed a Sum / Add, i.e. possibly a residual join.
    # Concat too: ShuffleNet's downsampling units join a BatchNormalization output to a pooled
    # shortcut by Concat, and compound like a residual Sum (logit std 41 without this).
    residual = {name for n in graph.node if n.op_type in ("Sum", "Add", "Concat")
                for name in n.input}
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
        if is_float(dtype):
            array = _random_fill(rng, shape, dtype, uses.get(name, []), residual)
        else:
            array = np.full(shape, fill.reshape(-1)[0], dtype=dtype)
        new_inits.append((name, array))
        maybe_unused.add(n.input[0])

    # BatchNormalization parameters the file ships as data rather than as ConstantOfShape
    # fills (light shufflenet: running variances down to 5e-14 divided its activations to
    # logits of 2,000): drawn like the fills, from the same generator, after them.
    # Only where some variance is degenerate (< 1e-6), with a generator of its own, so models
    # whose BatchNormalization data is usable (light resnet50) keep exactly their weights.
    drawn = {name for name, _ in new_inits}
    bn_data = [t for t in graph.initializer if t.name not in drawn
               and t.data_location != onnx.TensorProto.EXTERNAL
               and any(c.op_type == "BatchNormalization" and i >= 1
                       for c, i in uses.get(t.name, ()))]
    variances = [t for t in bn_data if any(c.op_type == "BatchNormalization" and i == 4
                                           for c, i in uses[t.name])]
    if any(float(np.min(numpy_helper.to_array(t))) < 1e-6 for t in variances if t.dims):
        bn_rng = np.random.default_rng([seed, 1])
        for t in bn_data:
            dtype = helper.tensor_dtype_to_np_dtype(t.data_type)
            if is_float(dtype):
                new_inits.append((t.name, _random_fill(bn_rng, tuple(int(d) for d in t.dims),
                                                       dtype, uses[t.name], residual)))

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
