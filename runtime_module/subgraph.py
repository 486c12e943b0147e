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
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from provenance.errors import ProvmapError, describe_node
from provenance.importer import Imported
from provenance.model import ROLE_PRODUCED


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize

    def to_dict(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype,
                "bytes": self.nbytes}

    @classmethod
    def from_dict(cls, d: dict) -> "TensorSpec":
        return cls(d["name"], tuple(d["shape"]), d["dtype"])


def _elem_dtype(elem_type: int) -> str:
    return str(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)))


class GraphView:
    """Whole-model facts every subgraph needs: producers, consumers, types, op/helper split."""

    def __init__(self, imported: Imported):
        if imported.model is None:
            raise ValueError("GraphView needs an Imported from provenance.importer.import_onnx")
        self.imported = imported
        self.model = imported.model
        self.graph = self.model.graph
        self.nodes = list(self.graph.node)
        self.initializers = {t.name: t for t in self.graph.initializer}
        self.graph_inputs = [i.name for i in self.graph.input if i.name not in self.initializers]
        self.graph_outputs = [o.name for o in self.graph.output]
        self.producer: dict[str, int] = {}
        self.consumers: dict[str, list[int]] = {}
        for i, n in enumerate(self.nodes):
            for o in n.output:
                if o:
                    self.producer[o] = i
            for x in n.input:
                if x:
                    self.consumers.setdefault(x, []).append(i)
        self.node_ids = [n.id for n in imported.pmap.nodes]
        self.produced: dict[int, list[str]] = {}
        index_of = {nid: i for i, nid in enumerate(self.node_ids)}
        for nid, eid, role in imported.pmap.node_exprs:
            if role == ROLE_PRODUCED:
                self.produced.setdefault(index_of[nid], []).append(eid)
        const = imported.const_exprs
        self.op_nodes = [i for i in range(len(self.nodes))
                         if any(e not in const for e in self.produced.get(i, ()))]
        self._is_op = set(self.op_nodes)
        self._types = self._infer_types()
        self._helper_users = self._compute_helper_users()

    # -- structure -------------------------------------------------------------------------
    def is_op(self, i: int) -> bool:
        return i in self._is_op

    def describe(self, i: int) -> str:
        return describe_node(i, self.nodes[i])

    def helper_closure(self, ops: Iterable[int]) -> set[int]:
        """Helper nodes feeding `ops` through helper-only paths (each subgraph copies them)."""
        seen: set[int] = set()
        stack = list(ops)
        while stack:
            i = stack.pop()
            for x in self.nodes[i].input:
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
        types: dict[str, TensorSpec] = {}
        try:
            inferred = onnx.shape_inference.infer_shapes(_weightless(self.model),
                                                         strict_mode=False)
            vis = list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output)
        except Exception:  # fall back to Relax's types below
            vis = list(self.graph.input) + list(self.graph.output)
        for vi in vis:
            tt = vi.type.tensor_type
            if not tt.HasField("shape") or not tt.elem_type:
                continue
            dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
            if any(d is None for d in dims):
                continue
            types[vi.name] = TensorSpec(vi.name, tuple(dims), _elem_dtype(tt.elem_type))
        # Relax knows every static shape it computed; prefer it where ONNX inference gave up.
        for name, val in self.imported.tensor_values.items():
            if name in types or name in self.initializers:
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
                               "static shape; provmap partitions static-shape models only")
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

    def subgraph(self, ops: Iterable[int]) -> "Subgraph":
        return Subgraph(self, ops)


_WEIGHT_BYTES = 1 << 16


def _weightless(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` for shape inference: large initializers become typed graph inputs.

    Shape inference serializes the whole model and parses it again in C++: for VGG-19's 400 MB
    classifier that is seconds per GraphView (and the cost estimator builds one per measured
    region).  It needs only the *types* of weights; small initializers (shape tensors, axes,
    which inference reads as values) are kept as they are.
    """
    big = [t for t in model.graph.initializer
           if len(t.raw_data) > _WEIGHT_BYTES or len(t.float_data) * 4 > _WEIGHT_BYTES]
    if not big:
        return model
    big_names = {t.name for t in big}
    out = onnx.ModelProto()
    for f in ("ir_version", "producer_name", "producer_version", "domain", "model_version"):
        setattr(out, f, getattr(model, f))
    out.opset_import.extend(model.opset_import)
    out.functions.extend(model.functions)
    g, src = out.graph, model.graph
    g.name = src.name
    g.node.extend(src.node)
    g.input.extend(i for i in src.input if i.name not in big_names)
    g.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                   for t in big)
    g.initializer.extend(t for t in src.initializer if t.name not in big_names)
    g.sparse_initializer.extend(src.sparse_initializer)
    g.output.extend(src.output)
    g.value_info.extend(src.value_info)
    return out


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

    def __init__(self, view: GraphView, ops: Iterable[int]):
        self.view = view
        self.ops: tuple[int, ...] = tuple(sorted(set(ops)))
        if not self.ops:
            raise ValueError("empty subgraph")
        for i in self.ops:
            if not view.is_op(i):
                raise ValueError(f"{view.describe(i)} computes nothing at run time; it is not "
                                 "partitioned on its own")
        self._opset = set(self.ops)
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
            for x in v.nodes[i].input:
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
                if o in graph_outputs or self._leaves_region(o):
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
            for x in n.input:
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
        used = {x for i in self.closure for x in v.nodes[i].input if x in v.initializers}
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
        want = set(self.exprs)
        bindings = [b for blk in func.body.blocks for b in blk.bindings
                    if imp.var_expr.get(b.var) in want]
        defined = {b.var for b in bindings}
        name_of = {}
        for name, val in imp.tensor_values.items():
            if isinstance(val, relax.Var):
                name_of.setdefault(val, name)
        free = []
        for b in bindings:
            for x in relax.analysis.free_vars(b.value):
                if x not in defined and x not in free:
                    free.append(x)
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
        new_bindings = [relax.VarBinding(b.var, sub.visit_expr(b.value)) for b in bindings]
        var_expr = {b.var: imp.var_expr[b.var] for b in bindings}
        outs, out_names = [], []
        for t in self.outputs:
            val = imp.tensor_values.get(t.name)
            if not isinstance(val, relax.Var) or val not in defined:
                raise ProvmapError(f"{imp.label}: output '{t.name}' of the region is not computed "
                                   "by its Relax bindings (folded at import?)")
            o = relax.Var(f"out{len(outs)}", val.ty)
            new_bindings.append(relax.VarBinding(o, val))
            var_expr[o] = var_expr[val]
            outs.append(o)
            out_names.append(t.name)
        ret = outs[0] if len(outs) == 1 else relax.Tuple(outs)
        body = relax.SeqExpr([relax.DataflowBlock(new_bindings)], ret)
        ret_ty = outs[0].ty if len(outs) == 1 else relax.TupleType([o.ty for o in outs])
        fn = relax.Function(params, body, ret_ty, True)
        return fn, var_expr, param_names, out_names


def _value_info(t: TensorSpec) -> onnx.ValueInfoProto:
    return onnx.helper.make_tensor_value_info(
        t.name, onnx.helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype)), list(t.shape))
