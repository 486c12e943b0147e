"""Input shapes given by the user, and the static-shape requirement they satisfy.

PyTorch exports routinely leave the batch axis symbolic (`dynamic_axes`, or dynamo's `s0`).
Every backend here compiles for fixed shapes, and partitioning needs every boundary tensor's
size, so a symbolic input dimension must be fixed before anything is imported.  The spelling
follows what users already type elsewhere (trtexec `--shapes`, OpenVINO benchmark_app
`-shape`): `NAME=1x3x224x224`, repeatable.  The shapes are written into a copy of the model's
graph inputs, so ONNX shape inference, the Relax importer and every ONNX-consuming backend see
the same fixed model.
"""

from __future__ import annotations

import onnx

from .errors import ProvmapError

FLAG = "--input-shape"


def parse_input_shape(spec: str) -> tuple[str, tuple[int, ...]]:
    """`NAME=1x3x224x224` (also `NAME=1,3,224,224`; `NAME=` or `NAME=scalar` for a 0-d input)."""
    name, sep, dims = spec.rpartition("=")
    if not sep or not name:
        raise ProvmapError(f"{FLAG} {spec!r}: expected NAME=DIMxDIMx... (e.g. input=1x3x224x224)")
    dims = dims.strip()
    if dims in ("", "scalar"):
        return name, ()
    parts = dims.replace(",", "x").split("x")
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        raise ProvmapError(f"{FLAG} {spec!r}: dimensions must be integers separated by 'x'") from None
    if any(d < 0 for d in shape):
        raise ProvmapError(f"{FLAG} {spec!r}: dimensions must be >= 0")
    return name, shape


def parse_input_shapes(specs) -> dict[str, tuple[int, ...]]:
    out: dict[str, tuple[int, ...]] = {}
    for s in specs or ():
        name, shape = parse_input_shape(s)
        if name in out:
            raise ProvmapError(f"{FLAG}: input {name!r} given twice")
        out[name] = shape
    return out


def runtime_inputs(graph: onnx.GraphProto) -> list[onnx.ValueInfoProto]:
    inits = {t.name for t in graph.initializer} | {t.values.name for t in graph.sparse_initializer}
    return [i for i in graph.input if i.name not in inits]


def _dims_text(tt) -> str:
    return "x".join(d.dim_param or "?" if not d.HasField("dim_value") else str(d.dim_value)
                    for d in tt.shape.dim)


def apply_input_shapes(model: onnx.ModelProto, shapes: dict | None, label: str,
                       require_static: bool = True) -> onnx.ModelProto:
    """Fix the model's input shapes; refuse (naming every open dimension) what stays symbolic.

    Returns `model` itself when there is nothing to change, else a modified copy.  Inputs that
    are not tensors (sequences, optionals) are left as they are: the shape flag cannot describe
    them, and the backends that take them decide.
    """
    shapes = dict(shapes or {})
    inputs = {i.name: i for i in runtime_inputs(model.graph)}
    unknown = sorted(set(shapes) - set(inputs))
    if unknown:
        raise ProvmapError(f"{label}: {FLAG} names {', '.join(repr(u) for u in unknown)}, which "
                           f"the model does not take; its inputs are "
                           f"{', '.join(repr(n) for n in inputs) or '(none)'}")
    out = model
    if shapes:
        out = onnx.ModelProto()
        out.CopyFrom(model)
        for vi in runtime_inputs(out.graph):
            if vi.name not in shapes:
                continue
            tt = vi.type.tensor_type
            if not vi.type.HasField("tensor_type"):
                raise ProvmapError(f"{label}: input {vi.name!r} is not a tensor; {FLAG} "
                                   "cannot give it a shape")
            want = shapes[vi.name]
            if tt.HasField("shape") and len(tt.shape.dim) != len(want):
                raise ProvmapError(f"{label}: input {vi.name!r} has rank {len(tt.shape.dim)} "
                                   f"({_dims_text(tt)}), {FLAG} gives {len(want)} dimensions")
            if tt.HasField("shape"):
                for k, (d, w) in enumerate(zip(tt.shape.dim, want)):
                    if d.HasField("dim_value") and d.dim_value != w:
                        raise ProvmapError(f"{label}: input {vi.name!r} dimension {k} is fixed "
                                           f"at {d.dim_value} in the model, {FLAG} gives {w}")
            tt.ClearField("shape")
            tt.shape.SetInParent()
            for w in want:
                tt.shape.dim.add().dim_value = w
    if require_static:
        open_dims = []
        for vi in runtime_inputs(out.graph):
            if not vi.type.HasField("tensor_type"):
                continue
            tt = vi.type.tensor_type
            if not tt.HasField("shape"):
                open_dims.append(f"{vi.name!r} (rank unknown)")
                continue
            bad = [f"{k} ('{d.dim_param}')" if d.dim_param else str(k)
                   for k, d in enumerate(tt.shape.dim) if not d.HasField("dim_value")]
            if bad:
                open_dims.append(f"{vi.name!r} [{_dims_text(tt)}] dimension{'s' * (len(bad) > 1)} "
                                 f"{', '.join(bad)}")
        if open_dims:
            example = next(iter(runtime_inputs(out.graph))).name
            raise ProvmapError(f"{label}: input shapes are not static: {'; '.join(open_dims)}; "
                               f"give them with {FLAG} NAME=DIMxDIM... (e.g. {FLAG} "
                               f"{example}=1x3x224x224)")
    return out


def input_shapes_of(model: onnx.ModelProto) -> dict[str, list]:
    """The (now static) shape of each runtime tensor input, for the manifest."""
    out = {}
    for vi in runtime_inputs(model.graph):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            out[vi.name] = [d.dim_value if d.HasField("dim_value") else None
                            for d in vi.type.tensor_type.shape.dim]
    return out
