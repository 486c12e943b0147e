"""One region of a model, seen both as exact ONNX nodes and as the Relax bindings they became.

A subgraph carries a private copy of the helper nodes its op nodes need (see `graph_view`).
That keeps every boundary an ordinary ONNX tensor, which both worlds agree on: ONNX-consuming
backends get a model cut from the original nodes and initializers (never a re-export, so the
vendor sees the nodes the user wrote), and TVM gets the same region as an outlined Relax
function whose bindings keep their provenance expression IDs.
"""

from __future__ import annotations

import hashlib
import weakref
from functools import cached_property
from typing import Iterable

import onnx
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from provmap.provenance.util.dtypes import onnx_elem
from provmap.provenance.util.errors import ProvmapError

from .graph_view import GraphView, TensorSpec


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
        m = onnx.ModelProto()
        g = m.graph  # filled in place: a CopyFrom of a finished graph copies every weight again
        g.name = f"{src.graph.name or 'graph'}_sub"
        g.node.extend(v.nodes[i] for i in self.closure)
        used = {x for i in self.closure for x in v.node_inputs[i] if x in v.initializers}
        g.initializer.extend(v.initializers[x] for x in sorted(used))
        for t in self.inputs:
            g.input.append(_value_info(t))
        for t in self.outputs:
            g.output.append(_value_info(t))
        # IR >= 4 lets initializers stay out of graph.input, so consumers cannot override them.
        m.ir_version = max(src.ir_version, 4)
        m.opset_import.extend(src.opset_import)
        m.producer_name = "provmap"
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
        ix = _relax_index(v)
        defining, name_of = ix.defining, ix.name_of
        input_names = {t.name for t in self.inputs}
        # An input that is an alias (an Identity's output, elided at import) is the Relax var of
        # the tensor it renames, whose own name is not an input: without this, the walk below
        # went on through it and recomputed the model up to the graph inputs inside the region
        # (issue 36: a TVM partition after an Identity rebuilt its predecessor's work).
        alias_input = {}
        for n in sorted(input_names):
            val = imp.tensor_values.get(n)
            if isinstance(val, relax.Var) and name_of.get(val) not in input_names:
                alias_input.setdefault(val, n)
        chosen = {x for e in self.exprs for x in ix.var_of.get(e, ())}
        # A converter may read another node's intermediate Relax value (not an ONNX tensor at
        # all); recompute such values inside the region instead of refusing it.
        stack = list(chosen)
        while stack:
            b = defining[stack.pop()]
            for x in _value_vars(b.value):
                if x in chosen or x not in defining:
                    continue
                if name_of.get(x) in input_names or x in alias_input:
                    continue
                chosen.add(x)
                stack.append(x)
        bindings = [ix.bindings[j] for j in sorted(ix.position[x] for x in chosen)]
        defined = {b.var for b in bindings}
        free: dict = {}  # ordered set
        for b in bindings:
            for x in _value_vars(b.value):
                if x not in defined:
                    free.setdefault(x)
        outputs = [(t.name, imp.tensor_values.get(t.name)) for t in self.outputs]
        for _, val in outputs:  # a region that only renames (Identity) returns its input
            if isinstance(val, relax.Var) and val not in defined:
                free.setdefault(val)
        params, param_names, mapping = [], [], {}
        for x in free:
            name = alias_input.get(x, name_of.get(x))
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


class _RelaxIndex:
    """The imported "main" indexed once per view: every region's outline looks its bindings up
    here (rebuilt per region, this made a build quadratic in the number of partitions)."""

    def __init__(self, imp):
        self.bindings = [b for blk in imp.mod["main"].body.blocks for b in blk.bindings]
        self.position = {b.var: j for j, b in enumerate(self.bindings)}
        self.defining = {b.var: b for b in self.bindings}
        self.var_of = {}
        for b in self.bindings:
            e = imp.var_expr.get(b.var)
            if e is not None:
                self.var_of.setdefault(e, []).append(b.var)
        self.name_of = {}
        for name, val in imp.tensor_values.items():
            if isinstance(val, relax.Var):
                self.name_of.setdefault(val, name)


_INDEXES: "weakref.WeakKeyDictionary[GraphView, _RelaxIndex]" = weakref.WeakKeyDictionary()


def _relax_index(view: GraphView) -> _RelaxIndex:
    ix = _INDEXES.get(view)
    if ix is None:
        ix = _INDEXES[view] = _RelaxIndex(view.imported)
    return ix


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
    return onnx.helper.make_tensor_value_info(t.name, onnx_elem(t.dtype), list(t.shape))
