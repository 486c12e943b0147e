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

from .profile import DIM_FLAG, SHAPE_FLAG, _SYMBOL, DimRange, ShapeProfile, parse_dim, symbol_for
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
    if any(".." in p for p in parts):  # a range: MIN..MAX[@OPT] (provmap.provenance.profile)
        shape = tuple(parse_dim(p, f"{FLAG} {spec!r}: input {name!r} dimension {i}")
                      for i, p in enumerate(parts))
        check_size(f"{FLAG} {spec!r}: input {name!r}",
                   [d if isinstance(d, int) else d.max for d in shape])
        return name, shape
    try:
        if not all(p.strip().isascii() for p in parts):  # int() reads '٤' as 4 (issue 36)
            raise ValueError
        shape = tuple(int(p) for p in parts)
    except ValueError:
        raise ProvmapError(f"{FLAG} {spec!r}: dimensions must be integers separated by 'x', "
                           "or ranges MIN..MAX[@OPT]") from None
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
            if d.dim_param and not _fixed(d) and isinstance(w, int):
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
            want = shapes[vi.name]  # sizes, and symbols a shape profile keeps open
            bad = [k for k, w in enumerate(want) if not isinstance(w, str) and int(w) < 0]
            if bad:  # the Python API's input_shapes= too, not only the parsed flag
                raise ProvmapError(f"{label}: input {vi.name!r} dimension {bad[0]} is "
                                   f"{want[bad[0]]}; sizes must be >= 0")
            try:
                from .util.dtypes import itemsize, onnx_dtype

                size = itemsize(onnx_dtype(tt.elem_type))
            except Exception:  # an element type numpy cannot hold: count a byte each
                size = 1
            check_size(f"{label}: input {vi.name!r}", [int(w) for w in want
                                                      if not isinstance(w, str)], size)
            if tt.HasField("shape") and len(tt.shape.dim) != len(want):
                raise ProvmapError(f"{label}: input {vi.name!r} has rank {len(tt.shape.dim)} "
                                   f"({_dims_text(tt)}), {FLAG} gives {len(want)} dimensions")
            if tt.HasField("shape"):
                for k, (d, w) in enumerate(zip(tt.shape.dim, want)):
                    if _fixed(d) and d.dim_value != w:
                        if isinstance(w, str):
                            raise ProvmapError(f"{label}: input {vi.name!r} dimension {k} is "
                                               f"fixed at {d.dim_value} in the model; it takes "
                                               "no range")
                        raise ProvmapError(f"{label}: input {vi.name!r} dimension {k} is fixed "
                                           f"at {d.dim_value} in the model, {FLAG} gives {w}")
            tt.ClearField("shape")
            tt.shape.SetInParent()
            for w in want:
                if isinstance(w, str):
                    tt.shape.dim.add().dim_param = w
                else:
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


def build_profile(model, shapes: dict | None, dims: dict | None, label: str,
                  require_all: bool = True) -> tuple[dict, ShapeProfile]:
    """The profile `shapes` (input -> dims, each a size or a DimRange) and `dims` (symbol ->
    size or DimRange) give `model`, and what `apply_input_shapes` writes into its inputs: sizes
    as dim_value, ranged axes as dim_param (their symbol).  A size or range given for one
    input's named dimension holds for every input naming it (ONNX reads one name as one size).
    Refuses in one line an open dimension nothing sizes, a symbol given two ranges, a --dim the
    model does not name."""
    shapes, dims = dict(shapes or {}), dict(dims or {})
    inputs = [vi for vi in runtime_inputs(model.graph) if vi.type.HasField("tensor_type")]
    stray = sorted(set(shapes) - {vi.name for vi in runtime_inputs(model.graph)})
    if stray:
        raise ProvmapError(f"{label}: {SHAPE_FLAG} names {', '.join(repr(u) for u in stray)}, "
                           f"which the model does not take; its inputs are "
                           f"{', '.join(repr(vi.name) for vi in inputs) or '(none)'}")
    ranges: dict[str, tuple[object, str]] = {s: (v, f"{DIM_FLAG} {s}") for s, v in dims.items()}

    def give(sym: str, v, who: str) -> None:
        norm = v.min if isinstance(v, DimRange) and v.fixed else v
        first = ranges.setdefault(sym, (norm, who))
        # Two sizes for one name are said by the importer, not refused (ONNX Runtime runs such
        # inputs where no node joins them); a range must be one.
        if first[0] != norm and not (isinstance(norm, int) and isinstance(first[0], int)):
            text = lambda x: x.text() if isinstance(x, DimRange) else str(x)  # noqa: E731
            raise ProvmapError(f"{label}: dimension '{sym}' is {text(first[0])} for {first[1]} "
                               f"but {text(norm)} for {who}; the model names them alike, so "
                               "they are one size")

    declared: dict[str, list] = {}
    for vi in inputs:
        tt = vi.type.tensor_type
        want = shapes.get(vi.name)
        decl = list(tt.shape.dim) if tt.HasField("shape") else None
        if decl is None and want is not None:
            decl = [None] * len(want)
        if decl is not None and want is not None and len(want) != len(decl):
            raise ProvmapError(f"{label}: input {vi.name!r} has rank {len(decl)}, {SHAPE_FLAG} "
                               f"gives {len(want)} dimensions")
        declared[vi.name] = decl
        for axis, d in enumerate(decl or ()):
            given = want[axis] if want is not None else None
            if given is None or d is None or _fixed(d):
                continue
            give(symbol_for(vi.name, axis, d.dim_param), given, f"input {vi.name!r}")
    named = set()
    profile, open_dims = ShapeProfile(), []
    open_syms: dict[str, None] = {}  # in order of appearance
    for vi in inputs:
        decl = declared[vi.name]
        if decl is None:
            open_dims.append(f"{vi.name!r} (rank unknown)")
            continue
        want = shapes.get(vi.name)
        row, missing = [], []
        for axis, d in enumerate(decl):
            given = want[axis] if want is not None else None
            if given is None and d is not None and _fixed(d):
                row.append(d.dim_value)
                continue
            sym = symbol_for(vi.name, axis, d.dim_param if d is not None else "")
            v = given if given is not None else ranges.get(sym, (None, ""))[0]
            if v is None:
                if d is not None and d.dim_param:
                    open_syms.setdefault(d.dim_param)
                missing.append(f"{axis} ('{d.dim_param}')" if d is not None and d.dim_param
                               else str(axis))
                row.append(None)
                continue
            named.add(sym)
            if isinstance(v, DimRange) and v.fixed:
                v = v.min
            row.append(v if isinstance(v, int) else sym)
            if isinstance(v, DimRange):
                profile.symbols[sym] = v
        if missing:
            dims_text = "x".join(str(x) if x is not None else (d.dim_param if d is not None
                                                                 and d.dim_param else "?")
                                 for x, d in zip(row, decl))
            open_dims.append(f"{vi.name!r} [{dims_text}] dimension{'s' * (len(missing) > 1)} "
                             f"{', '.join(missing)}")
        profile.inputs[vi.name] = row
    unknown = sorted(set(dims) - named)
    if unknown:
        raise ProvmapError(f"{label}: {DIM_FLAG} names {', '.join(repr(u) for u in unknown)}, "
                           "which no open dimension of the model's inputs has")
    if open_dims and require_all:
        bound = {s: v for s, (v, _w) in ranges.items() if isinstance(v, int)}
        names = {o.split("'")[1] for o in open_dims}
        hint = " ".join(_example(vi, bound) for vi in inputs if vi.name in names)
        ranged = [s for s in open_syms if _SYMBOL.match(s)][:1]
        rng = f"{DIM_FLAG} {ranged[0]}=1..64" if ranged else f"{SHAPE_FLAG} NAME=1x1..64"
        raise ProvmapError(f"{label}: input shapes are not static: {'; '.join(open_dims)}; give "
                           f"them sizes, e.g. {hint} (open sizes shown as 1), or ranges that "
                           f"one artifact serves, e.g. {rng} (MIN..MAX[@OPT], opt defaults to "
                           "max)")
    # what the model's inputs become: sizes, range symbols, and (not required) open axes as the
    # model wrote them
    write = {}
    for vi in inputs:
        row = profile.inputs.get(vi.name)
        if row is None or (vi.name not in shapes and all(
                isinstance(x, int) or x is None for x in row) and row == [
                    d.dim_value if _fixed(d) else None for d in declared[vi.name]]):
            continue  # nothing given changes this input
        decl = declared[vi.name]
        write[vi.name] = tuple(x if x is not None else (decl[k].dim_param or
                                                        symbol_for(vi.name, k, ""))
                               for k, x in enumerate(row))
    profile.inputs = {n: r for n, r in profile.inputs.items() if None not in r}
    return write, profile
