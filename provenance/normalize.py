"""The model as ONNX Runtime takes it, before anything checks it.

ONNX Runtime runs published models that break rules onnx.checker (or a strict reading of the
spec) enforces, and users rightly expect provmap to take what ORT takes.  Each fix below applies
only where it is needed; a model that needs none is returned as it is, so its hash stays the
file's.  What is still wrong afterwards is refused by onnx.checker, in one line.

- Nodes out of topological order are sorted, as ORT's graph resolution does
  (`onnxruntime.transformers.float16.convert_float_to_float16(keep_io_types=True)` writes the
  input Casts after the nodes that read them).  Node IDs are content-derived
  (provmap.provenance.ids), so sorting changes none of them.
- A negative `dim_value` is a symbolic dimension (paddle2onnx writes -1 for a dynamic axis;
  ORT reports it as None).  Zero stays a dimension: empty tensors are legal ONNX.
- An IR-version-3 model whose initializers are not all graph inputs (ORT's `quantize_static`
  writes them) is read as IR version 4, which made such initializers constants, as ORT treats
  them.
- Model-local functions are inlined, and sparse initializers made dense, as ORT does when it
  loads the file.
- A declared graph-output shape that disagrees with the computed one loses to it
  (`reconcile_outputs`, after shape inference), as in ORT, which only warns.
"""

from __future__ import annotations

import onnx

from . import ids as _ids
from .util.errors import ProvmapError
from .util.listing import first_few


def normalize(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with the fixes of the module docstring applied (a copy if any applies)."""
    if model.functions:  # model-local functions, inlined as ONNX Runtime does
        model = _inlined(model)
    if model.graph.sparse_initializer:  # dense, as ONNX Runtime makes them when it loads
        model = _densified(model)
    order = _topological_order(model.graph)
    negative = _has_negative_dims(model.graph)
    ir3 = model.ir_version < 4 and bool(_initializers_not_inputs(model.graph))
    if order is None and not negative and not ir3:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    if order is not None:
        del out.graph.node[:]
        out.graph.node.extend(model.graph.node[i] for i in order)
    if negative:
        for vi in _value_infos(out.graph):
            for d in _dims(vi):
                if d.HasField("dim_value") and d.dim_value < 0:
                    d.ClearField("dim_value")
    if ir3:
        out.ir_version = 4
    return out


def _inlined(model: onnx.ModelProto) -> onnx.ModelProto:
    """Calls of the model's own functions (torch's `export_modules_as_functions`, a hand-made
    `my.domain.Swish`) replaced by their bodies, nodes named `<call>/<node>` by onnx's inliner.
    ONNX Runtime inlines them when it loads the file; each backend took the call for an
    operator of an unknown domain and refused it, ONNX Runtime too, since a node cut out alone
    lost the function's definition (issue 36's eighth afternoon).  A function the model
    declares but never calls goes too."""
    from onnx import inliner

    try:
        return inliner.inline_local_functions(model)
    except Exception as e:  # noqa: BLE001 - the checker will name what is wrong
        from .util.errors import first_line

        raise ProvmapError(f"the model's local functions cannot be inlined: "
                           f"{first_line(e)}") from None


def _densified(model: onnx.ModelProto) -> onnx.ModelProto:
    """Sparse initializers as dense ones: every backend reads initializers, and a node reading
    a sparse one was refused as reading "a tensor nothing defines" (issue 36's eighth
    afternoon), though ONNX Runtime runs the file."""
    import numpy as np
    from onnx import numpy_helper

    out = onnx.ModelProto()
    out.CopyFrom(model)
    for sp in model.graph.sparse_initializer:
        dims = tuple(sp.dims)
        for part in (sp.values, sp.indices):
            if part.data_location == onnx.TensorProto.EXTERNAL:  # onnx.load leaves it there
                raise ProvmapError(f"sparse initializer {sp.values.name!r}: its "
                                   f"{'values' if part is sp.values else 'indices'} are in "
                                   f"external data, which provmap does not read for a sparse "
                                   f"tensor (store it dense, or inside the file)")
        try:
            values = numpy_helper.to_array(sp.values)
            idx = numpy_helper.to_array(sp.indices).astype(np.int64)
        except Exception as e:  # noqa: BLE001 - a malformed tensor: name it
            from .util.errors import first_line

            raise ProvmapError(f"sparse initializer {sp.values.name!r}: cannot read it: "
                               f"{first_line(e)}") from None
        dense = np.zeros(int(np.prod(dims, dtype=np.int64)), dtype=values.dtype)
        flat = idx if idx.ndim == 1 else np.ravel_multi_index(tuple(idx.T), dims)
        dense[flat] = values.ravel()
        out.graph.initializer.append(numpy_helper.from_array(dense.reshape(dims), sp.values.name))
    del out.graph.sparse_initializer[:]
    return out


def _topological_order(graph: onnx.GraphProto) -> list[int] | None:
    """None when the file is already sorted (the common case: one pass, no hashing), or when
    no order would do."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer} \
        | {t.values.name for t in graph.sparse_initializer} | {""}
    for n in graph.node:
        if any(x not in defined for x in _ids.node_inputs(n)):
            break
        defined.update(n.output)
    else:
        return None
    known = {i.name for i in graph.input} | {t.name for t in graph.initializer} \
        | {t.values.name for t in graph.sparse_initializer}
    try:
        return _ids.topological_order(graph, known)
    except _ids.GraphOrderError:
        return None  # not a matter of order (a cycle, an undefined tensor): the checker says


def _value_infos(graph: onnx.GraphProto):
    yield from graph.input
    yield from graph.output
    yield from graph.value_info


def _dims(vi: onnx.ValueInfoProto):
    if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
        return vi.type.tensor_type.shape.dim
    return ()


def _has_negative_dims(graph: onnx.GraphProto) -> bool:
    return any(d.HasField("dim_value") and d.dim_value < 0
               for vi in _value_infos(graph) for d in _dims(vi))


def _initializers_not_inputs(graph: onnx.GraphProto) -> list[str]:
    inputs = {i.name for i in graph.input}
    return [t.name for t in graph.initializer if t.name not in inputs]


def for_checker(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model onnx.checker is shown: graph inputs and outputs without a shape get an empty
    one, for the check only.

    The checker requires a shape on every tensor the main graph takes or returns; ONNX Runtime
    does not (the shape comes from --input-shape, or from inference for outputs).  The checker
    does not infer shapes (no full_check), so the placeholder changes no other verdict."""
    missing = [k for k, vi in enumerate(list(model.graph.input) + list(model.graph.output))
               if vi.type.HasField("tensor_type") and not vi.type.tensor_type.HasField("shape")]
    if not missing:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    ios = list(out.graph.input) + list(out.graph.output)
    for k in missing:
        ios[k].type.tensor_type.shape.SetInParent()
    return out


# -- declared graph-output shapes ------------------------------------------------------------

def dims_text(tt) -> str:
    if not tt.HasField("shape"):
        return "[rank unknown]"
    return "[" + ", ".join(str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?")
                           for d in tt.shape.dim) + "]"


def _compatible(declared, computed) -> bool:
    if len(declared.dim) != len(computed.dim):
        return False
    return all(not (a.HasField("dim_value") and b.HasField("dim_value"))
               or a.dim_value == b.dim_value for a, b in zip(declared.dim, computed.dim))


def _merged(declared, computed) -> onnx.TensorShapeProto:
    """The computed shape, with a size the declaration fixes where inference left a symbol."""
    out = onnx.TensorShapeProto()
    for a, b in zip(declared.dim, computed.dim):
        d = out.dim.add()
        d.CopyFrom(b if b.HasField("dim_value") or not a.HasField("dim_value") else a)
    return out


def _refuse_other_dtype(model: onnx.ModelProto, vi: onnx.ValueInfoProto, tp,
                        what: str = "graph output", where: str = "",
                        fix: str = "correct the output's declared type") -> None:
    """A graph output declared with one element type and computed as another: ONNX Runtime
    refuses to load such a model, and provmap built an artifact that could never run (issue
    36's sixth afternoon: float16 declared, float32 computed; the ORT build blamed the first
    Conv).  Refused at import, naming the output, its producer and both types."""
    from .util.dtypes import onnx_dtype

    if not vi.type.HasField("tensor_type") or tp is None or not tp.HasField("tensor_type"):
        return
    want, got = vi.type.tensor_type.elem_type, tp.tensor_type.elem_type
    if not want or not got or want == got:
        return
    names = []
    for t in (want, got):
        try:
            names.append(onnx_dtype(t))
        except Exception:  # noqa: BLE001 - a type numpy cannot hold: its ONNX number
            names.append(f"element type {t}")
    producer = next((n for n in model.graph.node if vi.name in n.output), None)
    by = f" (by {producer.op_type} '{producer.name}')" if producer is not None else ""
    raise ProvmapError(f"{what} '{vi.name}' is declared {names[0]}{where} but the model "
                       f"computes {names[1]}{by}; ONNX Runtime refuses such a model too: {fix}")


def reconcile_outputs(model: onnx.ModelProto, types: dict, declared_only: set | None = None,
                      ) -> tuple[onnx.ModelProto, dict, list[str], set[str]]:
    """Graph outputs typed as computed, where shape inference computed them.

    `types` comes from provmap.provenance.fold.infer_types, which does not show inference the
    declared output shapes; `declared_only` names the outputs it typed from the declaration alone.
    Returns the model (a copy where an output's declared shape is replaced), the types with
    compatible declared sizes merged in, one warning per output whose declared shape the
    computed one contradicts (rank or a fixed size), and the outputs whose shape, in whole or
    in part, only the declaration gives: hints, since nothing checked them (ORT returns what it
    computes whatever the declaration says; the executor does the same and warns).
    """
    from .type_clash import refuse_type_clash
    from .util.dtypes import onnx_dtype

    refuse_type_clash(model, types)  # a node's own clash, before blaming a declared output
    types = dict(types)
    warnings: list[str] = []
    replace: dict[int, onnx.TypeProto] = {}
    hints = {o.name for o in model.graph.output} & set(declared_only or ())
    for k, vi in enumerate(model.graph.output):
        _refuse_other_dtype(model, vi, types.get(vi.name))
        if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape") \
                or vi.name in hints:
            continue
        declared = vi.type.tensor_type
        tp = types.get(vi.name)
        if tp is None or not tp.HasField("tensor_type") or not tp.tensor_type.HasField("shape"):
            types[vi.name] = vi.type  # nothing computed it: the declaration is all there is
            hints.add(vi.name)
            continue
        computed = tp.tensor_type
        if _compatible(declared.shape, computed.shape):
            if any(a.HasField("dim_value") and not b.HasField("dim_value")
                   for a, b in zip(declared.shape.dim, computed.shape.dim)):
                hints.add(vi.name)  # a size inference left open, taken from the declaration
            merged = onnx.TypeProto()
            merged.CopyFrom(tp)
            merged.tensor_type.shape.CopyFrom(_merged(declared.shape, computed.shape))
            types[vi.name] = merged
            continue
        try:
            dtype = onnx_dtype(computed.elem_type or declared.elem_type)
        except Exception:
            dtype = "tensor"
        warnings.append(f"graph output '{vi.name}' is declared {dtype}{dims_text(declared)} but "
                        f"the model computes {dtype}{dims_text(computed)}; the computed shape is "
                        "used (as ONNX Runtime does)")
        replace[k] = tp
    if not replace:
        return model, types, warnings, hints
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for k, tp in replace.items():
        out.graph.output[k].type.tensor_type.shape.CopyFrom(tp.tensor_type.shape)
    return out, types, warnings, hints


def drop_stale_value_info(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """Intermediate shape declarations (graph.value_info) that the model's own computation
    contradicts, dropped, with one note each (at most three, then a count).

    ONNX Runtime merges them leniently and runs the model; ONNX's inference keeps a stale
    declaration and carries it downstream, so a boundary tensor got the declared size and the
    next partition failed to build, blaming a node three ops later (issue 36's sixth
    afternoon: a MaxPool output declared [1,24,7,7], computed [1,24,16,16]).  The computed
    shapes come from an inference with no value_info at all; a declaration that inference
    cannot check (after com.microsoft ops, data-dependent sizes) stays.

    This inference is its own, not infer_types': that one keeps value_info, which carries
    shapes past ops onnx cannot infer, and it runs after sorting and folding.  It costs 4 ms of
    a 150 ms import of ResNet-50 declaring all 414 intermediate tensors (2026-11-27)."""
    import warnings

    from .fold import weightless

    if not model.graph.value_info:
        return model, []
    bare = onnx.ModelProto()
    bare.CopyFrom(weightless(model))
    del bare.graph.value_info[:]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            inferred = onnx.shape_inference.infer_shapes(bare, strict_mode=False,
                                                         data_prop=True)
    except Exception:  # noqa: BLE001 - nothing computed: nothing to contradict
        return model, []
    computed = {vi.name: _dim_tuple(vi.type) for vi in inferred.graph.value_info}
    types = {vi.name: vi.type for vi in inferred.graph.value_info}
    stale = []
    for vi in model.graph.value_info:
        # another element type is no stale size: ONNX Runtime refuses the model (the seventh
        # afternoon's double declared for a float Gemm output), and so does provmap
        _refuse_other_dtype(model, vi, types.get(vi.name), "tensor", " in value_info",
                            "correct or drop its value_info entry")
        want, got = _dim_tuple(vi.type), computed.get(vi.name)
        if want is not None and got is not None and _contradicts(want, got):
            stale.append((vi.name, want, got))
    if not stale:
        return model, []
    out = onnx.ModelProto()
    out.CopyFrom(model)
    names = {n for n, _w, _g in stale}
    keep = [vi for vi in out.graph.value_info if vi.name not in names]
    del out.graph.value_info[:]
    out.graph.value_info.extend(keep)
    notes = [f"tensor '{n}' is declared {_shown(w)} in value_info but the model computes "
             f"{_shown(g)}; the computed shape is used (ONNX Runtime may refuse the file as "
             "given: compare then needs --reference openvino or a copy without the entry)"
             for n, w, g in stale[:3]]
    if len(stale) > 3:
        notes.append(f"{len(stale) - 3} more value_info declaration(s) the model contradicts "
                     "were dropped the same way")
    return out, notes


def _dim_tuple(tp) -> tuple | None:
    """A declared or computed shape: each dimension an int, a name, or None; None when the
    rank is unknown."""
    if tp is None or not tp.HasField("tensor_type") or not tp.tensor_type.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                 for d in tp.tensor_type.shape.dim)


def _shown(dims: tuple) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def _contradicts(want: tuple, got: tuple) -> bool:
    """Another rank, or a dimension both sides know as a number, another number ("N" against
    16 is no contradiction: N is whatever the input gives).  A symbolic declaration of the
    wrong rank or width was dropped silently (the tenth afternoon: ["N", 99] for [N, 16])."""
    return len(want) != len(got) or any(isinstance(a, int) and isinstance(b, int) and a != b
                                        for a, b in zip(want, got))


def file_order_of(given: onnx.ModelProto, nodes) -> list[int] | None:
    """Each imported node's position in the model as given, when normalize (or the importer)
    put the nodes in another order (None when they kept the file's).  Nodes are matched by
    their outputs, which sorting leaves as they are."""
    pos = {tuple(n.output): i for i, n in enumerate(given.graph.node)}
    order = [pos.get(tuple(n.outputs)) for n in nodes]
    if None in order or order == list(range(len(order))) or len(set(order)) != len(order):
        return None
    return order

def frozen_inputs(model) -> list[str]:
    """Graph inputs that also have an initializer: ONNX Runtime lets a caller override them
    (an "overridable initializer"); provmap compiles their initializer in as a constant.  Said
    once at compile (issue 36's seventh afternoon: `run` later refused the input by name, with
    no word of why)."""
    if model.ir_version < 4:  # before IR 4 every initializer had to be listed as an input
        return []
    init = {t.name for t in model.graph.initializer}
    frozen = [i.name for i in model.graph.input if i.name in init]
    if not frozen:
        return []
    return [f"graph input(s) {first_few(frozen, quote=True)} also have an "
            "initializer: ONNX Runtime lets a caller override them; provmap compiles the "
            "initializer in as a constant, and `run` takes only the other inputs"]


def duplicate_node_names(model) -> list[str]:
    """ONNX Runtime refuses a file naming two nodes alike ("two nodes with same node name");
    provmap keys nodes by content IDs and compiles it, but the reference compare runs would
    then fail on it: said once at compile (issue 36's eighth afternoon)."""
    seen: dict[str, int] = {}
    for n in model.graph.node:
        if n.name:
            seen[n.name] = seen.get(n.name, 0) + 1
    dup = [k for k, c in seen.items() if c > 1]
    if not dup:
        return []
    return [f"node name(s) {first_few(dup, quote=True)} appear more than once: "
            "ONNX Runtime refuses such a file, so `compare` and `bisect` cannot use it as the "
            "reference; provmap's node IDs tell the nodes apart"]
