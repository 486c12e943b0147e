"""TVM backend: the region's own Relax bindings, compiled for LLVM with the default CPU pipeline.

Unlike the ONNX-consuming backends, TVM builds the outlined Relax function (the bindings the
importer produced, with their expression IDs), under the provenance tracker, so every kernel
call site of the blob maps to exact expression IDs rather than just to ONNX nodes.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from types import SimpleNamespace
from typing import Sequence

import numpy as np
import tvm
from tvm import relax

from provmap.provenance.build import cpu_pipeline, cpu_target, join_executable
from provmap.provenance.util.interrupt import raise_if_interrupted
from provmap.provenance.model import ProvenanceMap
from provmap.provenance.propagate import ProvenanceTracker
from provmap.provenance.salvage import failing_nodes
from provmap.provenance.weights import shedding

from ..backend import BackendError, Blob, KernelInfo, Runner, Support
from .empty_tensors import refuse_reductions_over_nothing
from .tvm_export import export_library
from .tvm_host import refuse_foreign_cpu
from .tvm_module import bounded, module_for
from .tvm_options import TVMOptions
from .tvm_tuning import (TuningDatabase, default_db_dir, make_target,
                         stderr_log, tune_regions, tuned_pipeline)

_ALIGN = 64  # tvm.runtime.from_dlpack refuses less-aligned buffers
_DLPACK_KINDS = "biufc"  # numpy dtype kinds DLPack can describe (not ml_dtypes' "V")


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
        # DLPack export refuses read-only arrays (np.load(mmap_mode="r"), onnx's to_array) and
        # dtypes it has no code for (ml_dtypes' bfloat16 is kind "V"); tvm.runtime.from_dlpack
        # also refuses less than 64-byte-aligned data.  Those are copied instead.
        # An empty array is copied too: numpy gives it strides (0, 0, ...) that the VM's
        # argument check refuses ("Mismatched X.strides") whenever its pointer happens to be
        # aligned.
        if (a.dtype.kind in _DLPACK_KINDS and a.flags.c_contiguous and a.flags.writeable
                and a.ctypes.data % _ALIGN == 0 and a.size):
            return tvm.runtime.from_dlpack(a)  # zero copy
        # Not np.ascontiguousarray: it turns 0-d arrays into shape (1,).
        return tvm.runtime.tensor(np.asarray(a, order="C"), self._dev)

    #: A schedule's thread count for this partition (None: TVM's default, every core).
    threads: int | None = None

    def set_threads(self, n: int | None) -> None:
        """Run on `n` threads (runtime_module/schedule.py).  TVM's thread pool belongs to the
        calling thread (one per thread, thread-local), so the count is set on the calling
        thread's pool before each call, and only when it differs from what that thread was
        last set to: a runner without a count puts a thread back to the default."""
        self.threads = int(n) if n else None

    def _configure_pool(self) -> None:
        want = self.threads or 0  # 0: TVM's default (every core, TVM_NUM_THREADS respected)
        if getattr(_POOL, "threads", 0) != want:
            # mode 1 = kBig, what TVM's pool starts with (all cores on a homogeneous CPU)
            tvm.get_global_func("runtime.config_threadpool")(1, want)
            _POOL.threads = want

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        self._configure_pool()
        out = self._main(*[self._to_tvm(a) for a in inputs])
        outs = list(out) if self._tuple_out else [out]
        return [_to_numpy(o) for o in outs]


#: What each calling thread's TVM pool was last configured to (see TVMRunner.set_threads).
_POOL = threading.local()


def _to_numpy(t) -> np.ndarray:
    if isinstance(t, tuple):
        # A Shape value (tvm_ffi.Shape, a tuple): what Relax makes of an ONNX Shape node whose
        # int64 tensor is a partition's output.
        return np.asarray(list(t), dtype=np.int64)
    try:
        return np.from_dlpack(t)  # zero copy
    except (BufferError, TypeError, RuntimeError):
        # bfloat16 and the float8 types have no DLPack code numpy accepts; Tensor.numpy()
        # copies into the ml_dtypes array type instead.
        return t.numpy()


# Ops without an FLegalize that the CPU build still lowers, so "no legalization" alone would
# refuse ops that compile and run fine (ShuffleNet's Slice, Gather of a run-time tensor, NonZero):
# - the VM runs them as builtins: relax.transform.LowerRuntimeBuiltin rewrites these by name
#   (tvm src/relax/backend/vm/lower_runtime_builtin.cc), ops with an "FLowerBuiltin" attribute
#   likewise, and LegalizeOps turns an op with "FCallPacked" (nonzero, unique, print,
#   assert_op) into a call of that packed function;
# - the CPU pipeline's DispatchSortScan/DispatchSampling passes pick TOPI kernels for them.
# Each was built and run through tvm.compile with cpu_pipeline (tests/test_runtime_inputs.py).
_VM_BUILTIN_OPS = {
    "relax.shape_of", "relax.tensor_to_shape", "relax.to_vdevice", "relax.make_closure",
    "relax.invoke_closure", "relax.memory.alloc_storage", "relax.memory.alloc_tensor",
    "relax.memory.kill_storage", "relax.memory.kill_tensor",
}
_DISPATCHED_OPS = {"relax.sort", "relax.argsort", "relax.topk", "relax.cumsum", "relax.cumprod",
                   "relax.multinomial_from_uniform"}
_LOWERING_ATTRS = ("FLegalize", "FCallPacked", "FLowerBuiltin")


def _lowers(op) -> bool:
    if op.name in _VM_BUILTIN_OPS or op.name in _DISPATCHED_OPS:
        return True
    if op.name.startswith(("relax.call_", "relax.builtin.", "relax.vm.")):
        return True  # already calls a kernel or a builtin
    return any(op.get_attr(a) is not None for a in _LOWERING_ATTRS)


def _legalizable(value) -> tuple[bool, str]:
    for op in _ops_in(value):
        if not _lowers(op):
            return False, f"Relax op {op.name} has no lowering for LLVM"
    return True, ""


def _ops_in(value):
    found = []

    def visit(e):
        if isinstance(e, tvm.ir.Op):
            found.append(e)

    relax.analysis.post_order_visit(value, visit)
    return found


def _not_a_tensor(imp, name: str) -> bool:
    """A sequence or optional value (typed as such by ONNX's inference): it has no tensor type
    by nature, and TVM's Relax import converts the sequence ops (tests/test_tvm_converters.py);
    only an untyped *tensor* is declined."""
    tp = (getattr(imp, "onnx_types", None) or {}).get(name)
    return tp is not None and tp.WhichOneof("value") in ("sequence_type", "optional_type")


class TVMBackend(TVMOptions):
    """Options: `tune` ("none", or "metaschedule": tune each region's TIR before building it,
    see tvm_tuning), `trials` (per task, default 64), `tune_budget` (trials in all for this
    backend instance: one search's measuring worker, or one artifact build; default 2000),
    `tuning_db` (the database directory; default $PROVMAP_TUNING_DB or
    ~/.cache/provmap/tuning), `mcpu` (LLVM CPU; "native" = this host; default generic x86-64
    untuned, native when tuning)."""

    def __init__(self, **options):
        super().__init__(**options)
        tune = str(self._options.get("tune", "none"))
        if tune not in self.TUNERS:
            raise BackendError(f"tvm: option tune={tune!r}: expected one of {list(self.TUNERS)}")
        try:
            self._trials = int(self._options.get("trials", 64))
            self._budget = int(self._options.get("tune_budget", 2000))
        except (TypeError, ValueError):
            raise BackendError("tvm: options trials and tune_budget must be integers") from None
        if self._trials < 1 or self._budget < 0:
            raise BackendError("tvm: option trials must be >= 1 and tune_budget >= 0")
        self._tune = tune
        self._spent = 0  # trials this instance has tuned so far (the budget is per instance)
        self.tuning: list[dict] = []  # one TuneStats dict per tuned build, for reports

    def build_notes(self, sub) -> list[str]:
        from ..index_bounds import gather_notes
        return gather_notes(sub, "TVM reads outside the tensor (garbage, or a crash)")

    def version(self) -> str:
        return tvm.__version__

    def _target(self):
        if self._tune == "none":
            mcpu = str(self._options.get("mcpu", ""))
            return make_target(mcpu) if mcpu else cpu_target()
        return make_target(str(self._options.get("mcpu", "native")), os.cpu_count())

    def _tuning_db(self, target) -> TuningDatabase:
        return TuningDatabase(self._options.get("tuning_db") or default_db_dir(), target)

    def supports(self, view) -> dict[int, Support]:
        # What LLVM cannot lower is an op without any lowering (checked per binding, so the
        # reason names the Relax op).  A node the Relax frontend could not convert is only a
        # placeholder call in "main" (the importer's `opaque`), which must never be built; a
        # node with no binding of its own (an alias such as Identity) computes nothing here.
        # A node whose call TVM cannot legalize (an op reading a tensor of unknown shape, an
        # integer Pow, ...) is declined with TVM's error, as `provmap map` reports it.
        imp = view.imported
        opaque = getattr(imp, "opaque", None) or {}
        failing = failing_nodes(imp)
        values = {imp.var_expr.get(b.var): b.value
                  for blk in imp.mod["main"].body.blocks for b in blk.bindings}
        out = {}
        for i in view.op_nodes:
            why = opaque.get(i) or failing.get(i)
            if why:
                out[i] = Support(False, f"not compilable by TVM: {why}")
                continue
            verdict = Support(True)
            # TVM builds for known shapes; a tensor nothing typed (downstream of an op no
            # inference sees through) could not even be a partition boundary.
            untyped = next((x for x in list(view.node_inputs[i]) + list(view.nodes[i].output)
                            if x and x not in view.initializers and view.known(x) is None
                            and not _not_a_tensor(imp, x)), None)
            if untyped is not None:
                out[i] = Support(False, f"tensor '{untyped}' has no type or shape that ONNX's "
                                        "or ONNX Runtime's inference computes")
                continue
            for e in view.produced.get(i, ()):
                ok, why = _legalizable(values[e])
                if not ok:
                    verdict = Support(False, why)
                    break
            out[i] = verdict
        refuse_reductions_over_nothing(view, out, "TVM")
        return out

    def region(self, sub):
        """The region as a Relax module ("main" and the functions it calls), its expression
        IDs by var, and its parameter and output names."""
        # An opaque node's placeholder call builds, but the library would not load.
        opaque = getattr(sub.view.imported, "opaque", None) or {}
        for i in sub.closure:
            if i in opaque:
                raise BackendError(f"tvm: {sub.view.describe(i)} is not compilable by TVM: "
                                   f"{opaque[i]}")
        fn, var_expr, param_names, out_names = sub.relax_function()
        fn = bounded(fn.with_attr("global_symbol", "main"),
                      getattr(sub.view.imported, "profile", None))
        return module_for(fn, sub.view.imported.mod), var_expr, param_names, out_names

    def build(self, sub) -> Blob:
        region = self.region(sub)
        target = self._target()
        if self._tune == "none":
            return self._compile(sub, region, target)
        db = self._tuning_db(target)
        tuning = self._tune_within_budget([region[0]], target, db).to_dict()
        self.tuning.append(tuning)
        return self._compile(sub, region, target, db.open(), tuning)

    def prepare(self, subs) -> dict:
        """Under tune=metaschedule: tune the distinct tasks of all `subs` in one session, so
        each later `build` finds its records (Backend.prepare).  Regions TVM cannot build are
        left to `build` to refuse."""
        if self._tune == "none":
            return {}
        mods = []
        for sub in subs:
            try:
                mods.append(self.region(sub)[0])
            except BackendError:
                continue
        target = self._target()
        out = self._tune_within_budget(mods, target, self._tuning_db(target)).to_dict()
        out["regions"] = len(mods)
        return out

    def _tune_within_budget(self, mods, target, db: TuningDatabase):
        """Tune `mods` within what is left of this instance's trial budget."""
        try:
            stats = tune_regions(mods, target, db, self._trials, self._budget - self._spent,
                                 log=stderr_log)
        except Exception as e:
            raise_if_interrupted()
            first = next((ln for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
            raise BackendError(f"tvm: tuning failed: {first}") from None
        raise_if_interrupted()
        self._spent += stats.trials
        return stats

    def build_with_database(self, sub, database, target=None) -> Blob:
        """`sub` built with the records of a MetaSchedule `database` object, tuning nothing:
        for experiments that make their own records (bench/tuning_anchor.py)."""
        return self._compile(sub, self.region(sub), target or self._target(), database, {})

    def _compile(self, sub, region, target, database=None, tuning=None) -> Blob:
        mod, var_expr, param_names, out_names = region
        tracker = ProvenanceTracker(mod, var_expr)
        try:
            with contextlib.ExitStack() as stack:
                if database is not None:
                    stack.enter_context(database)  # MetaScheduleApplyDatabase reads it
                    pipeline = tuned_pipeline(target)
                else:
                    pipeline = cpu_pipeline(target)
                stack.enter_context(tvm.transform.PassContext(
                    opt_level=3, instruments=[tracker.instrument()]))
                # code generation reads every weight: their pages dropped as it goes, as in
                # provenance.build.compile_tvm
                stack.enter_context(shedding())
                ex = tvm.compile(mod, target=target, relax_pipeline=pipeline)
        except Exception as e:  # TVM raises many types; the message is what matters
            raise_if_interrupted()  # a Ctrl-C TVM caught in a callback is not a failed build
            first = next((ln for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
            raise BackendError(f"tvm: build failed: {first}") from None
        raise_if_interrupted()  # ... nor, when TVM swallowed it whole, a finished one
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
            with shedding():  # it writes every constant into the library
                export_library(ex, path)
            with open(path, "rb") as f:
                lib = f.read()
        source = ("# Relax function of this partition (as imported, before lowering)\n"
                  + mod.script()
                  + "\n\n# After the CPU pipeline: the kernels (TIR) and the VM function\n"
                  + tracker.mod.script())
        meta = {"backend_version": self.version(), "target": str(target),
                "options": self.options(), "input_names": param_names, "output_names": out_names}
        if tuning:
            meta["tuning"] = tuning
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
        refuse_foreign_cpu(blob.meta)  # before the library is loaded (issue 36)
        try:
            return TVMRunner(blob.files["lib.so"], blob.meta["input_names"],
                             blob.meta["output_names"])
        except KeyError as e:
            raise BackendError(f"tvm: blob lacks {e}") from None
        except Exception as e:
            first = next((ln for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
            raise BackendError(f"tvm: load failed: {first}") from None
