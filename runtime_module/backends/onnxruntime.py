"""ONNX Runtime backend: the cut ONNX model on ORT's CPU execution provider.

What runs is ORT's own view of the subgraph: one `InferenceSession` on the exact original nodes
(`Subgraph.onnx_model()`), CPU execution provider, the default optimization level
(ORT_ENABLE_ALL, which includes fusions and the NCHWc layout transformer; the ``optimization``
option picks ``extended``, ``basic`` or ``disable`` instead) and default intra-op threads unless
the ``threads`` option says otherwise.  ``allow_spinning`` (default: ORT's, on)
sets ``session.intra_op.allow_spinning``: ORT's pool threads keep spinning for a while after a
run, which on a small machine slows whatever runs next in the process (measured on 2 cores:
OpenVINO squeezenet right after an ORT call 7.3 ms median instead of 4.7 ms), while turning it
off costs ORT itself ~0.5-3 ms on squeezenet/resnet50.  Mixed-backend plans may want it off.

Kernels: at build time ORT writes the graph it actually executes, and every node of it is one
`KernelInfo`; `ort_kernels` derives which original nodes each one implements.

Runner.  `OrtRunner` calls the session with a prebuilt output-name list; ORT allocates fresh
output arrays on every call, so results are safe to keep.  Measured on a 1-op model: about
4 us per call, at or below ``sess.run`` (io binding and ``run_with_ort_values`` were slower).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from typing import TYPE_CHECKING, Sequence

import numpy as np
import onnx

from provmap.provenance.util.dtypes import onnx_elem
from provmap.provenance.util.errors import first_line
from provmap.provenance.weights import has_lazy, serialize

from ..onnx_external import external_data_file, weight_bytes
from ..options import Option, as_bool, threads_option
from ..backend import (PROFILED_UNMATCHED, PROFILED_WALL, Backend, BackendError, Blob, Runner,
                       Support, own_time)
from .ort_blob import SPLIT_MIN_BYTES, live_while, read_split, session_source
from .ort_kernels import map_kernels
from .ort_refusals import refuse_ort
from .ort_runner import OrtRunner, _ort

if TYPE_CHECKING:  # pragma: no cover
    from ..graph_view import GraphView
    from ..subgraph import Subgraph

_CPU = "CPUExecutionProvider"
_DEFAULT_DOMAINS = ("", "ai.onnx")
_INF = 2**31 - 1


def _norm_domain(d: str) -> str:
    return "" if d in _DEFAULT_DOMAINS else d


def _type_str(dtype: str) -> str | None:
    """numpy dtype name -> ONNX type string as ORT's kernel defs spell it ('tensor(float)')."""
    try:
        elem = onnx_elem(dtype)
    except Exception:
        return None
    return f"tensor({onnx.TensorProto.DataType.Name(elem).lower()})"


class _KernelRegistry:
    """ORT's CPU kernel definitions, indexed by (domain, op_type)."""

    _cache: dict | None = None

    @classmethod
    def get(cls) -> dict[tuple[str, str], list[tuple[int, int, dict]]]:
        if cls._cache is None:
            from onnxruntime.capi import _pybind_state as C

            table: dict[tuple[str, str], list[tuple[int, int, dict]]] = {}
            for k in C.get_all_opkernel_def():
                if k.provider != _CPU:
                    continue
                lo, hi = k.version_range
                table.setdefault((_norm_domain(k.domain), k.op_name), []).append(
                    (int(lo), int(hi), dict(k.type_constraints)))
            cls._cache = table
        return cls._cache


class OnnxRuntimeBackend(Backend):
    loads_native_code = False  # its blobs are model files the library parses
    needs_relax = False  # builds from the cut ONNX model alone
    computes_shapes_at_run = True
    name = "onnxruntime"

    OPTIONS = (
        threads_option("ONNX Runtime's default, one per core"),
        Option("allow_spinning", "bool", "whether pool threads spin after a run "
               "(session.intra_op.allow_spinning)"),
        Option("optimization", "choice", "graph optimization level",
               choices=("all", "extended", "basic", "disable")),
        Option("disable_quant_qdq", "bool", "QDQ fusions off, so a DequantizeLinear of a "
               "constant is folded at load (session.disable_quant_qdq)"),
    )

    @classmethod
    def model_variants(cls, view: "GraphView") -> list[str]:
        """`disable_quant_qdq=1` for a model that dequantizes a constant: a DequantizeLinear
        the view counts as a helper node, one that reads no run-time tensor (provenance/fold
        never folds it).  Why: ORT keeps such a DequantizeLinear for its QDQ fusions and runs
        it on every call when none takes it.  quantize_dynamic on GPT-2 small quantizes the
        embedding shared with the LM head, which then dequantized 50257x768 weights per call
        into an unpacked MatMul: 39 + 108 ms of 295 (2026-11-29, AVX2 EPYC); with the option
        the Dequantize is folded and the model runs 20-25% faster, by the one session option a
        user of ORT would set."""
        if any(n.op_type == "DequantizeLinear" and not view.is_op(i)
               for i, n in enumerate(view.nodes)):
            return ["disable_quant_qdq=1"]
        return []

    def version(self) -> str:
        return _ort().__version__

    # -- sessions --------------------------------------------------------------------------
    #: the ``optimization`` option's values -> ORT's graph optimization levels
    LEVELS = {"all": "ORT_ENABLE_ALL", "extended": "ORT_ENABLE_EXTENDED",
              "basic": "ORT_ENABLE_BASIC", "disable": "ORT_DISABLE_ALL"}

    def _level(self) -> str:
        value = str(self._options.get("optimization") or "all").lower()
        if value not in self.LEVELS:
            raise BackendError(f"onnxruntime: optimization={value!r}; expected one of "
                               f"{', '.join(self.LEVELS)}")
        return self.LEVELS[value]

    def _session_options(self):
        ort = _ort()
        so = ort.SessionOptions()
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, self._level())
        threads = self._options.get("threads")
        if threads:
            so.intra_op_num_threads = int(threads)
        spin = self._options.get("allow_spinning")
        if spin is not None:
            on = as_bool(spin)
            so.add_session_config_entry("session.intra_op.allow_spinning", "1" if on else "0")
        if as_bool(self._options.get("disable_quant_qdq") or False):
            so.add_session_config_entry("session.disable_quant_qdq", "1")
        so.log_severity_level = 4  # errors come back raised; its log prints node names raw
        return so

    def _session(self, model_bytes: bytes, so, what: str):
        ort = _ort()
        try:
            return ort.InferenceSession(model_bytes, so, providers=[_CPU])
        except Exception as e:
            raise BackendError(f"onnxruntime {ort.__version__}: cannot {what}: "
                               f"{first_line(e)}") from None

    # -- support ---------------------------------------------------------------------------
    def supports(self, view: "GraphView") -> dict[int, Support]:
        opsets = {_norm_domain(o.domain): o.version for o in view.model.opset_import}
        ir_version = view.model.ir_version
        cache: dict[tuple, Support] = {}
        out: dict[int, Support] = {}
        for i in view.op_nodes:
            node = view.nodes[i]
            types = self._node_types(view, node)
            shapes = self._node_shapes(view, node)
            key = (_norm_domain(node.domain), node.op_type, tuple(types[0]), tuple(types[1]),
                   tuple(shapes.items()), tuple(a.SerializeToString() for a in node.attribute))
            if key not in cache:
                cache[key] = self._support_node(node, opsets, types, ir_version, shapes)
            out[i] = cache[key]
        refuse_ort(view, out)  # settings it computes otherwise than ONNX
        return out

    @staticmethod
    def _node_types(view: "GraphView", node) -> tuple[list, list]:
        return ([view.dtype(x) if x else None for x in node.input],
                [view.dtype(x) if x else None for x in node.output])

    @staticmethod
    def _node_shapes(view: "GraphView", node) -> dict[str, tuple]:
        shapes = {}
        for x in list(node.input) + list(node.output):
            if not x:
                continue
            if x in view.initializers:
                shapes[x] = tuple(view.initializers[x].dims)
                continue
            try:
                shapes[x] = tuple(view.spec(x).shape)
            except Exception:
                pass
        return shapes

    def _support_node(self, node, opsets: dict, types, ir_version: int = 8,
                      shapes: dict | None = None) -> Support:
        """ORT's own rules (onnxruntime/core/framework/kernel_registry.cc): a kernel registered
        for versions [start, end] takes a node whose schema since-version is in that range, but
        an open-ended one ([start, INT_MAX]) only takes since-version == start, since a newer
        version of the op may postdate the kernel; type constraints must admit the node's
        types.  Without a kernel, float16 nodes run in float (InsertCastTransformer) and ops
        with an ONNX function body are inlined; whether the body's ops have kernels is settled
        by creating a one-node session (only for such ops)."""
        domain = _norm_domain(node.domain)
        op = node.op_type
        opset = opsets.get(domain, 1)
        try:
            schema = onnx.defs.get_schema(op, opset, domain)
        except Exception:
            schema = None
        if schema is None and domain == "":
            return Support(False, f"unknown ONNX op {op} at opset {opset}")
        if op == "Constant" and domain == "":
            return Support(True, "Constant becomes an initializer")
        since = schema.since_version if schema is not None else opset
        where = f"{op}{'(' + domain + ')' if domain else ''} at opset {opset}" + (
            f" (since-version {since})" if since != opset else "")
        defs = [d for d in _KernelRegistry.get().get((domain, op), [])
                if d[0] == since or (d[1] != _INF and d[0] <= since <= d[1])]
        bound = self._bind_types(schema, types)
        if defs:
            if not bound or any(self._types_ok(d[2], bound) for d in defs):
                return Support(True)
            # ORT's InsertCastTransformer runs float16 nodes without a float16 kernel in float.
            as_f32 = {k: ("tensor(float)" if v == "tensor(float16)" else v)
                      for k, v in bound.items()}
            if as_f32 != bound and any(self._types_ok(d[2], as_f32) for d in defs):
                return Support(True, "float16 computed in float32 (ORT inserts casts)")
        if schema is not None and (schema.has_function or schema.has_context_dependent_function):
            return self._trial(node, opsets, types, ir_version, where, shapes or {})
        if defs:
            got = ", ".join(f"{k}={v}" for k, v in sorted(bound.items()))
            return Support(False, f"no CPU kernel for {where} with types {got}")
        if schema is not None and schema.deprecated:
            return Support(False, f"no CPU kernel for {where}: the op is deprecated")
        return Support(False, f"no CPU kernel for {where}")

    def _trial(self, node, opsets: dict, types, ir_version: int, where: str,
               shapes: dict) -> Support:
        """Create a session for `node` alone: ORT inlines its function body, or says which op
        of the body has no kernel."""
        ok = Support(True, "expanded as its ONNX function body")
        if any(x and t is None for x, t in zip(node.input, types[0])) or \
                any(o and t is None for o, t in zip(node.output, types[1])):
            return ok  # types unknown: cannot build the probe, trust the function body
        h = onnx.helper
        inputs, seen = [], set()
        for x, t in zip(node.input, types[0]):
            if x and x not in seen:
                seen.add(x)
                inputs.append(h.make_tensor_value_info(
                    x, onnx_elem(t), shapes.get(x)))
        outputs = [h.make_tensor_value_info(o, onnx_elem(t),
                                            shapes.get(o))
                   for o, t in zip(node.output, types[1]) if o]
        graph = h.make_graph([node], "probe", inputs, outputs)
        model = h.make_model(graph, ir_version=max(7, min(ir_version, 10)),
                             opset_imports=[h.make_opsetid(d, v) for d, v in opsets.items()])
        ort = _ort()
        so = ort.SessionOptions()
        so.log_severity_level = 4
        try:
            ort.InferenceSession(model.SerializeToString(), so, providers=[_CPU])
        except Exception as e:
            msg = first_line(e)
            if "NOT_IMPLEMENTED" in msg or "implementation" in msg or "kernel" in msg:
                detail = msg.split(" : ")[-1]
                return Support(False, f"no CPU kernel for {where}, nor for its ONNX function "
                                      f"body: {detail}")
        return ok

    @staticmethod
    def _bind_types(schema, types) -> dict[str, str]:
        """Type-constraint name -> ONNX type string of the node's actual tensors."""
        if schema is None:
            return {}
        bound: dict[str, str] = {}
        for formals, actual in ((schema.inputs, types[0]), (schema.outputs, types[1])):
            if not formals:
                continue
            for k, dt in enumerate(actual):
                f = formals[min(k, len(formals) - 1)]
                variadic = f.option == onnx.defs.OpSchema.FormalParameterOption.Variadic
                if k >= len(formals) and not variadic:
                    break
                ts = _type_str(dt) if dt else None
                if ts is not None and f.type_str and not f.type_str.startswith("tensor("):
                    bound.setdefault(f.type_str, ts)
        return bound

    @staticmethod
    def _types_ok(constraints: dict, bound: dict) -> bool:
        return all(bound[c] in allowed for c, allowed in constraints.items() if c in bound)

    # -- build -----------------------------------------------------------------------------
    def build(self, sub: "Subgraph") -> Blob:
        model = sub.onnx_model()
        # Weights still in the user's file (provenance.weights), or enough of them to keep on
        # disk (ort_blob): ORT reads them from a file, never from serialized bytes.
        split = weight_bytes(model) >= SPLIT_MIN_BYTES
        from_file = split or has_lazy(model)
        data = None if from_file else self._serialized(model)
        so = self._session_options()
        with tempfile.TemporaryDirectory(prefix="provmap-ort-") as tmp:
            path = os.path.join(tmp, "optimized.onnx")
            so.optimized_model_filepath = path
            # Weights go to a side file that is never read back: only the graph is needed.
            so.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                        "weights.bin")
            so.add_session_config_entry(
                "session.optimized_model_external_initializers_min_size_in_bytes", "64")
            # This session only yields the optimized graph (prepacking is per kernel, after the
            # graph is final): without it, ORT holds no packed copy of every MatMul weight (a
            # 124M decoder's build session 0.80 -> 0.48 GB above the process's own).
            so.add_session_config_entry("session.disable_prepacking", "1")
            files = None
            if from_file:  # the blob's copy is made after the session is gone
                with external_data_file(model, prefix="provmap-ort-in-") as src:
                    sess = self._session(src, so, f"build subgraph {sub.key[:12]}")
                    del sess
                    if split:
                        files = read_split(src)
            else:
                sess = self._session(data, so, f"build subgraph {sub.key[:12]}")
                del sess
            try:
                optimized = onnx.load(path, load_external_data=False)
            except Exception as e:
                raise BackendError(f"onnxruntime: cannot read back the optimized graph: "
                                   f"{first_line(e)}") from None
        kernels, source = map_kernels(model, optimized, sub)
        if files is None:
            files = {"model.onnx": data if data is not None else self._serialized(model)}
        meta = {
            "backend_version": self.version(),
            "input_names": [t.name for t in sub.inputs],
            "output_names": [t.name for t in sub.outputs],
            "options": self.options(),
            "providers": [_CPU],
            "graph_optimization_level": self._level(),
        }
        header = (f"# onnxruntime {self.version()} optimized graph (CPUExecutionProvider, "
                  f"{self._level()}), subgraph {sub.key}\n"
                  f"# {len(sub.closure)} original nodes -> {len(optimized.graph.node)} ORT nodes\n"
                  f"# inputs: {', '.join(meta['input_names'])}\n"
                  f"# outputs: {', '.join(meta['output_names'])}\n")
        return Blob(backend=self.name, files=files, meta=meta, kernels=kernels,
                    source=header + source)

    @staticmethod
    def _serialized(model) -> bytes:
        try:
            return serialize(model)
        except Exception as e:
            raise BackendError(f"onnxruntime: cannot serialize the cut model: "
                               f"{first_line(e)}") from None

    # -- load ------------------------------------------------------------------------------
    def load(self, blob: Blob) -> Runner:
        data = blob.files.get("model.onnx")
        if data is None:
            raise BackendError(f"onnxruntime: blob has no model.onnx "
                               f"(members: {sorted(blob.files)})")
        source, scratch = session_source(blob.files)
        sess = self._session(source, self._session_options(), "load model.onnx")
        in_names = list(blob.meta.get("input_names") or [i.name for i in sess.get_inputs()])
        out_names = list(blob.meta.get("output_names") or [o.name for o in sess.get_outputs()])
        have_in = {i.name for i in sess.get_inputs()}
        have_out = {o.name for o in sess.get_outputs()}
        missing = ([n for n in in_names if n not in have_in]
                   + [n for n in out_names if n not in have_out])
        if missing:
            raise BackendError(f"onnxruntime: model.onnx lacks tensors named in meta: {missing}")
        runner = OrtRunner(sess, in_names, out_names)
        live_while(runner, scratch)
        return runner


    def profile_kernels(self, blob: Blob, inputs, repeats: int = 10):
        """ORT's session profiler: `<node>_kernel_time` events of the optimized graph's nodes,
        which are exactly this backend's kernels; other timed nodes as `PROFILED_UNMATCHED`,
        and the profiled calls' wall time as `PROFILED_WALL`."""
        so = self._session_options()
        with tempfile.TemporaryDirectory(prefix="provmap-ortprof-") as d:
            so.enable_profiling = True
            so.profile_file_prefix = os.path.join(d, "ort")
            source, scratch = session_source(blob.files)
            sess = self._session(source, so, "profile model.onnx")
            names = list(blob.meta.get("input_names") or [i.name for i in sess.get_inputs()])
            runner = OrtRunner(sess, names, [o.name for o in sess.get_outputs()])
            runner(inputs)  # a warm-up, its events dropped below
            walls = []
            for _ in range(max(1, repeats)):
                t0 = time.perf_counter()
                runner(inputs)
                walls.append(time.perf_counter() - t0)
            with open(sess.end_profiling()) as f:
                events = json.load(f)
            live_while(runner, scratch)
        totals: dict[str, list[float]] = {}
        for e in events:
            if e.get("cat") == "Node" and str(e.get("name", "")).endswith("_kernel_time"):
                node = e["name"][: -len("_kernel_time")]
                totals.setdefault(node, []).append(e.get("dur", 0) * 1e-6)
        out = {}
        for k in blob.kernels:
            base = k.name.split("#")[0]
            ts = totals.get(base)
            if ts:
                runs = ts[1:] if len(ts) > 1 else ts  # drop the first (warm-up) call
                out[k.name] = sum(runs) / len(runs)
        used = {k.name.split("#")[0] for k in blob.kernels}  # others: no kernel of the blob
        other = sum(sum(t[1:] or t) / len(t[1:] or t) for n, t in totals.items() if n not in used)
        if other > 0:
            out[PROFILED_UNMATCHED] = other
        if out:  # per call, the nodes timed once a call (others only widen the gap)
            per_call = [sum(ts[c + 1] for ts in totals.values() if len(ts) == len(walls) + 1)
                        for c in range(len(walls))]
            out[PROFILED_WALL] = own_time(walls, per_call)
        return out
