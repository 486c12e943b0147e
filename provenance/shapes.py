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

from typing import TYPE_CHECKING

from .util.errors import ProvmapError

if TYPE_CHECKING:  # reading an artifact checks shapes here without importing onnx (start-up)
    import onnx

FLAG = "--input-shape"
INT64_MAX = 2**63 - 1


def memory_bytes() -> int:
    """What this machine can hold (physical memory): an input larger than that can never be
    run, so asking for it is refused when it is given, not when `run` tries to allocate it."""
    import os

    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not POSIX: a generous fixed bound
        return 1 << 40


def check_size(label: str, dims, itemsize: int = 1) -> None:
    """Refuse dimensions beyond int64, or a tensor larger than this machine's memory."""
    total = 1
    for k, d in enumerate(dims):
        if d > INT64_MAX:
            raise ProvmapError(f"{label}: dimension {k} is {d}, beyond int64")
        total *= d
    if total * itemsize > memory_bytes():
        raise ProvmapError(f"{label}: {'x'.join(map(str, dims))} is {total * itemsize} bytes, "
                           f"more than this machine's memory ({memory_bytes()} bytes)")


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
        if not all(p.strip().isascii() for p in parts):  # int() reads '٤' as 4 (issue 36)
            raise ValueError
        shape = tuple(int(p) for p in parts)
    except ValueError:
        raise ProvmapError(f"{FLAG} {spec!r}: dimensions must be integers separated by 'x'") from None
    for i, d in enumerate(shape):
        # Zero is a size (an empty sequence, an empty KV cache): legal ONNX, and ORT runs it;
        # the backends that cannot refuse it themselves, with their reason.
        if d < 0:
            raise ProvmapError(f"{FLAG} {spec!r}: input {name!r} dimension {i} is {d}; sizes "
                               "must be >= 0 (a model's -1 is a dynamic dimension; give the "
                               "size to run it with)")
    check_size(f"{FLAG} {spec!r}: input {name!r}", shape)  # at least a byte per element
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


def _fixed(d) -> bool:
    """A dimension with a size (a negative dim_value is a dynamic one, as ONNX Runtime reads it;
    provmap.provenance.normalize clears those on load)."""
    return d.HasField("dim_value") and d.dim_value >= 0


def _dims_text(tt) -> str:
    return "x".join(str(d.dim_value) if _fixed(d) else d.dim_param or "?" for d in tt.shape.dim)


def _open_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """Runtime tensor inputs with a dimension (or the rank) still open."""
    out = []
    for vi in runtime_inputs(model.graph):
        if not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        if not tt.HasField("shape") or not all(_fixed(d) for d in tt.shape.dim):
            out.append(vi)
    return out


def _example(vi: onnx.ValueInfoProto, bound: dict[str, int]) -> str:
    """`--input-shape NAME=...` from the input's own rank and fixed sizes, a symbol another
    given input already fixed at its size, other open ones as 1."""
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return f"{FLAG} {vi.name}=DIMxDIM... (the model does not declare its rank)"
    dims = "x".join(str(d.dim_value) if _fixed(d) else str(bound.get(d.dim_param, 1))
                    for d in tt.shape.dim)
    return f"{FLAG} {vi.name}={dims or 'scalar'}"


def _named_sizes(model: onnx.ModelProto, shapes: dict | None):
    """(input, symbol, size) for each symbolic dimension `shapes` gives a size, in the order
    given: the one walk the hint's bound symbols and the conflict check share."""
    inputs = {i.name: i for i in runtime_inputs(model.graph)}
    for name, want in (shapes or {}).items():
        vi = inputs.get(name)
        if vi is None or not vi.type.HasField("tensor_type") or \
                not vi.type.tensor_type.HasField("shape"):
            continue
        for d, w in zip(vi.type.tensor_type.shape.dim, want):
            if d.dim_param and not _fixed(d):
                yield name, d.dim_param, int(w)


def _bound_symbols(model: onnx.ModelProto, shapes: dict | None) -> dict[str, int]:
    """The sizes `shapes` gives the model's named symbols (input_ids=1x16 makes B 1 and S 16):
    the hint for attention_mask [BxS] then says 1x16, not 1x1, which would give S two sizes
    (twelfth afternoon L2)."""
    out: dict[str, int] = {}
    for _name, sym, size in _named_sizes(model, shapes):
        out.setdefault(sym, size)
    return out


def shape_hint(model: onnx.ModelProto, bound: dict[str, int] | None = None) -> str:
    """The flags that would fix every open input of `model`, sizes of symbols in `bound` as
    given, other open sizes as 1; "" when every input is static."""
    open_inputs = _open_inputs(model)
    if not open_inputs:
        return ""
    shown = " ".join(_example(vi, bound or {}) for vi in open_inputs)
    if any(vi.type.tensor_type.HasField("shape") for vi in open_inputs):
        shown += " (open dimensions shown as 1: give the sizes you will run)"
    return shown


def failure_hint(model: onnx.ModelProto) -> str:
    """For a failure of a model with open input dimensions: what `--input-shape` would fix them
    (TVM's legalization fails on symbolic sizes in places, e.g. "emit_te now only supports
    Tensor that has ShapeExpr shape" on a CRNN with a symbolic width).  "" when all are static."""
    hint = shape_hint(model)
    if not hint:
        return ""
    names = ", ".join(f"{vi.name!r} [{_dims_text(vi.type.tensor_type)}]"
                      if vi.type.tensor_type.HasField("shape") else f"{vi.name!r} [rank unknown]"
                      for vi in _open_inputs(model))
    return f"; inputs with open dimensions: {names}; fixing them may help, e.g. {hint}"


def named_size_conflicts(model: onnx.ModelProto, shapes: dict | None) -> list[str]:
    """A symbolic dimension the model names alike in two inputs (a batch `N`) given two sizes.
    ONNX reads one name as one size, and the first node joining the two then failed on some
    backend that took the blame ("Where is not supported by tvm": issue 36's ninth
    afternoon); ONNX Runtime runs such inputs where no node joins them, so it is said, not
    refused."""
    seen: dict[str, tuple[str, int]] = {}
    out = []
    for name, sym, w in _named_sizes(model, shapes):
        first = seen.setdefault(sym, (name, w))
        if first[1] != w:
            out.append(f"{FLAG}: dimension '{sym}' is {first[1]} for input {first[0]!r} but "
                       f"{w} for input {name!r}; the model names them alike, so a node "
                       "joining them will fail")
    return out


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
        import onnx

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
            bad = [k for k, w in enumerate(want) if int(w) < 0]
            if bad:  # the Python API's input_shapes= too, not only the parsed flag
                raise ProvmapError(f"{label}: input {vi.name!r} dimension {bad[0]} is "
                                   f"{want[bad[0]]}; sizes must be >= 0")
            try:
                from .util.dtypes import itemsize, onnx_dtype

                size = itemsize(onnx_dtype(tt.elem_type))
            except Exception:  # an element type numpy cannot hold: count a byte each
                size = 1
            check_size(f"{label}: input {vi.name!r}", [int(w) for w in want], size)
            if tt.HasField("shape") and len(tt.shape.dim) != len(want):
                raise ProvmapError(f"{label}: input {vi.name!r} has rank {len(tt.shape.dim)} "
                                   f"({_dims_text(tt)}), {FLAG} gives {len(want)} dimensions")
            if tt.HasField("shape"):
                for k, (d, w) in enumerate(zip(tt.shape.dim, want)):
                    if _fixed(d) and d.dim_value != w:
                        raise ProvmapError(f"{label}: input {vi.name!r} dimension {k} is fixed "
                                           f"at {d.dim_value} in the model, {FLAG} gives {w}")
            tt.ClearField("shape")
            tt.shape.SetInParent()
            for w in want:
                tt.shape.dim.add().dim_value = w
    if require_static:
        open_dims = []
        for vi in _open_inputs(out):
            tt = vi.type.tensor_type
            if not tt.HasField("shape"):
                open_dims.append(f"{vi.name!r} (rank unknown)")
                continue
            bad = [f"{k} ('{d.dim_param}')" if d.dim_param else str(k)
                   for k, d in enumerate(tt.shape.dim) if not _fixed(d)]
            open_dims.append(f"{vi.name!r} [{_dims_text(tt)}] dimension{'s' * (len(bad) > 1)} "
                             f"{', '.join(bad)}")
        if open_dims:
            raise ProvmapError(f"{label}: input shapes are not static: {'; '.join(open_dims)}; "
                               f"give them, e.g. {shape_hint(out, _bound_symbols(model, shapes))}")
    return out
