"""OpenVINO backend: the cut ONNX model, converted by OpenVINO's ONNX frontend, on the CPU plugin.

Precision.  The CPU plugin defaults to bf16 on CPUs with AVX512-BF16/AMX, which would silently
change the model's numerics: ``INFERENCE_PRECISION_HINT`` is always explicit, ``"f32"`` unless
the ``precision`` option asks for ``"bf16"`` or ``"f16"``, and recorded in the blob's meta.
Other options: ``performance_hint`` (``"LATENCY"``, default, or ``"THROUGHPUT"``) and
``threads`` (``INFERENCE_NUM_THREADS``; default: the plugin's choice).  `supports` refuses
float64 nodes (no f64 kernels: they would run in float32) and the ops `ov_refusals` lists,
whose conversion computes wrong numbers; int64 is computed in 32 bits (`ov_int64`).

Support.  ``query_model`` on the converted whole model, its operations mapped back to ONNX
nodes as below; only if the whole model does not convert is each op node converted alone, and
the frontend's message ("No conversion rule found for operations: MaxUnpool-17") becomes the
reason.  Verdicts are cached per view (and per backend instance, i.e. per configuration).

Blob.  ``model.xml``/``model.bin``: the OpenVINO IR (``compress_to_fp16=False``: weights keep
their ONNX precision), read back from those bytes and compiled at build time, so the kernels
reported are those of what `load` runs.  Kernels: one `KernelInfo` per executed layer of the
compiled model, mapped back to ONNX nodes by `ov_kernels`.

Outputs.  `OpenVINORunner` has one infer request; inputs are shared with it (no copy; an input
of another dtype is converted, a read-only or non-contiguous one copied), and outputs are
copied out of the request's buffers, which the next call overwrites while callers keep
outputs across calls (the copy is small next to inference; see `OpenVINORunner`).
"""

from __future__ import annotations

import os
import re
import tempfile
import time
import weakref
from typing import TYPE_CHECKING, Sequence

import ml_dtypes
import numpy as np

from provmap.provenance.util.errors import first_line
from provmap.provenance.weights import release

from .. import compile_cache, staged
from ..options import Option, threads_option
from ..backend import (PROFILED_UNMATCHED, PROFILED_WALL, Backend, BackendError, Blob, Runner,
                       Support, own_time)
from .ov_ports import kept_inputs as _kept_inputs, port_order as _port_order
from .ov_kernels import op_owners, profiled_kernel_names, runtime_kernels
from .ov_int64 import RangeGuard, int64_notes
from .ov_refusals import refuse_wrong_numbers
from .ov_query import RegionFailed, query_in_segments
from .ov_core import (_EXTERNAL_MIN_BYTES, _ConversionFailed, _get_core, _ov,  # noqa: F401
                      _read_onnx, compiling, ov_error, read_blob_ir, read_ir,
                      shed_ir)

if TYPE_CHECKING:  # pragma: no cover
    from ..graph_view import GraphView
    from ..subgraph import Subgraph  # imports tvm: `run` of an OpenVINO artifact never needs it

_DEVICE = "CPU"
_PRECISIONS = ("f32", "bf16", "f16")
#: OPTIMIZATION_CAPABILITIES entry a precision needs on the CPU plugin.
_CAPABILITY = {"bf16": "BF16", "f16": "FP16"}
_HINTS = ("LATENCY", "THROUGHPUT")
_BF16 = np.dtype(ml_dtypes.bfloat16)
#: numpy types equal to int64/uint64 but of another C type (long long), by character code.
_LONGLONG = {c: np.dtype(t) for c, t in (("q", np.int64), ("Q", np.uint64))
             if np.dtype(c) == np.dtype(t) and np.dtype(c).char != np.dtype(t).char}


def _cut(view: "GraphView", ops: list[int]):
    """`ops` (op node indices) as a model of their own, and its ONNX tensor names -> the view's
    node indices, as `_query` takes them."""
    from ..subgraph import Subgraph

    sub = Subgraph(view, ops)
    cut = sub.onnx_model()
    return cut, {o: sub.closure[p] for p, n in enumerate(cut.graph.node) for o in n.output if o}


class OpenVINOBackend(Backend):
    loads_native_code = False  # its blobs are model files the library parses
    needs_relax = False  # builds from the cut ONNX model alone
    computes_shapes_at_run = True
    name = "openvino"

    def __init__(self, **options):
        super().__init__(**options)
        prec = self._options.get("precision", "f32")
        if prec not in _PRECISIONS:
            raise BackendError(f"backend 'openvino': precision must be one of {_PRECISIONS}, "
                               f"got {prec!r}")
        hint = self._options.get("performance_hint", "LATENCY")
        if hint not in _HINTS:
            raise BackendError(f"backend 'openvino': performance_hint must be one of {_HINTS}, "
                               f"got {hint!r}")
        why = self.host_problem(self._options)
        if why:
            raise BackendError(f"backend 'openvino': {why}")
        self._support_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

    OPTIONS = (
        Option("precision", "choice", "inference precision (INFERENCE_PRECISION_HINT); bf16 and "
               "f16 only on a CPU that has them", choices=_PRECISIONS),
        Option("performance_hint", "choice", "PERFORMANCE_HINT", choices=_HINTS),
        threads_option("OpenVINO's default, one per core"),
    )

    @classmethod
    def host_problem(cls, options: dict) -> str | None:
        # The CPU plugin takes a precision hint it cannot honour and runs f32 without a word:
        # compare and bisect would then report f32 numbers under a bf16 label (issue 36).
        prec = str(options.get("precision", "f32"))
        if prec not in _CAPABILITY:
            return None
        caps = [str(c) for c in _get_core().get_property(_DEVICE, "OPTIMIZATION_CAPABILITIES")]
        if _CAPABILITY[prec] in caps:
            return None
        return (f"option precision={prec}: this CPU cannot run {prec} (OpenVINO {_DEVICE} "
                f"capabilities: {', '.join(caps)}); OpenVINO would run f32 instead")

    def version(self) -> str:
        return _ov().get_version()

    @property
    def precision(self) -> str:
        return self._options.get("precision", "f32")

    def config(self) -> dict:
        """The compile_model configuration (precision is always explicit)."""
        cfg = {"INFERENCE_PRECISION_HINT": self.precision,
               "PERFORMANCE_HINT": self._options.get("performance_hint", "LATENCY")}
        if self._options.get("threads"):
            cfg["INFERENCE_NUM_THREADS"] = int(self._options["threads"])
        return cfg

    # -- support ---------------------------------------------------------------------------
    def supports(self, view: "GraphView") -> dict[int, Support]:
        cached = self._support_cache.get(view)
        if cached is None:
            cached = self._supports(view)
            self._support_cache[view] = cached
        return dict(cached)

    def _supports(self, view: "GraphView") -> dict[int, Support]:
        try:
            with _read_onnx(view.model) as model:
                out = self._query(view, model, list(view.op_nodes), dict(view.producer))
        except _ConversionFailed:
            out = self._supports_per_node(view)
        except RegionFailed:  # a transformation threw: find the node (ov_query.py)
            out = query_in_segments(list(view.op_nodes), lambda ops: self._query_region(
                view, ops), view.describe)
        # float64 (no f64 kernels) and ops it converts wrongly: ov_refusals says why.
        refuse_wrong_numbers(view, out, _DEVICE)
        return out

    def _query(self, view, model, nodes: list[int], producer: dict[str, int]) -> dict[int, Support]:
        """query_model's verdict for `nodes` (indices into view.nodes); `producer` maps the
        model's ONNX tensor names to those indices.  Raises RegionFailed if it throws."""
        core = _get_core()
        try:
            supported = set(core.query_model(model, _DEVICE, self.config()))
        except Exception as e:
            raise RegionFailed(f"OpenVINO {_DEVICE} query_model failed: {ov_error(e)}") from None
        owners = op_owners(model, producer)
        bad: dict[int, list[str]] = {}
        for op in model.get_ordered_ops():
            name = op.get_friendly_name()
            if name in supported or op.get_type_name() in ("Parameter", "Result", "Constant"):
                continue
            for i in owners.get(name, ()):
                bad.setdefault(i, []).append(f"{op.get_type_name()} '{name}'")
        out = {}
        for i in nodes:
            if i in bad:
                out[i] = Support(False, f"OpenVINO {_DEVICE} does not support "
                                        f"{', '.join(bad[i][:3])} (from {view.describe(i)})")
            else:
                out[i] = Support(True)
        return out

    def _supports_per_node(self, view: "GraphView") -> dict[int, Support]:
        """The whole model did not convert: convert each op node alone (with its helpers)."""
        out: dict[int, Support] = {}
        for i in view.op_nodes:
            try:
                cut, producer = _cut(view, [i])
            except Exception as e:  # no static shapes around this node, say
                out[i] = Support(False, f"cannot cut {view.describe(i)} alone to test it: "
                                        f"{first_line(e)}")
                continue
            try:
                with _read_onnx(cut) as model:
                    out[i] = self._query(view, model, [i], producer)[i]
            except _ConversionFailed as e:
                out[i] = Support(False, f"OpenVINO ONNX frontend cannot convert "
                                        f"{view.describe(i)}: {ov_error(e.__cause__)}")
            except RegionFailed as e:
                out[i] = Support(False, f"{e} (on {view.describe(i)} alone)")
        return out

    def _query_region(self, view: "GraphView", ops: list[int]) -> dict[int, Support]:
        """query_model's verdicts for the op nodes `ops` cut into a model of their own."""
        try:
            cut, producer = _cut(view, ops)
            with _read_onnx(cut) as model:
                return self._query(view, model, ops, producer)
        except RegionFailed:
            raise
        except Exception as e:  # the cut or the conversion: this region cannot be asked
            raise RegionFailed(first_line(e) if not isinstance(e, _ConversionFailed) else
                               f"OpenVINO ONNX frontend: {ov_error(e.__cause__)}") from None

    # -- build -----------------------------------------------------------------------------
    def build(self, sub: "Subgraph") -> Blob:
        ov = _ov()
        cut = sub.onnx_model()
        try:
            with tempfile.TemporaryDirectory(prefix="provmap-ov-") as tmp:
                xml_path = os.path.join(tmp, "model.xml")
                # The converted model (and the frontend's map of the ONNX weights) lives only
                # while the IR is written: held through the compile below, its pages stayed
                # resident beside the IR's and the packed copy (a 350M decoder's compile
                # peaked at 3.8x its weights, 1.0x of them this map's).
                with _read_onnx(cut) as converted:
                    try:
                        ov.save_model(converted, xml_path, compress_to_fp16=False)
                    except Exception as e:
                        raise BackendError(f"OpenVINO: cannot serialize the converted model: "
                                           f"{ov_error(e)}") from None
                    del converted
                release()  # provmap's own map of the weights, touched writing them out
                # Compile what load() will compile: the IR as written.  Read from its files,
                # OpenVINO maps the weights; the blob's copy is read after the compiled model
                # is gone (one copy of the weights at a time besides the compiled one).
                with shed_ir(xml_path) as model:
                    compiled = self._compile(model, f"subgraph {sub.key[:12]}")
                    actual = str(compiled.get_property("INFERENCE_PRECISION_HINT"))
                    producer = {o: p for p, n in enumerate(cut.graph.node) for o in n.output
                                if o}
                    kernels, source = runtime_kernels(compiled, model, producer, cut)
                    input_names = _kept_inputs(compiled.inputs, [t.name for t in sub.inputs])
                    output_names = [t.name for t in sub.outputs]
                    _port_order(compiled.outputs, output_names, "output")
                    del compiled, model
                with open(xml_path, "rb") as f:
                    xml = f.read()
                weights = staged.weight_member(os.path.join(tmp, "model.bin"), "model.bin")
        except _ConversionFailed as e:
            raise BackendError(f"OpenVINO {self.version()}: ONNX frontend cannot convert "
                               f"subgraph {sub.key[:12]}: {ov_error(e.__cause__)}") from None
        meta = {
            "backend_version": self.version(),
            "device": _DEVICE,
            "precision": self.precision,
            "inference_precision": _short_type(actual),
            "config": {k: str(v) for k, v in self.config().items()},
            "input_names": input_names,
            "output_names": output_names,
            "options": self.options(),
        }
        header = (f"# OpenVINO {self.version()} {_DEVICE} runtime graph, precision "
                  f"{meta['inference_precision']}, subgraph {sub.key}\n"
                  f"# {len(sub.closure)} ONNX nodes -> {len(kernels)} executed layers\n"
                  f"# inputs: {', '.join(input_names)}\n# outputs: {', '.join(output_names)}\n")
        return Blob(backend=self.name, files={"model.xml": xml, "model.bin": weights}, meta=meta,
                    kernels=kernels, source=header + source)

    def build_notes(self, sub: "Subgraph") -> list[str]:
        from ..index_bounds import gather_notes

        return int64_notes(sub, _DEVICE) + gather_notes(sub, "OpenVINO returns zeros for an "
                                                        "index out of range")

    def _compile(self, model, what: str, cache: bool = False):
        """`cache`: a load, which may reuse what an open compile_cache scope holds (a decision's
        rooms load one blob many times); a build compiles afresh to report its kernels."""
        cfg = _shape_safe(model, self.config())
        if cache and (scratch := compile_cache.current()):
            cfg["CACHE_DIR"] = scratch
        try:
            return _get_core().compile_model(model, _DEVICE, cfg)
        except Exception as e:
            raise BackendError(f"OpenVINO {self.version()}: {_DEVICE} plugin cannot compile "
                               f"{what}: {ov_error(e)}") from None

    # -- load ------------------------------------------------------------------------------
    def load(self, blob: Blob) -> Runner:
        prec = blob.meta.get("precision", self.precision)  # an artifact's: = its options
        if prec != self.precision:  # load exactly as built (artifact_schema checks the two)
            return OpenVINOBackend(**dict(self._options, precision=prec)).load(blob)
        model, keep = read_blob_ir(blob)
        with compiling(keep):  # a 1B decoder's load: 7.8 GB peak unshed, OpenVINO's own 2.0x
            compiled = self._compile(model, "the blob's IR", cache=True)
        runner = OpenVINORunner(compiled, *[list(blob.meta.get(f"{k}_names") or [
            p.get_any_name() for p in getattr(compiled, f"{k}s")]) for k in ("input", "output")])
        runner.keep = keep  # the weights' map, while the compiled model may point into it
        return runner

    def profile_kernels(self, blob: Blob, inputs, repeats: int = 10):
        """PERF_COUNT of the executed layers (this backend's kernels, paired by
        `ov_kernels.profiled_kernel_names`); see `Backend.profile_kernels`."""
        model, keep = read_blob_ir(blob)
        cfg = _shape_safe(model, dict(self.config(), PERF_COUNT="YES"))
        with compiling(keep):
            compiled = _get_core().compile_model(model, _DEVICE, cfg)
        kernel_of = profiled_kernel_names(compiled, list(blob.kernels))
        runner = OpenVINORunner(compiled, *[list(blob.meta.get(f"{k}_names") or [
            p.get_any_name() for p in getattr(compiled, f"{k}s")]) for k in ("input", "output")])
        runner.keep = keep
        runner(inputs)  # warm-up
        totals: dict[str, float] = {}
        walls, kernels, n = [], [], max(1, repeats)
        for _ in range(n):
            t0 = time.perf_counter()
            runner(inputs)
            walls.append(time.perf_counter() - t0)
            kernels.append(0.0)
            seen: dict[str, int] = {}
            for info in runner._request.profiling_info:
                dt = info.real_time.total_seconds()
                if dt <= 0:
                    continue
                owners = kernel_of.get(info.node_name, ())
                k = seen.get(info.node_name, 0)
                seen[info.node_name] = k + 1
                key = owners[k] if k < len(owners) else PROFILED_UNMATCHED
                totals[key] = totals.get(key, 0.0) + dt
                kernels[-1] += dt
        return {**{k: t / n for k, t in totals.items()}, PROFILED_WALL: own_time(walls, kernels)}


def _short_type(s: str) -> str:
    """'<Type: 'float32'>' or 'f32' -> 'f32'."""
    m = re.search(r"'(\w+)'", s)
    name = m.group(1) if m else s
    return {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}.get(name, name)


class OpenVINORunner(Runner):
    """One infer request; inputs are shared with it (zero-copy), outputs are copied out.

    Why copy: with ``share_outputs=True`` the arrays alias the request's output buffers, which
    the next call overwrites, and the executor keeps outputs of one partition while running
    others (and the same partition again).  Alternating two requests would only make the
    previous call's arrays safe, not older ones.  The copy happens once, inside OpenVINO
    (``share_outputs=False``); measured on this machine it is within run-to-run noise for
    resnet50-size activations (2 MB: ~0.1 ms against ~14 ms of inference).

    Per-call overhead: the pybind ``InferRequest.infer(dict of Tensor)`` is called directly,
    skipping the Python wrapper's input dispatch and OVDict (about 0.05 ms less per call).
    """

    def __init__(self, compiled, input_names: list[str], output_names: list[str]):
        ov = _ov()
        self.compiled = compiled
        self.input_names = input_names
        self.output_names = output_names
        self._in_ports = _port_order(compiled.inputs, input_names, "input")
        self._outputs = [compiled.outputs[k] for k in _port_order(compiled.outputs, output_names,
                                                                  "output")]
        # OpenVINO's numpy bridge maps bf16 to float16 (numpy has no bfloat16): a bf16 port
        # would convert bfloat16 values to float16 on input and return bf16 bits labelled
        # float16.  bf16 ports take and give ml_dtypes' bfloat16 (same bits) instead.
        self._bf16 = ov.Type.bf16
        self._dtypes = []
        for k in self._in_ports:
            et = compiled.inputs[k].get_element_type()
            try:
                self._dtypes.append(_BF16 if et == ov.Type.bf16 else np.dtype(et.to_dtype()))
            except Exception:
                self._dtypes.append(None)
        self._bf16_out = [o.get_element_type() == ov.Type.bf16 for o in self._outputs]
        self._guard = RangeGuard(input_names, self._dtypes)  # int64 narrowed: ov_int64
        self._request = compiled.create_infer_request()
        self._tensor = ov.Tensor
        try:
            from openvino._pyopenvino import InferRequest as _Native

            self._native_infer = _Native.infer
        except ImportError:  # pragma: no cover - other openvino layouts
            self._native_infer = None

    def _as_tensor(self, x, dtype):
        if not isinstance(x, np.ndarray) or (dtype is not None and x.dtype != dtype) \
                or not x.flags.c_contiguous:
            # Not np.ascontiguousarray: it turns 0-d arrays into shape (1,).
            x = np.asarray(x, dtype=dtype, order="C")
        if x.dtype.char in _LONGLONG:
            # ONNX Runtime hands int64 back as C long long ('q'), equal to np.int64 ('l') but a
            # type OpenVINO's numpy bridge rejects ("Unsupported data type: int64"): an int64
            # tensor from an ONNX Runtime partition failed every run of the plan (nu16 M1).
            x = x.view(_LONGLONG[x.dtype.char])
        if dtype is _BF16:
            if not x.flags.writeable:
                x = x.copy()
            return self._tensor(x.view(np.uint16), list(x.shape), self._bf16)  # shared
        if not x.flags.writeable:  # OpenVINO shares only writeable memory
            return self._tensor(x, shared_memory=False)
        return self._tensor(x, shared_memory=True)

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        if len(inputs) != len(self.input_names):
            raise BackendError(f"OpenVINO: expected {len(self.input_names)} inputs "
                               f"({', '.join(self.input_names)}), got {len(inputs)}")
        if self._guard.ports:
            why = self._guard.check(inputs)
            if why:
                raise BackendError(f"OpenVINO: {why}")
        try:
            feed = {p: self._as_tensor(x, dt)
                    for p, x, dt in zip(self._in_ports, inputs, self._dtypes)}
            if self._native_infer is not None:
                res = self._native_infer(self._request, feed, False, True)
            else:  # pragma: no cover
                res = self._request.infer(feed, share_inputs=True, share_outputs=False)
        except Exception as e:
            raise BackendError(f"OpenVINO: inference failed: {ov_error(e)}") from None
        return [res[o].view(_BF16) if bf else res[o]
                for o, bf in zip(self._outputs, self._bf16_out)]

    def cancel(self) -> None:
        """Ctrl-C (native_stop, from another thread).  OpenVINO's CPU plugin stops a request
        only before its graph starts (measured: a running Loop ran on after `cancel()`), so a
        call that does not return is ended with the process by native_stop."""
        request = self._request
        if request is not None:
            request.cancel()

    def close(self) -> None:
        self._request = None
        self.compiled = None


def _shape_safe(model, cfg: dict) -> dict:
    """`cfg` for a model with dynamic dimensions: the CPU plugin's snippets (its fused
    attention kernels) off.  With them on, OpenVINO 2026.4 computes wrong values, or NaN on the
    plain library, at a larger shape after one whose attention had a size-1 inner dimension
    (the TorchScript attention block at 1x1 then 4x32 from one compiled model: the MatMul after
    Softmax; tests/test_dynamic_shapes.py).  Turning the runtime cache off
    (CPU_RUNTIME_CACHE_CAPACITY=0) fixed it too, but prepared every kernel again at each new
    shape: a KV decoder's decode step took 25x the library's own time."""
    if model.is_dynamic():
        cfg = dict(cfg, SNIPPETS_MODE="DISABLE")
    return cfg
