"""TVM's Relax ONNX importer, subclassed to convert one node at a time and never stop.

Attribution needs each node's outputs emitted right after its converter returns (TVM's
converters return unbound expressions that a later normalisation would emit, crediting them to
the wrong node); robustness needs a node the frontend cannot take to become an *opaque
binding* rather than the end of the import.  Both live in `TrackingImporter`; `importer` turns
its record into the provenance map."""

from __future__ import annotations

import onnx
import tvm
from tvm import relax, tirx
from tvm.relax.frontend.onnx import onnx_frontend as _fe

from . import converters, half, symbolic, symbolic_ops, weights
from .util.dtypes import onnx_dtype

def _is_leaf(e) -> bool:
    """Vars, constants, shapes and immediates: nothing a binding would compute."""
    return not isinstance(e, (relax.Call, relax.TupleGetItem, relax.Tuple, relax.If, relax.SeqExpr))



ONNX_DOMAINS = ("", "ai.onnx")


#: Handled by TVM's importer only through its own If path (no dataflow block) or not at all; as
#: opaque bindings they never stop the model, and the backends that run them keep them.
_CONTROL_FLOW = {"If", "Loop", "Scan"}


OPAQUE_PREFIX = "provmap.opaque."


def _relax_type(tp) -> object:
    """Relax type of an ONNX value for an opaque binding: static where ONNX inference knows."""
    if tp is None or not tp.HasField("tensor_type") or not tp.tensor_type.elem_type:
        return relax.ObjectType()
    tt = tp.tensor_type
    try:
        dtype = onnx_dtype(tt.elem_type)
    except Exception:
        return relax.ObjectType()
    if dtype == "object":  # strings
        return relax.ObjectType()
    if not tt.HasField("shape"):
        return relax.TensorType(None, dtype, ndim=-1)
    dims = tt.shape.dim
    if all(d.HasField("dim_value") for d in dims):
        return relax.TensorType([int(d.dim_value) for d in dims], dtype)
    return relax.TensorType(None, dtype, ndim=len(dims))


def const_nbytes(c) -> int:
    """A Relax constant's bytes, from its shape (reading the data would copy it); 0 for the
    constants that hold no tensor (a dtype, a string)."""
    if not hasattr(c.value, "shape") or not hasattr(c.value, "dtype"):
        return 0
    n = max(tvm.runtime.DataType(str(c.value.dtype)).bits // 8, 1)
    for d in c.value.shape:
        n *= int(d)
    return n


class _NotComputed(Exception):
    """A converter that succeeds but does not compute every output the model reads."""


class TrackingImporter(_fe.ONNXGraphImporter):
    """TVM's importer, one node at a time, never stopped by a node it cannot convert.

    A node the Relax frontend cannot take (an op it lacks, a domain it ignores, control flow, a
    converter that raises) becomes an *opaque binding*: a pure packed call to
    "provmap.opaque.<op>" reading the node's inputs and typed from ONNX shape inference.  It
    carries the node's IDs like any other binding; the TVM backend declines it with the reason
    recorded here, and the backends that consume ONNX run the node as written.
    """

    def __init__(self, graph, label, shape_dict, onnx_types, not_compilable=None,
                 symbolic_types=None):
        super().__init__(shape_dict, "float32", keep_params_in_input=False, sanitize=True)
        #: node index -> reason: nodes TVM failed to build after a whole import (provmap.
        #: provenance.salvage), made opaque on the next import like nodes it cannot convert.
        self._not_compilable = dict(not_compilable or {})
        self._graph_nodes = list(graph.node)
        self._graph_inputs = list(graph.input)
        self._label = label
        self._onnx_types = onnx_types
        self.node_markers: list[list] = [[] for _ in self._graph_nodes]
        self.node_values: list = [None] * len(self._graph_nodes)
        self.opaque: dict[int, str] = {}
        self.opaque_vars: set = set()
        #: node index -> why TVM computes it in float32 between Casts (provmap.provenance.half).
        self.widened: dict[int, str] = {}
        self._half_verdicts: dict = {}
        self._known: set = set()
        #: ONNX Runtime's symbolic types (provmap.provenance.symbolic), for a model whose input
        #: dimensions stay open; the inputs' TIR variables once the graph inputs are parsed.
        self._symbolic = dict(symbolic_types or {})
        self._symbols: dict | None = None
        self._casts: dict = {}  # symbolic_ops.unify_dims' casts, shared by a value's readers

    def _parse_array(self, tensor_proto):
        """A weight left in its file (provenance.weights) becomes a Relax constant over the
        file's map, taken by DLPack without a copy; the frontend's own way copies it twice."""
        if not weights.is_lazy(tensor_proto):
            return super()._parse_array(tensor_proto)
        array = weights.to_array(tensor_proto)
        if array.ctypes.data % 64 == 0:  # TVM's alignment for a tensor it does not own
            try:
                return tvm.runtime.from_dlpack(array)
            except Exception:  # noqa: BLE001 - a copy below is always right
                pass
        return tvm.runtime.tensor(array)

    def _parse_graph_input(self, graph):
        # Inputs Relax cannot type as a numeric tensor (strings, sequences, optionals) become
        # opaque object parameters; only opaque nodes read them.
        for vi in graph.input:
            if vi.name in self._nodes:
                continue
            tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
            if tt is None or not tt.elem_type or tt.elem_type == onnx.TensorProto.STRING:
                name = self._sanitize_name(vi.name) if self._sanitize else vi.name
                self._nodes[vi.name] = relax.Var(name, relax.ObjectType())
                self._num_input += 1
                self._input_names.append(vi.name)
        super()._parse_graph_input(graph)
        self._zero_dims_kept(graph)

    def _zero_dims_kept(self, graph):
        # The frontend reads a dim_value of 0 as "unset" and mints a fresh variable for it, so a
        # KV cache fixed empty at prefill ([1, 4, 0, 8]) became [1, 4, v, 8], and the attention
        # scores' broadcast against the mask ([.., seq, v + seq] + [.., seq, seq]) could not be
        # legalized.  The declared 0 is restored; the other dimensions keep their variables.
        for vi in graph.input:
            tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
            if tt is None or not tt.HasField("shape"):
                continue
            zeros = [k for k, d in enumerate(tt.shape.dim) if d.HasField("dim_value") and d.dim_value == 0]
            var = self._nodes.get(vi.name)
            shape = getattr(getattr(var, "ty", None), "shape", None)
            if not zeros or not isinstance(shape, relax.ShapeExpr) or len(shape.values) != len(tt.shape.dim):
                continue
            dims = [tirx.IntImm("int64", 0) if k in zeros else v for k, v in enumerate(shape.values)]
            new = relax.Var(var.name, relax.TensorType(dims, var.ty.dtype))
            self._nodes[vi.name] = new
            if self._inputs.get(vi.name) is var:
                self._inputs[vi.name] = new

    def _check_for_unsupported_ops(self, graph):
        pass  # decided per node in _construct_nodes: an unsupported node becomes opaque

    def _emit(self, e):
        if isinstance(e, relax.Tuple):
            return relax.Tuple([self._emit(f) for f in e.fields])
        if _is_leaf(e):
            return e
        v = self.bb.emit(e)
        if isinstance(v.ty, relax.TupleType):
            # Unpack here, not after, so the TupleGetItems land inside this node.
            return relax.Tuple([self.bb.emit(relax.TupleGetItem(v, i))
                                for i in range(len(v.ty.fields))])
        return v

    def _precheck(self, node, inputs) -> str | None:
        if node.domain not in ONNX_DOMAINS:
            return f"operator in domain '{node.domain}' is not supported by the Relax ONNX importer"
        if node.op_type in _CONTROL_FLOW:
            return "control flow is not supported by provmap's Relax import"
        if node.op_type not in _supported_ops():
            return "operator not supported by the Relax ONNX importer"
        wrong = converters.wrong_lowering(node) or \
            converters.wrong_dtype(node, self._onnx_types) or \
            converters.wrong_shift(node, inputs) or \
            converters.converters_numeric.wrong_run_time_inputs(node, inputs)
        if wrong:
            return wrong
        for x in inputs:
            if x is not None and isinstance(getattr(x, "ty", None), relax.ObjectType):
                return "reads a value the Relax import could not type (from an opaque node)"
            # A tensor of unknown rank out of an opaque node (after com.microsoft
            # DynamicQuantizeLSTM nothing infers one): TVM's legalization refuses every op on
            # it ("emit_te now only supports Tensor that has ShapeExpr shape"), so say so now
            # rather than bisect a build for it.
            if x is not None and x in self.opaque_vars and \
                    getattr(getattr(x, "ty", None), "ndim", 0) == -1:
                return "reads a tensor of unknown rank from an opaque node"
        return None

    def _convert(self, idx, node, inputs):
        attr = self._parse_attr(node.attribute)
        attr["tvm_custom"] = {"name": node.name, "num_outputs": len(node.output)}
        if node.op_type not in _SHAPE_OK_OPS:
            # An ONNX tensor that Relax holds as a shape: give the converter a tensor.
            inputs = _fe.onnx_input(
                self._emit(relax.op.shape_to_tensor(x))
                if x is not None and isinstance(getattr(x, "ty", None), relax.ShapeType) else x
                for x in inputs)
        inputs = self._weights_bound(inputs)
        sym = self._convert_half_safe(idx, node, inputs, attr)
        outs = list(sym.fields) if isinstance(sym, relax.Tuple) else [sym]
        if node.op_type in _TUPLE_OPS:
            return sym
        wanted = [k for k, o in enumerate(node.output) if o]
        if wanted and wanted[-1] >= len(outs):
            raise _NotComputed(f"the Relax converter returns {len(outs)} of the node's "
                               f"{len(node.output)} outputs")
        # Some converters stand in a constant for an optional output they do not compute
        # (LayerNormalization's Mean/InvStdDev): a silent wrong value, unless refused here.
        runtime = any(isinstance(x, relax.Var) for x in inputs if x is not None)
        for k in wanted[1:]:
            if runtime and isinstance(outs[k], tvm.ir.Constant):
                raise _NotComputed(f"the Relax converter does not compute output {k} "
                                   f"('{node.output[k]}'): it returns a placeholder constant")
        return sym

    def _weights_bound(self, inputs):
        """A node reading only constants, one of them a weight, gets its weights as bindings.

        Why: TVM's converters fold a node whose inputs are all constants (Transpose,
        DequantizeLinear, Cast, Reshape of a weight) into a new constant that the module holds
        for its whole life: a decoder's tied `lm_head = Transpose(wte)` kept 154 MB (at 124M
        parameters) beside the file's map through every build.  Bound, the weight stays a view
        of the file and the node a binding of its own, which the TVM build folds when it runs
        (FoldConstant) and which every other backend reads from ONNX.  Small constants (shapes,
        axes, scales) stay as they are: converters need them constant."""
        present = [x for x in inputs if x is not None]
        if not present or not all(isinstance(x, tvm.ir.GenericConst) for x in present):
            return inputs
        big = {k for k, x in enumerate(inputs)
               if x is not None and const_nbytes(x) >= weights.LAZY_MIN_BYTES}
        if not big:
            return inputs
        return _fe.onnx_input(self.bb.emit(x) if k in big else x for k, x in enumerate(inputs))

    def _convert_into(self, bb, node, inputs, attr):
        """TVM's converter for `node` run into `bb` (the import's own, or a scratch one)."""
        saved, self.bb = self.bb, bb
        try:
            def convert():
                return super(TrackingImporter, self)._convert_operator(
                    node.op_type, inputs, dict(attr), self.opset)

            fixed = converters.FIXED.get(node.op_type)
            sym = fixed(bb, inputs, dict(attr), convert) if fixed else None
            if sym is None:
                sym = convert()
            return self._emit(sym)
        finally:
            self.bb = saved

    def _convert_half_safe(self, idx, node, inputs, attr):
        dtype = half.reads_half(inputs) if node.op_type not in _TUPLE_OPS else None
        if dtype is None:
            return self._convert_into(self.bb, node, inputs, attr)
        key = half.cache_key(node.op_type, inputs, attr)
        if node.op_type in half.ACCUMULATING:
            self._half_verdicts[key] = half.ACCUMULATES
        if key not in self._half_verdicts:
            self._half_verdicts[key] = half.verdict(
                lambda bb, xs: self._convert_into(bb, node, xs, attr), inputs)
        why = self._half_verdicts[key]
        if why is None:
            return self._convert_into(self.bb, node, inputs, attr)
        self.widened[idx] = why
        sym = self._convert_into(self.bb, node, _fe.onnx_input(half.widen(inputs, self._emit)),
                                 attr)
        wanted = []
        for o in node.output:
            ty = _relax_type(self._onnx_types.get(o)) if o else None
            wanted.append(str(ty.dtype) if isinstance(ty, relax.TensorType) else dtype)
        return half.narrow(sym, wanted, self._emit)

    def _make_opaque(self, idx, node, inputs, reason):
        self.opaque[idx] = reason
        args = [x for x in inputs if isinstance(x, relax.Expr)]
        outs = [o for o in node.output]
        types = [_relax_type(self._onnx_types.get(o)) if o else relax.ObjectType() for o in outs]
        ty = types[0] if len(types) == 1 else relax.TupleType(types)
        v = self.bb.emit(relax.call_pure_packed(OPAQUE_PREFIX + node.op_type, *args, ty_args=ty))
        self.opaque_vars.add(v)
        if len(types) == 1:
            return v
        items = []
        for i in range(len(types)):
            item = self.bb.emit(relax.TupleGetItem(v, i))
            self.opaque_vars.add(item)
            items.append(item)
        return relax.Tuple(items)

    def _construct_nodes(self, graph):
        for idx, node in enumerate(graph.node):
            inputs = _fe.onnx_input(self._nodes[x] if x else None for x in node.input)
            for x in inputs:
                if isinstance(x, relax.Var):
                    self._known.add(x)
            reason = self._not_compilable.get(idx) or self._precheck(node, inputs)
            sym = None
            if reason is None and self._symbolic and node.op_type == "Range":
                try:
                    sym = self._emit_or_none(symbolic_ops.arange(
                        node, inputs, self._symbolic.get(node.output[0]), self._input_symbols()))
                except Exception:  # an input it cannot read: the frontend's conversion
                    sym = None
            if reason is None and node.op_type in symbolic_ops.ELEMENTWISE:
                sym = self._emit_or_none(symbolic_ops.prim_with_tensor(node, inputs))
            if reason is None and self._symbolic and (node.op_type == "Concat"
                                                      or node.op_type in symbolic_ops.BROADCAST):
                try:
                    unified = symbolic_ops.unify_dims(self.bb, node, list(inputs),
                                                        self._symbolic.get(node.output[0]),
                                                        self._input_symbols(), self._casts)
                except Exception:  # shapes it cannot read: the frontend's conversion as is
                    unified = None
                if unified is not None:
                    inputs = _fe.onnx_input(unified)
            if reason is None and sym is None:
                try:
                    sym = self._convert(idx, node, inputs)
                except _NotComputed as e:
                    reason = f"Relax import incomplete: {e}"
                except Exception as e:  # TVM raises many types; the message is the reason
                    msg = [ln for ln in str(e).strip().splitlines() if ln.strip()]
                    reason = f"Relax import failed: {type(e).__name__}: {msg[-1] if msg else ''}"
            if reason is not None:
                sym = self._make_opaque(idx, node, inputs, reason)
            elif self._symbolic and node.op_type not in _TUPLE_OPS:
                sym = self._related(node, sym)
            outs = list(sym.fields) if isinstance(sym, relax.Tuple) else [sym]
            self.node_values[idx] = sym
            for o in outs:
                if isinstance(o, relax.Var) and o not in self._known:
                    self.node_markers[idx].append(o)
                    self._known.add(o)
            names = list(node.output)
            if node.op_type in _TUPLE_OPS and reason is None:
                self._nodes[names[0]] = sym
            else:
                for k, name in enumerate(names):
                    if name and k < len(outs):
                        self._nodes[name] = outs[k]


    def _input_symbols(self) -> dict:
        if self._symbols is None:
            self._symbols = symbolic.input_symbols(
                self._nodes[vi.name] for vi in self._graph_inputs if vi.name in self._nodes)
        return self._symbols

    def _emit_or_none(self, e):
        """`e` emitted; None (the frontend's conversion then) when it is None or fails."""
        if e is None:
            return None
        try:
            return self._emit(e)
        except Exception:  # TVM's normalization refused it: the frontend's way is kept
            return None

    def _related(self, node, sym):
        """`sym` with each output's shape stated in the inputs' symbols where Relax lost them."""
        if not self._input_symbols():
            return sym
        outs = list(sym.fields) if isinstance(sym, relax.Tuple) else [sym]
        new = [symbolic.refine(self.bb, o, self._symbolic.get(name), self._symbols)
               if name and k < len(outs) else o
               for k, (o, name) in enumerate(zip(outs, node.output))] + outs[len(node.output):]
        if all(a is b for a, b in zip(new, outs)):
            return sym
        return relax.Tuple(new) if isinstance(sym, relax.Tuple) else new[0]


# Ops TVM's importer lets read a Relax shape directly (its own list, in _construct_nodes).
_SHAPE_OK_OPS = {"Reshape", "Resize", "ConstantOfShape", "Gather", "Slice", "Shape", "Expand",
                 "Concat", "Equal", "Where", "Cast", "CastLike", "Squeeze"}


# Ops whose converter returns a Relax tuple standing for one ONNX value (a sequence/optional).
_TUPLE_OPS = {"Optional", "OptionalGetElement", "SequenceConstruct", "SequenceEmpty",
              "SequenceErase", "SequenceInsert", "ConcatFromSequence", "SplitToSequence"}


def _supported_ops() -> set[str]:
    global _SUPPORTED
    if _SUPPORTED is None:
        _SUPPORTED = set(_fe._get_convert_map().keys())
    return _SUPPORTED


_SUPPORTED = None
