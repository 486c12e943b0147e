"""TVM backend: the region's own Relax bindings, compiled for LLVM with the default CPU pipeline.

Unlike the ONNX-consuming backends, TVM builds the outlined Relax function (the bindings the
importer produced, with their expression IDs), under the provenance tracker, so every kernel
call site of the blob maps to exact expression IDs rather than just to ONNX nodes.
"""

from __future__ import annotations

import os
import tempfile
from types import SimpleNamespace
from typing import Sequence

import numpy as np
import tvm
from tvm import relax

from provenance.build import cpu_pipeline, cpu_target, join_executable
from provenance.model import ProvenanceMap
from provenance.propagate import ProvenanceTracker

from ..backend import Backend, BackendError, Blob, KernelInfo, Runner, Support

_ALIGN = 64  # tvm.runtime.from_dlpack refuses less-aligned buffers


class TVMRunner(Runner):
    def __init__(self, lib_bytes: bytes, input_names, output_names):
        self.input_names = list(input_names)
        self.output_names = list(output_names)
        # load_module needs a file; the bytes were verified by the caller, the file is private.
        fd, path = tempfile.mkstemp(suffix=".so", prefix="provmap-tvm-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(lib_bytes)
            lib = tvm.runtime.load_module(path)
        finally:
            os.unlink(path)
        self._dev = tvm.cpu()
        self._lib = lib  # kept for a profiling VM (profile_kernels)
        self._vm = relax.VirtualMachine(lib, self._dev)
        self._main = self._vm["main"]
        self._tuple_out = len(self.output_names) != 1

    def _to_tvm(self, a: np.ndarray):
        if a.flags.c_contiguous and a.ctypes.data % _ALIGN == 0:
            return tvm.runtime.from_dlpack(a)  # zero copy
        return tvm.runtime.tensor(np.ascontiguousarray(a), self._dev)

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        out = self._main(*[self._to_tvm(a) for a in inputs])
        outs = list(out) if self._tuple_out else [out]
        return [np.from_dlpack(o) for o in outs]


def _legalizable(value) -> tuple[bool, str]:
    for op in _ops_in(value):
        if op.get_attr("FLegalize") is None and not op.name.startswith(("relax.call_", "relax.builtin")):
            return False, f"Relax op {op.name} has no legalization for LLVM"
    return True, ""


def _ops_in(value):
    found = []

    def visit(e):
        if isinstance(e, tvm.ir.Op):
            found.append(e)

    relax.analysis.post_order_visit(value, visit)
    return found


class TVMBackend(Backend):
    name = "tvm"

    def version(self) -> str:
        return tvm.__version__

    def supports(self, view) -> dict[int, Support]:
        # Everything the importer accepted is Relax; what LLVM cannot lower is an op without a
        # legalization (checked per binding, so the reason names the Relax op).
        imp = view.imported
        values = {imp.var_expr[b.var]: b.value
                  for blk in imp.mod["main"].body.blocks for b in blk.bindings}
        out = {}
        for i in view.op_nodes:
            verdict = Support(True)
            for e in view.produced.get(i, ()):
                ok, why = _legalizable(values[e])
                if not ok:
                    verdict = Support(False, why)
                    break
            out[i] = verdict
        return out

    def build(self, sub) -> Blob:
        fn, var_expr, param_names, out_names = sub.relax_function()
        fn = fn.with_attr("global_symbol", "main")
        mod = tvm.IRModule({"main": fn})
        target = cpu_target()
        tracker = ProvenanceTracker(mod, var_expr)
        try:
            with tvm.transform.PassContext(opt_level=3, instruments=[tracker.instrument()]):
                ex = tvm.compile(mod, target=target, relax_pipeline=cpu_pipeline(target))
        except Exception as e:  # TVM raises many types; the message is what matters
            first = next((ln for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
            raise BackendError(f"tvm: build failed: {first}") from None
        shim = SimpleNamespace(pmap=ProvenanceMap(meta={}), const_exprs=sub.view.imported.const_exprs)
        pmap = join_executable(shim, tracker, ex, target, backend=self.name)
        kind = {k.name: k.kind for k in pmap.kernels}
        by_site: dict[str, list[str]] = {}
        for sid, e, _role in pmap.site_exprs:
            by_site.setdefault(sid, []).append(e)
        kernels = [KernelInfo(name=s.kernel, kind=kind[s.kernel], exprs=sorted(by_site.get(s.id, [])),
                              op=s.kernel)
                   for s in sorted(pmap.sites, key=lambda s: s.ordinal)]
        with tempfile.TemporaryDirectory(prefix="provmap-tvm-") as d:
            path = os.path.join(d, "lib.so")
            ex.export_library(path)
            with open(path, "rb") as f:
                lib = f.read()
        source = ("# Relax function of this partition (as imported, before lowering)\n"
                  + tvm.IRModule({"main": fn}).script()
                  + "\n\n# After the CPU pipeline: the kernels (TIR) and the VM function\n"
                  + tracker.mod.script())
        meta = {"backend_version": self.version(), "target": "llvm", "options": self.options(),
                "input_names": param_names, "output_names": out_names}
        return Blob(backend=self.name, files={"lib.so": lib}, meta=meta, kernels=kernels,
                    source=source)

    def profile_kernels(self, blob: Blob, inputs, repeats: int = 10):
        """Per-PrimFunc time through the Relax VM's instrument hook (TVM 0.27's VM has no
        profiler): called before and after every packed call, so each kernel call is timed on
        the host.  The hook's own microseconds inflate tiny kernels' shares a little."""
        import time as _time

        runner = self.load(blob)
        vm = relax.VirtualMachine(runner._lib, runner._dev)
        args = [runner._to_tvm(np.asarray(a)) for a in inputs]
        wanted = {k.name for k in blob.kernels}
        totals: dict[str, float] = {}
        started: dict[str, float] = {}

        def instrument(func, name, before_run, ret_value, *a):
            name = str(name)
            if name in wanted:
                if before_run:
                    started[name] = _time.perf_counter()
                elif name in started:
                    totals[name] = totals.get(name, 0.0) + _time.perf_counter() - started.pop(name)
            return 0  # run the call normally

        main = vm["main"]
        main(*args)  # warm-up
        vm.set_instrument(instrument)
        n = max(1, repeats)
        for _ in range(n):
            main(*args)
        return {k: v / n for k, v in totals.items()}

    def load(self, blob: Blob) -> Runner:
        try:
            return TVMRunner(blob.files["lib.so"], blob.meta["input_names"],
                             blob.meta["output_names"])
        except KeyError as e:
            raise BackendError(f"tvm: blob lacks {e}") from None
        except Exception as e:
            first = next((ln for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
            raise BackendError(f"tvm: load failed: {first}") from None
