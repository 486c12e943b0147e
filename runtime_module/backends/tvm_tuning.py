"""MetaSchedule tuning of one TVM region, with a tuning database that outlives the process.

Why per region: Collage's point is that TVM can compile *any* fused region, and a region tuned as
a whole can beat tuning its anchor operator alone (the fused epilogue changes the memory/compute
balance).  So a TVM candidate is tuned as exactly the TIR functions its own build will contain:
the tasks come from the region's module after the same dispatch/legalize/fuse passes the build
runs, and the build applies the records right after FuseTIR (`tuned_pipeline`), under the
provenance tracker, so tuned kernels keep their expression IDs.

Why a database per scope: a record is a schedule trace for a workload; it is only worth reusing
on the CPU and TVM version it was measured on.  `TuningDatabase` keeps one MetaSchedule JSON
database per (TVM version, target, host fingerprint) under the user's directory; records of
another scope are never applied, and are reported (`foreign_records`) rather than ignored
silently.  Workloads are matched structurally, so the same workload (ResNet's repeated blocks,
the same region in another model or run) is tuned once.

Tuning runs where the build runs: in the search's measuring worker (a crash or timeout there
prices the candidate invalid and the search goes on), or in the process building an artifact,
which finds every record of the measured candidates already in the database.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import tvm
from tvm import relax
from tvm.relax.backend.cpu_generic import pipeline as cpu_generic

from ..host import host_fingerprint

_WORKLOADS = "database_workload.json"
_RECORDS = "database_tuning_record.json"
_SCOPE = "scope.json"
_OPENED: dict[str, tuple] = {}  # scope directory -> (file stamps, JSONDatabase): TuningDatabase.open


def default_db_dir() -> Path:
    """$PROVMAP_TUNING_DB, else ~/.cache/provmap/tuning."""
    env = os.environ.get("PROVMAP_TUNING_DB")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "provmap" / "tuning"


def system_cpu() -> str:
    """LLVM's name for this CPU (e.g. "emeraldrapids"): tuned code is only as good as the
    instructions it may use, and tuned records are host-specific anyway."""
    try:
        return str(tvm.get_global_func("target.llvm_get_system_cpu")())
    except Exception:
        return ""


def llvm_cpu_problem(mcpu: str) -> str | None:
    """None when LLVM knows `mcpu` ("native" and "" always do), else what tvm.mcpu expects.

    An unknown name used to be accepted: LLVM printed its own C++ line on the terminal, built
    generic code, and the artifact recorded the bogus name (issue 36)."""
    import difflib

    from tvm.target import codegen

    if mcpu in ("", "native"):
        return None
    try:
        if codegen.llvm_is_valid_cpu(mcpu, codegen.llvm_get_system_triple()):
            return None
        names = sorted({str(n) for n in codegen.llvm_get_cpu_archlist(tvm.target.Target("llvm"))})
    except Exception:  # noqa: BLE001 - a TVM without these queries: LLVM decides at build time
        return None
    close = difflib.get_close_matches(mcpu, names, n=3, cutoff=0.6)
    few = [n for n in ("native", "x86-64", "x86-64-v3", "skylake-avx512", "znver3") if
           n == "native" or n in names]
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    return (f"an LLVM CPU name such as {', '.join(few)} ({len(names)} in all, 'native' = this "
            f"host{hint})")


#: /proc/cpuinfo flag -> LLVM feature, for the features a virtual machine may hide from its
#: guest while CPUID's family and model still name a CPU that has them.
_MASKABLE = {"avx512f": "avx512f", "avx512_vnni": "avx512vnni", "avx512_bf16": "avx512bf16",
             "avx512_fp16": "avx512fp16", "avx_vnni": "avxvnni", "amx_tile": "amx-tile",
             "avx2": "avx2", "fma": "fma"}


def hidden_features() -> list[str]:
    """LLVM `-mattr` entries turning off what LLVM's CPU name promises but this CPU lacks.

    Measured 2026-11-26: a 2-core AMD EPYC guest reports family 25 model 17, which LLVM names
    "znver4" (AVX-512), while /proc/cpuinfo has no avx512 flag: code built with
    `-mcpu=znver4` died with SIGILL in MetaSchedule's measurements.  Disabling avx512f turns
    off every AVX-512 extension that depends on it."""
    from ..host import cpu_flags

    flags = cpu_flags()
    if not flags or "sse2" not in flags:  # not an x86 /proc/cpuinfo: nothing to compare
        return []
    return [f"-{feat}" for flag, feat in _MASKABLE.items() if flag not in flags]


def make_target(mcpu: str = "", num_cores: int | None = None) -> tvm.target.Target:
    """The LLVM target of a TVM build.  `mcpu` "native" means this host's CPU, less the
    features it does not actually have (`hidden_features`); "" is generic x86-64 (the portable
    default of untuned builds)."""
    spec: dict = {"kind": "llvm"}
    if mcpu == "native":
        mcpu = system_cpu()
        hidden = hidden_features() if mcpu else []
        if hidden:
            spec["mattr"] = hidden
    if mcpu:
        spec["mcpu"] = mcpu
    if num_cores:
        spec["num-cores"] = int(num_cores)  # MetaSchedule's CPU rules need it
    return tvm.target.Target(spec)


def fuse_passes(target) -> list:
    """The default CPU pipeline up to FuseTIR: what tasks are extracted from, and what the tuned
    build runs before applying records (both must see the same TIR, or nothing matches)."""
    return cpu_generic.library_dispatch_passes(target) + cpu_generic.legalize_passes(target)


def tuned_pipeline(target):
    """The CPU pipeline with MetaScheduleApplyDatabase after FuseTIR; the database is the one
    entered around the build (`with database:`).  Functions without a record are built as the
    untuned pipeline builds them."""

    @tvm.transform.module_pass(opt_level=0, name="provmap.TunedCPUPipeline")
    def _pipeline(mod, _ctx):
        with target:
            seq = tvm.transform.Sequential(
                fuse_passes(target)
                + [relax.transform.MetaScheduleApplyDatabase(enable_warning=False)]
                + cpu_generic.dataflow_lower_passes(target)
                + cpu_generic.finalize_passes(target))
            return seq(mod)

    return _pipeline


@dataclass
class TuneStats:
    """What tuning one region did: the search report sums these over candidates."""

    tasks: int = 0
    tuned: int = 0        # tasks tuned now (had no record before)
    reused: int = 0       # tasks whose records were already in the database
    untuned: int = 0      # tasks left without a record (budget spent, or every trial failed)
    trials: int = 0       # measured trials spent now
    tuning_s: float = 0.0
    db: str = ""          # the scope directory used
    foreign_records: int = 0  # records in the directory for other hosts/TVM versions (unused)
    task_names: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


class TuningDatabase:
    """One directory; one MetaSchedule JSON database per scope inside it."""

    def __init__(self, root: str | os.PathLike, target):
        self.root = Path(root).expanduser()
        self.scope = {"tvm": tvm.__version__, "target": str(target), "host": host_fingerprint()}
        digest = hashlib.blake2b(json.dumps(self.scope, sort_keys=True).encode(), digest_size=6)
        self.dir = self.root / digest.hexdigest()

    def _stamp(self) -> tuple:
        out = []
        for name in (_WORKLOADS, _RECORDS):
            try:
                st = (self.dir / name).stat()
                out.append((st.st_size, st.st_mtime_ns))
            except OSError:
                out.append(None)
        return tuple(out)

    def open(self):
        """The scope's database as on disk now (another process may have added records).
        Parsed again only when its files changed: the measuring worker asks once or twice per
        candidate, and parsing a few hundred records costs about a second."""
        from tvm.s_tir import meta_schedule as ms

        self.dir.mkdir(parents=True, exist_ok=True)
        scope_file = self.dir / _SCOPE
        if not scope_file.exists():
            scope_file.write_text(json.dumps(self.scope, indent=1, sort_keys=True) + "\n")
        key = str(self.dir.resolve())
        stamp = self._stamp()
        hit = _OPENED.get(key)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        db = ms.database.JSONDatabase(path_workload=str(self.dir / _WORKLOADS),
                                      path_tuning_record=str(self.dir / _RECORDS),
                                      allow_missing=True, module_equality="structural")
        _OPENED[key] = (self._stamp(), db)  # allow_missing may have created the files
        return db

    @contextlib.contextmanager
    def locked(self):
        """Exclusive use of the scope while tuning: two processes tuning the same workload at
        once would both spend the trials."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / ".lock", "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def foreign_records(self) -> int:
        """Records stored for other scopes (other hosts, targets or TVM versions)."""
        n = 0
        if not self.root.is_dir():
            return 0
        for d in self.root.iterdir():
            if d.is_dir() and d != self.dir and (d / _RECORDS).is_file():
                with open(d / _RECORDS, "rb") as f:
                    n += sum(1 for line in f if line.strip())
        return n


def _has_record(db, task, target) -> bool:
    mod = task.dispatched[0]
    return (db.has_workload(mod)
            and db.query_tuning_record(mod, target, task.task_name) is not None)


def _progress_callback(names: list[str], log):
    from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback
    from tvm.ir.utils import derived_object

    @derived_object
    class _Progress(PyMeasureCallback):
        """Counts trials and prints one line per measured batch (stderr)."""

        def __init__(self):
            self.trials = 0
            self.best: dict[int, float] = {}

        def apply(self, task_scheduler, task_id, measure_candidates, builder_results,
                  runner_results):
            self.trials += len(measure_candidates)
            for r in runner_results:
                secs = [float(x) for x in (r.run_secs or [])]
                if r.error_msg is None and secs:
                    t = sum(secs) / len(secs)
                    self.best[task_id] = min(self.best.get(task_id, t), t)
            if log is not None:
                best = self.best.get(task_id)
                log(f"tvm tune: task {task_id + 1}/{len(names)} {names[task_id]}: "
                    f"{self.trials} trials so far"
                    + (f", best {best * 1e3:.3f} ms" if best is not None else ""))

    return _Progress()


def light_tensor_intrinsics() -> None:
    """Register only this CPU's tensor intrinsics before MetaSchedule asks for them.

    MetaSchedule's TuneContext and its builder's default build `import tvm.s_tir.tensor_intrin`,
    whose package imports the CUDA, ROCm, Metal, Hexagon, RISC-V and Arm intrinsics too: ~250
    TVMScript functions parsed, 24 s of CPU per process on this machine -- paid by the tuning
    process and again by every build batch (the builder starts a fresh process per batch).
    Only the host's own intrinsics (x86: VNNI/AVX-512; Arm: dot product) can be used by CPU
    schedule rules, so the package is entered as an empty namespace and those alone imported
    (0.2 s).  A process that already imported the full package keeps it."""
    import importlib
    import importlib.util
    import platform
    import types

    name = "tvm.s_tir.tensor_intrin"
    if name not in sys.modules:
        spec = importlib.util.find_spec(name)
        pkg = types.ModuleType(name)
        pkg.__path__ = list(spec.submodule_search_locations or [])
        pkg.__package__ = name
        pkg.__doc__ = "provmap: the host CPU's tensor intrinsics only (light_tensor_intrinsics)"
        sys.modules[name] = pkg
    arch = platform.machine().lower()
    sub = "arm_cpu" if arch in ("aarch64", "arm64") else "x86"
    importlib.import_module(f"{name}.{sub}")


def _search_strategy(trials_per_task: int):
    """MetaSchedule's evolutionary search, its population scaled to the trial budget: the
    default 512 candidates evolved per batch cost about 20 s a batch on two cores, which is the
    whole cost of a 4-trial tuning and buys nothing a population of 64 does not."""
    from tvm.s_tir import meta_schedule as ms

    population = max(64, min(512, 16 * trials_per_task))
    return ms.search_strategy.EvolutionarySearch(
        population_size=population, init_min_unmeasured=min(50, population // 4))


def _ms_loggers():
    import logging

    return [lg for name, lg in list(logging.Logger.manager.loggerDict.items())
            if name.startswith("tvm.s_tir.meta_schedule") and isinstance(lg, logging.Logger)]


def _quiet_console() -> None:
    """MetaSchedule logs every batch (tables included) to the console and to files in its work
    directory; keep the files (deleted with it) and our one-line progress, drop the console."""
    import logging

    for lg in _ms_loggers():
        for h in list(lg.handlers):
            if type(h) is logging.StreamHandler:
                lg.removeHandler(h)


def _release_loggers() -> None:
    """Close the log files of a finished tuning: the measuring worker tunes hundreds of
    regions, and each tuning configures new handlers on files about to be deleted."""
    for lg in _ms_loggers():
        for h in list(lg.handlers):
            lg.removeHandler(h)
            h.close()


def region_tasks(mods, target) -> list:
    """The distinct MetaSchedule tasks of the regions `mods`: each module is fused as its build
    fuses it, and a workload met in several regions (the same convolution inside every candidate
    that contains it) is one task, its weight summed.  Collage's candidates overlap heavily:
    SqueezeNet's 355 TVM candidates at --max-size 4 hold 702 tasks but only 74 workloads."""
    import tvm_ffi
    from tvm.s_tir.meta_schedule import ExtractedTask
    from tvm.s_tir.meta_schedule.relax_integration import extract_tasks

    light_tensor_intrinsics()
    by_hash: dict[int, list[int]] = {}
    tasks, weights = [], []
    for mod in mods:
        with target:
            fused = tvm.transform.Sequential(fuse_passes(target))(mod)
        for t in extract_tasks(fused, target):
            wl = t.dispatched[0]
            same = by_hash.setdefault(tvm_ffi.structural_hash(wl), [])
            hit = next((i for i in same if tvm_ffi.structural_equal(tasks[i].dispatched[0], wl)),
                       None)
            if hit is None:
                same.append(len(tasks))
                tasks.append(t)
                weights.append(int(t.weight))
            else:
                weights[hit] += int(t.weight)
    return [t if int(t.weight) == w else
            ExtractedTask(t.task_name, t.mod, t.target, list(t.dispatched), w)
            for t, w in zip(tasks, weights)]


def tune_region(mod: tvm.IRModule, target, db: TuningDatabase, trials_per_task: int,
                budget: int, log=None) -> TuneStats:
    """Tune every task of `mod` that has no record in `db` (see tune_regions)."""
    return tune_regions([mod], target, db, trials_per_task, budget, log)


def tune_regions(mods, target, db: TuningDatabase, trials_per_task: int, budget: int,
                 log=None) -> TuneStats:
    """Tune every distinct task of the modules `mods` that has no record in `db`, in one
    MetaSchedule session, with at most `trials_per_task` trials each and `budget` trials in
    all; records go to `db`.  One session for many regions pays for the builder and runner
    processes and the cost model once, and lets MetaSchedule's task scheduler spread the budget
    over all of them.  Returns what happened."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.relax_integration import extracted_tasks_to_tune_contexts

    t0 = time.perf_counter()
    tasks = region_tasks(mods, target)
    stats = TuneStats(tasks=len(tasks), db=str(db.dir), foreign_records=db.foreign_records(),
                      task_names=[t.task_name for t in tasks])
    with db.locked():
        database = db.open()
        todo = [t for t in tasks if not _has_record(database, t, target)]
        stats.reused = len(tasks) - len(todo)
        global_trials = min(trials_per_task * len(todo), max(0, budget))
        if todo and global_trials > 0:
            names = [t.task_name for t in todo]
            if log is not None:
                log(f"tvm tune: {len(todo)} task(s) to tune, {stats.reused} from the database; "
                    f"{global_trials} trials at most ({trials_per_task} per task)")
            work = tempfile.mkdtemp(prefix="provmap-ms-")
            progress = _progress_callback(names, log)
            try:
                with contextlib.redirect_stdout(sys.stderr):  # its console handler: never stdout
                    ctxs, weights = extracted_tasks_to_tune_contexts(
                        todo, work, strategy=_search_strategy(trials_per_task),
                        num_threads=os.cpu_count() or 1, seed=0)
                _quiet_console()
                per_iter = max(1, min(16, trials_per_task, global_trials))
                ms.tune.tune_tasks(
                    tasks=ctxs, task_weights=weights, work_dir=work,
                    max_trials_global=global_trials, max_trials_per_task=trials_per_task,
                    num_trials_per_iter=per_iter,
                    builder=ms.builder.LocalBuilder(max_workers=1, timeout_sec=120.0,
                                                    initializer=light_tensor_intrinsics),
                    runner=ms.runner.LocalRunner(timeout_sec=60.0,
                                                 initializer=light_tensor_intrinsics),
                    database=database,
                    measure_callbacks=ms.measure_callback.MeasureCallback.create("default")
                    + [progress])
            finally:
                _release_loggers()
                shutil.rmtree(work, ignore_errors=True)
            stats.trials = progress.trials
        stats.tuned = sum(1 for t in todo if _has_record(database, t, target))
        stats.untuned = len(todo) - stats.tuned
    stats.tuning_s = time.perf_counter() - t0
    return stats


def stderr_log(msg: str) -> None:
    print(f"provmap: {msg}", file=sys.stderr, flush=True)
