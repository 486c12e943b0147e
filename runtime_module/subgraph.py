"""One region of a model, seen both as exact ONNX nodes and as the Relax bindings they became.

Partitioning happens on ONNX nodes that compute something at run time ("op nodes").  Nodes that
only make constants or shapes (Constant, ConstantOfShape weights, a Shape of a static tensor:
"helper nodes") are not partitioned on their own; each subgraph carries a private copy of the
helpers its op nodes need.  That keeps every boundary an ordinary ONNX tensor, which both worlds
agree on: ONNX-consuming backends get a model cut from the original nodes and initializers
(never a re-export, so the vendor sees the nodes the user wrote), and TVM gets the same region as
an outlined Relax function whose bindings keep their provenance expression IDs.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property
from typing import Iterable

import numpy as np
import onnx
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from provmap.provenance.errors import ProvmapError, describe_node
from provmap.provenance.ids import node_inputs
from provmap.provenance.importer import Imported
from provmap.provenance.model import ROLE_PRODUCED


@dataclass(frozen=True)
class TensorSpec:
    """A boundary tensor.  A dimension is None where it depends on data (NonZero, Unique...):
    the backends that produce such a tensor allocate it per run; pricing counts it as 1."""

    name: str
    shape: tuple[int | None, ...]
    dtype: str

    @property
    def static(self) -> bool:
        return all(d is not None for d in self.shape)

    @property
    def nbytes(self) -> int:
        return int(np.prod([d or 1 for d in self.shape], dtype=np.int64)) * _itemsize(self.dtype)

    def to_dict(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype,
                "bytes": self.nbytes}

    @classmethod
    def from_dict(cls, d: dict) -> "TensorSpec":
        return cls(d["name"], tuple(d["shape"]), d["dtype"])


def _elem_dtype(elem_type: int) -> str:
    if elem_type == onnx.TensorProto.BFLOAT16:
        return "bfloat16"
    return str(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)))


def _itemsize(dtype: str) -> int:
    try:
        return np.dtype(dtype).itemsize
    except TypeError:
        import ml_dtypes  # bfloat16, float8 variants

        return np.dtype(getattr(ml_dtypes, dtype)).itemsize


class GraphView:
    """Whole-model facts every subgraph needs: producers, consumers, types, op/helper split."""

    def __init__(self, imported: Imported):
        if imported.model is None:
            raise ValueError("GraphView needs an Imported from provmap.provenance.importer.import_onnx")
        self.imported = imported
        self.model = imported.model
        self.graph = self.model.graph
        self.nodes = list(self.graph.node)
        #: Each node's inputs including outer-scope reads of its subgraphs (If/Loop/Scan).
        self.node_inputs = [node_inputs(n) for n in self.nodes]
        self.initializers = {t.name: t for t in self.graph.initializer}
        self.graph_inputs = [i.name for i in self.graph.input if i.name not in self.initializers]
        self.graph_outputs = [o.name for o in self.graph.output]
        self.producer: dict[str, int] = {}
        self.consumers: dict[str, list[int]] = {}
        for i, n in enumerate(self.nodes):
            for o in n.output:
                if o:
                    self.producer[o] = i
            for x in self.node_inputs[i]:
                if x:
                    self.consumers.setdefault(x, []).append(i)
        self.node_ids = [n.id for n in imported.pmap.nodes]
        self.produced: dict[int, list[str]] = {}
        index_of = {nid: i for i, nid in enumerate(self.node_ids)}
        for nid, eid, role in imported.pmap.node_exprs:
            if role == ROLE_PRODUCED:
                self.produced.setdefault(index_of[nid], []).append(eid)
        self.op_nodes = self._runtime_nodes()
        self._is_op = set(self.op_nodes)
        self._types = self._infer_types()
        self._helper_users = self._compute_helper_users()

    def _runtime_nodes(self) -> list[int]:
        """Op nodes, decided on the ONNX graph: a node computes at run time iff it reads a graph
        input (directly or through other such nodes) or its value changes per run (random ops).

        Everything else is a constant after provmap.provenance.fold (or a weight generator it left
        alone), so it is copied into each region that needs it rather than partitioned.  An
        alias (Identity) of a run-time tensor is an op node too: it has no Relax binding, but
        it names a tensor a region may have to return.
        """
        from provmap.provenance.fold import NONDETERMINISTIC

        live = set(self.graph_inputs)
        out = []
        for i, n in enumerate(self.nodes):
            if n.op_type in NONDETERMINISTIC or any(x in live for x in self.node_inputs[i] if x) \
                    or i in self.imported.opaque and not any(self.node_inputs[i]):
                out.append(i)
                live.update(o for o in n.output if o)
        return out

    # -- structure -------------------------------------------------------------------------
    def is_op(self, i: int) -> bool:
        return i in self._is_op

    def describe(self, i: int) -> str:
        # The node as the user wrote it (provmap.provenance.fold may have replaced it by a Constant).
        return describe_node(i, self.imported.pmap.nodes[i])

    def helper_closure(self, ops: Iterable[int]) -> set[int]:
        """Helper nodes feeding `ops` through helper-only paths (each subgraph copies them)."""
        seen: set[int] = set()
        stack = list(ops)
        while stack:
            i = stack.pop()
            for x in self.node_inputs[i]:
                p = self.producer.get(x)
                if p is not None and p not in self._is_op and p not in seen:
                    seen.add(p)
                    stack.append(p)
        return seen

    def _compute_helper_users(self) -> dict[int, set[int]]:
        users: dict[int, set[int]] = {}
        for op in self.op_nodes:
            for h in self.helper_closure([op]):
                users.setdefault(h, set()).add(op)
        return users

    def op_successors(self, i: int) -> set[int]:
        """Op nodes that read an output of op node `i` (directly or through helpers)."""
        out: set[int] = set()
        for o in self.nodes[i].output:
            for c in self.consumers.get(o, ()):
                if c in self._is_op:
                    out.add(c)
                else:
                    out |= self._helper_users.get(c, set())
        return out

    # -- types -----------------------------------------------------------------------------
    def _infer_types(self) -> dict[str, TensorSpec]:
        from provmap.provenance.fold import infer_types

        types: dict[str, TensorSpec] = {}
        for name, tp in (self.imported.onnx_types or infer_types(self.model)).items():
            if not tp.HasField("tensor_type") or not tp.tensor_type.elem_type \
                    or not tp.tensor_type.HasField("shape"):
                continue
            tt = tp.tensor_type
            try:
                dtype = _elem_dtype(tt.elem_type)
            except Exception:
                continue
            dims = tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)
            types[name] = TensorSpec(name, dims, dtype)
        # Relax knows every static shape it computed; prefer it where ONNX inference gave up.
        for name, val in self.imported.tensor_values.items():
            if (name in types and types[name].static) or name in self.initializers:
                continue
            ty = getattr(val, "ty", None)
            shape = getattr(ty, "shape", None)
            dtype = getattr(ty, "dtype", None)
            if shape is None or dtype is None or not hasattr(shape, "values"):
                continue
            try:
                dims = tuple(int(d) for d in shape.values)
            except (TypeError, ValueError):
                continue
            types[name] = TensorSpec(name, dims, str(dtype))
        return types

    def spec(self, tensor: str) -> TensorSpec:
        t = self._types.get(tensor)
        if t is None:
            p = self.producer.get(tensor)
            where = self.describe(p) if p is not None else "a graph input"
            raise ProvmapError(f"{self.imported.label}: tensor '{tensor}' (from {where}) has no "
                               "known tensor type or rank; provmap partitions tensors only")
        return t

    def dtype(self, tensor: str) -> str | None:
        """Element type of any tensor, initializers included; None where it is not known."""
        init = self.initializers.get(tensor)
        if init is not None:
            try:
                return _elem_dtype(init.data_type)
            except Exception:
                return None
        t = self._types.get(tensor)
        return t.dtype if t is not None else None

    def constant_outputs(self) -> dict[str, np.ndarray]:
        """Graph outputs no op node computes (constants, or nodes folded before import), with
        their values: an artifact returns them without running anything.

        Evaluated with onnx.reference on the constant nodes that produce them, so a model whose
        every node folds (a Shape of a static input, a Constant) still runs.
        """
        want = [o for o in self.graph_outputs
                if o not in self.graph_inputs and self.producer.get(o) not in self._is_op]
        if not want:
            return {}
        from onnx.reference import ReferenceEvaluator

        values: dict[str, np.ndarray] = {}
        for o in want:
            if o in self.initializers:
                values[o] = onnx.numpy_helper.to_array(self.initializers[o])
        rest = [o for o in want if o not in values]
        if rest:
            closure = sorted({self.producer[o] for o in rest if o in self.producer}
                             | self.helper_closure(self.producer[o] for o in rest
                                                   if o in self.producer))
            g = onnx.helper.make_graph(
                [self.nodes[i] for i in closure], "constants", [],
                [onnx.helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None)
                 for o in rest],
                [self.initializers[x] for x in sorted({x for i in closure
                                                       for x in self.node_inputs[i]
                                                       if x in self.initializers})])
            m = onnx.helper.make_model(g, opset_imports=list(self.model.opset_import))
            try:
                res = ReferenceEvaluator(m).run(None, {})
            except Exception as e:
                raise ProvmapError(f"{self.imported.label}: graph output(s) {rest} are constants "
                                   f"that onnx.reference could not evaluate: {e}") from None
            values.update({o: np.asarray(v) for o, v in zip(rest, res)})
        return values

    def subgraph(self, ops: Iterable[int], expose: Iterable[str] = ()) -> "Subgraph":
        return Subgraph(self, ops, expose)


@mutator
class _Substitute(PyExprMutator):
    def __init__(self, mapping):
        super().__init__()
        self.mapping = mapping

    def visit_var_(self, v):
        return self.mapping.get(v, v)

    def visit_dataflow_var_(self, v):
        return self.mapping.get(v, v)


class Subgraph:
    """A set of op nodes plus their helper closure; the unit backends build and the search prices."""

    def __init__(self, view: GraphView, ops: Iterable[int], expose: Iterable[str] = ()):
        self.view = view
        self.ops: tuple[int, ...] = tuple(sorted(set(ops)))
        if not self.ops:
            raise ValueError("empty subgraph")
        for i in self.ops:
            if not view.is_op(i):
                raise ValueError(f"{view.describe(i)} computes nothing at run time; it is not "
                                 "partitioned on its own")
        self._opset = set(self.ops)
        #: Tensors of this region returned although nothing outside reads them (bisect
        #: compares every intermediate, as Polygraphy's "mark all" does).
        self._expose = set(expose)
        #: ONNX node indices in the cut model, in its order (op nodes and copied helpers).
        self.closure: list[int] = sorted(self._opset | view.helper_closure(self.ops))
        self._closure_set = set(self.closure)
        self._relax = None

    # -- boundary --------------------------------------------------------------------------
    @cached_property
    def inputs(self) -> list[TensorSpec]:
        v = self.view
        names: list[str] = []
        for i in self.closure:
            for x in v.node_inputs[i]:
                if not x or x in v.initializers or x in names:
                    continue
                p = v.producer.get(x)
                if p is None or p not in self._closure_set:
                    names.append(x)
        return [v.spec(x) for x in names]

    @cached_property
    def outputs(self) -> list[TensorSpec]:
        v = self.view
        graph_outputs = set(v.graph_outputs)
        names = []
        for i in self.ops:
            for o in v.nodes[i].output:
                if not o:
                    continue
                if o in graph_outputs or o in self._expose or self._leaves_region(o):
                    names.append(o)
        return [v.spec(x) for x in names]

    def _leaves_region(self, tensor: str) -> bool:
        v = self.view
        for c in v.consumers.get(tensor, ()):
            if c in v._is_op:
                if c not in self._opset:
                    return True
            elif v._helper_users.get(c, set()) - self._opset:
                return True
        return False

    @cached_property
    def exprs(self) -> list[str]:
        """Relax expression IDs computed by this subgraph (its nodes' produced bindings)."""
        return [e for i in self.closure for e in self.view.produced.get(i, ())]

    @property
    def node_ids(self) -> list[str]:
        return [self.view.node_ids[i] for i in self.closure]

    @cached_property
    def key(self) -> str:
        """Structural hash: equal for identical regions (repeated blocks), across models too.

        It hashes the cut ONNX model with tensor and node names replaced by positions, so two
        ResNet blocks with the same weights' shapes, attributes and wiring share measurements.
        Weight *values* are excluded (they do not change latency); shapes and dtypes are in.
        """
        v = self.view
        h = hashlib.blake2b(digest_size=16)
        local: dict[str, str] = {}
        for k, t in enumerate(self.inputs):
            local[t.name] = f"i{k}"
            h.update(f"in:{t.shape}:{t.dtype};".encode())
        for pos, i in enumerate(self.closure):
            n = v.nodes[i]
            args = []
            for x in v.node_inputs[i]:
                if not x:
                    args.append("-")
                elif x in local:
                    args.append(local[x])
                elif x in v.initializers:
                    init = v.initializers[x]
                    args.append(f"w{list(init.dims)}:{init.data_type}")
                else:
                    args.append("?")
            for k, o in enumerate(n.output):
                local[o] = f"n{pos}.{k}"
            attrs = sorted((a.name, onnx.helper.get_attribute_value(a)) for a in n.attribute
                           if a.type != onnx.AttributeProto.TENSOR)
            tens = sorted((a.name, list(a.t.dims), a.t.data_type) for a in n.attribute
                          if a.type == onnx.AttributeProto.TENSOR)
            h.update(f"{n.domain}:{n.op_type}({','.join(args)}){attrs!r}{tens!r};".encode())
        for t in self.outputs:
            h.update(f"out:{local.get(t.name)};".encode())
        return h.hexdigest()

    # -- ONNX view -------------------------------------------------------------------------
    def onnx_model(self) -> onnx.ModelProto:
        """The subgraph as a standalone ONNX model made of the original nodes and initializers."""
        v = self.view
        src = v.model
        g = onnx.GraphProto()
        g.name = f"{src.graph.name or 'graph'}_sub"
        g.node.extend(v.nodes[i] for i in self.closure)
        used = {x for i in self.closure for x in v.node_inputs[i] if x in v.initializers}
        g.initializer.extend(v.initializers[x] for x in sorted(used))
        for t in self.inputs:
            g.input.append(_value_info(t))
        for t in self.outputs:
            g.output.append(_value_info(t))
        m = onnx.ModelProto()
        # IR >= 4 lets initializers stay out of graph.input, so consumers cannot override them.
        m.ir_version = max(src.ir_version, 4)
        m.opset_import.extend(src.opset_import)
        m.producer_name = "provmap"
        m.graph.CopyFrom(g)
        return m

    # -- Relax view ------------------------------------------------------------------------
    def relax_function(self) -> tuple[relax.Function, dict, list[str], list[str]]:
        """Outline this region of the imported "main" as a standalone Relax function.

        Returns (function, var_expr, param tensor names, output tensor names).  The bindings are
        the imported ones (same Var objects, same expression IDs), so provenance tracking of a
        TVM build of this function maps kernels straight back to the model's expression IDs.
        Params cover only tensors the Relax code actually reads (e.g. not a tensor whose Shape
        was folded at import).  Cached: callers share one function object per subgraph.
        """
        if self._relax is None:
            self._relax = self._outline()
        return self._relax

    def _outline(self):
        v = self.view
        imp = v.imported
        func = imp.mod["main"]
        all_bindings = [b for blk in func.body.blocks for b in blk.bindings]
        defining = {b.var: b for b in all_bindings}
        name_of = {}
        for name, val in imp.tensor_values.items():
            if isinstance(val, relax.Var):
                name_of.setdefault(val, name)
        input_names = {t.name for t in self.inputs}
        want = set(self.exprs)
        chosen = {b.var for b in all_bindings if imp.var_expr.get(b.var) in want}
        # A converter may read another node's intermediate Relax value (not an ONNX tensor at
        # all); recompute such values inside the region instead of refusing it.
        stack = list(chosen)
        while stack:
            b = defining[stack.pop()]
            for x in _value_vars(b.value):
                if x in chosen or x not in defining:
                    continue
                if name_of.get(x) in input_names:
                    continue
                chosen.add(x)
                stack.append(x)
        bindings = [b for b in all_bindings if b.var in chosen]
        defined = {b.var for b in bindings}
        free = []
        for b in bindings:
            for x in _value_vars(b.value):
                if x not in defined and x not in free:
                    free.append(x)
        outputs = [(t.name, imp.tensor_values.get(t.name)) for t in self.outputs]
        for _, val in outputs:  # a region that only renames (Identity) returns its input
            if isinstance(val, relax.Var) and val not in defined and val not in free:
                free.append(val)
        params, param_names, mapping = [], [], {}
        for x in free:
            name = name_of.get(x)
            if name is None:
                raise ProvmapError(f"{imp.label}: region reads Relax var {x.name} that is not an "
                                   "ONNX tensor; cannot outline it")
            p = relax.Var(x.name, x.ty)
            params.append(p)
            param_names.append(name)
            mapping[x] = p
        sub = _Substitute(mapping)
        new_bindings = [relax.MatchCast(b.var, sub.visit_expr(b.value), b.ty)
                        if isinstance(b, relax.MatchCast)  # it binds symbolic shape variables
                        else relax.VarBinding(b.var, sub.visit_expr(b.value)) for b in bindings]
        var_expr = {b.var: imp.var_expr[b.var] for b in bindings}
        outs, out_names = [], []
        for name, val in outputs:
            if isinstance(val, relax.Var):
                src = mapping.get(val, val)
            elif isinstance(val, relax.Expr) and not isinstance(val, relax.Tuple):
                src = val  # a constant the importer folded: the region returns it as is
            else:
                raise ProvmapError(f"{imp.label}: output '{name}' of the region has no Relax "
                                   "value (the Relax import produced none for it)")
            o = relax.Var(f"out{len(outs)}", _erase_symbolic(src.ty))
            new_bindings.append(relax.VarBinding(o, src))
            if val in var_expr:
                var_expr[o] = var_expr[val]
            outs.append(o)
            out_names.append(name)
        ret = outs[0] if len(outs) == 1 else relax.Tuple(outs)
        body = relax.SeqExpr([relax.DataflowBlock(new_bindings)], ret)
        ret_ty = outs[0].ty if len(outs) == 1 else relax.TupleType([o.ty for o in outs])
        fn = relax.Function(params, body, ret_ty, True)
        return fn, var_expr, param_names, out_names


def _value_vars(value) -> list:
    """Free Relax variables of a binding's value, without its symbolic shape variables (TVM
    0.27's free_vars lists both; the region binds the symbolic ones with its own match_cast)."""
    symbolic = set(relax.analysis.free_symbolic_vars(value))
    return [x for x in relax.analysis.free_vars(value) if x not in symbolic]


def _erase_symbolic(ty):
    """A return type without symbolic dimensions the caller could not bind.

    NonZero, Unique, Tile of a run-time count...: the region binds their sizes inside with a
    match_cast, so a function returning `R.Tensor((n,))` would name `n` outside its scope.  The
    rank and dtype stay; TVM's importer types its own "main" the same way.
    """
    if isinstance(ty, relax.TensorType) and isinstance(ty.shape, relax.ShapeExpr):
        if all(isinstance(d, tvm.tirx.IntImm) for d in ty.shape.values):
            return ty
        return relax.TensorType(None, ty.dtype, ndim=len(ty.shape.values))
    if isinstance(ty, relax.TupleType):
        return relax.TupleType([_erase_symbolic(f) for f in ty.fields])
    return ty


def _value_info(t: TensorSpec) -> onnx.ValueInfoProto:
    elem = (onnx.TensorProto.BFLOAT16 if t.dtype == "bfloat16"
            else onnx.helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype)))
    return onnx.helper.make_tensor_value_info(t.name, elem, list(t.shape))
