"""The whole model as partitioning sees it: op nodes and helper nodes, producers, consumers and
boundary tensor types, over the imported ONNX graph and its Relax module.

Partitioning happens on ONNX nodes that compute something at run time ("op nodes").  Nodes that
only make constants or shapes (Constant, ConstantOfShape weights, a Shape of a static tensor:
"helper nodes") are not partitioned on their own; each subgraph carries a private copy of the
helpers its op nodes need (see `subgraph`).  A `GraphView` is computed once per model and shared
by every strategy, rule and candidate; `Subgraph(view, ops)` (in `subgraph`) cuts one region.
A region depends on its view, never the other way round."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Iterable

import numpy as np
import onnx

from provmap.provenance.util.dtypes import itemsize, onnx_dtype
from provmap.provenance.util.errors import ProvmapError, describe_node
from provmap.provenance.ids import model_sha256, node_inputs
from provmap.provenance.weights import to_array
from provmap.provenance.importer import Imported
from provmap.provenance.model import ROLE_PRODUCED


@dataclass(frozen=True)
class TensorSpec:
    """A boundary tensor.  A dimension is None where it depends on data (NonZero, Unique...):
    the backends that produce such a tensor allocate it per run; pricing counts it as 1."""

    name: str
    shape: tuple[int | None, ...]
    dtype: str
    #: per dimension, what a None one is in the profile's symbols (`seq`, `past + 1`) where the
    #: import related it to them; None elsewhere, or no tuple at all for a static tensor
    symbols: tuple[str | None, ...] | None = None

    @property
    def static(self) -> bool:
        return all(d is not None for d in self.shape)

    @property
    def nbytes(self) -> int:
        return int(np.prod([d or 1 for d in self.shape], dtype=np.int64)) * itemsize(self.dtype)

    def to_dict(self) -> dict:
        d = {"name": self.name, "shape": list(self.shape), "dtype": self.dtype,
             "bytes": self.nbytes}
        if self.symbols and any(self.symbols):
            d["symbols"] = list(self.symbols)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "TensorSpec":
        sym = d.get("symbols")
        return cls(d["name"], tuple(d["shape"]), d["dtype"], tuple(sym) if sym else None)


def _relax_dim(d, symbols: set) -> int | str | None:
    """A Relax dimension as a size, an expression in the profile's `symbols` (`past + 1`), or
    None (a variable the import minted: data decides it)."""
    from provmap.provenance.symbolic import dim_text

    try:
        return int(d)
    except (TypeError, ValueError):
        pass
    try:
        text = dim_text(d, symbols)
    except AttributeError:  # not a TIR expression
        return None
    return text if text is not None and len(text) <= 64 else None


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

    @cached_property
    def model_sha256(self) -> str:
        """The manifest's model hash, once per view: the second level builds an artifact per
        proposal, and hashing VGG-19's 548 MB of weights took 1.1 s each time."""
        return model_sha256(self.model)

    @property
    def source_sha256(self) -> str:
        """The SHA-256 of the model as the user gave it, before input shapes, sorting and
        folding: the file compare and annotate accept as the user's."""
        return self.imported.source_sha256 or self.model_sha256

    def describe(self, i: int) -> str:
        # The node as the user wrote it (provmap.provenance.fold may have replaced it by a Constant).
        pmap = self.imported.pmap
        return describe_node(pmap.file_index(i), pmap.nodes[i])

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

        from .backends.ort_types import ORT_TYPES

        types: dict[str, TensorSpec] = {}
        onnx_types = self.imported.onnx_types or infer_types(self.model, type_oracle=ORT_TYPES)
        for name, tp in onnx_types.items():
            if not tp.HasField("tensor_type") or not tp.tensor_type.elem_type \
                    or not tp.tensor_type.HasField("shape"):
                continue
            tt = tp.tensor_type
            try:
                dtype = onnx_dtype(tt.elem_type)
            except Exception:
                continue
            dims = tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)
            types[name] = TensorSpec(name, dims, dtype)
        prof = self.imported.profile
        symbols = set(prof.symbols) if prof is not None else set()
        # Relax knows every size it computed and, in a profile, what the others are in the
        # inputs' symbols: each dimension ONNX's inference left open takes what Relax says.
        for name, val in self.imported.tensor_values.items():
            if (name in types and types[name].static) or name in self.initializers:
                continue
            ty = getattr(val, "ty", None)
            shape = getattr(ty, "shape", None)
            dtype = getattr(ty, "dtype", None)
            if shape is None or dtype is None or not hasattr(shape, "values"):
                continue
            relax_dims = [_relax_dim(d, symbols) for d in shape.values]
            old = types.get(name)
            if old is not None and (len(old.shape) != len(relax_dims) or old.dtype != str(dtype)):
                continue
            dims = tuple(o if o is not None else (r if isinstance(r, int) else None)
                         for o, r in zip(old.shape if old else [None] * len(relax_dims), relax_dims))
            sym = tuple(r if isinstance(r, str) and d is None else None
                        for d, r in zip(dims, relax_dims))
            types[name] = TensorSpec(name, dims, str(dtype), sym if any(sym) else None)
        return types

    def spec(self, tensor: str) -> TensorSpec:
        t = self._types.get(tensor)
        if t is None:
            p = self.producer.get(tensor)
            where = self.describe(p) if p is not None else "a graph input"
            raise ProvmapError(f"{self.imported.label}: tensor '{tensor}' (from {where}) has no "
                               "known tensor type or rank; provmap partitions tensors only")
        return t

    def known(self, tensor: str) -> TensorSpec | None:
        """The tensor's type, or None where nothing computed it (after an op neither ONNX's
        nor ONNX Runtime's inference sees through, such as com.microsoft DynamicQuantizeLSTM)."""
        return self._types.get(tensor)

    def dtype(self, tensor: str) -> str | None:
        """Element type of any tensor, initializers included; None where it is not known."""
        init = self.initializers.get(tensor)
        if init is not None:
            try:
                return onnx_dtype(init.data_type)
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
                values[o] = to_array(self.initializers[o])
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
