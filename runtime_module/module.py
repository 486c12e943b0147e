"""Runtime modules, modeled on TVM's runtime::Module: a type key, get_function, imported modules.

`ArtifactModule` (type key "provmap.artifact") is the root; it imports one `PartitionModule` per
partition (type key "provmap.<backend>").  As in TVM, the root's "main" runs the model and a
partition module's function (named by the partition id) runs one partition.  The executor is
deliberately small: partitions run in the manifest's topological order, tensors live in a dict
keyed by ONNX tensor name and are dropped after their last use, and arrays are handed from one
backend to the next as-is (numpy views; TVM takes them zero-copy over DLPack when aligned and
writeable).  An artifact whose manifest has a concurrent schedule (`schedule.py`) runs the
partitions of one stage at once on a thread pool, each with the thread count the schedule gives
it; a stage starts when the previous one has finished, and a failing partition's error is raised
only after the rest of its stage has been joined (nothing keeps running behind it).

`load(path)` verifies the whole file first (see artifact.read_artifact); with `runnable=False`
nothing backend-specific is imported or loaded, which is what offline inspection uses.
"""

from __future__ import annotations

import io
import time
import warnings as _warnings
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Callable, Mapping

import ml_dtypes  # noqa: F401  (registers bfloat16 & co, which specs may name, with numpy)
import numpy as np


from provmap.provenance.util import native_stop
from provmap.provenance.util.errors import ProvmapError, ProvmapWarning, did_you_mean

from .artifact import Artifact, read_artifact
from .backend import BackendError
from .inputs import InputContract, shape_ok as _shape_ok
from .lookup import Lookup
from . import trust as _trust
from .registry import backend_class, get_backend
from .schedule import check_runner_names, check_schedule, is_concurrent


class Module:
    type_key = "provmap.module"

    def __init__(self):
        self.imports: list[Module] = []

    def import_module(self, other: "Module") -> None:
        self.imports.append(other)

    def get_function(self, name: str, query_imports: bool = False) -> Callable | None:
        fn = self._functions().get(name)
        if fn is None and query_imports:
            for m in self.imports:
                fn = m.get_function(name, query_imports=True)
                if fn is not None:
                    break
        return fn

    def __getitem__(self, name: str) -> Callable:
        fn = self.get_function(name)
        if fn is None:
            raise AttributeError(f"{self.type_key} module has no function {name!r}")
        return fn

    def _functions(self) -> dict[str, Callable]:
        return {}

    def __repr__(self) -> str:
        return f"Module(type_key={self.type_key!r}, imports={len(self.imports)})"


class PartitionModule(Module):
    """One partition's code, loaded by its backend (lazily, so inspection never needs it)."""

    def __init__(self, artifact: Artifact, pid: str, gate=None):
        super().__init__()
        self.artifact = artifact
        self._gate = gate  # the owner's check before any partition code is loaded
        self.info = artifact.partition(pid)
        self.id = pid
        self.backend = self.info["backend"]
        self.type_key = self.info["type_key"]
        self._runner = None

    @property
    def runner(self):
        if self._runner is None:
            if self._gate is not None:
                self._gate(self)
            options = self.artifact.backend_options(self.backend)  # declared options only
            threads = ((self.artifact.manifest.get("schedule") or {}).get("threads") or {}).get(self.id)
            try:
                by_option = threads and "threads" in backend_class(self.backend).option_names()
                if by_option:
                    options = {**options, "threads": threads}
                be = get_backend(self.backend, **options)
                runner = be.load(self.artifact.blob(self.id))
                if threads and not by_option and hasattr(runner, "set_threads"):
                    runner.set_threads(threads)
            except BackendError as e:
                raise ProvmapError(f"partition {self.id} ({self.backend}): {e}") from None
            # Weights hashed while the library read them (read_artifact's `hash_later`): no
            # runner is handed out before they are known to be the manifest's.
            self.artifact.check_pending()
            self._runner = runner
        return self._runner

    def get_source(self) -> str:
        return self.artifact.members[self.info["source"]].decode()

    def _functions(self):
        return {self.id: self.runner}


class ArtifactModule(Module):
    type_key = "provmap.artifact"

    def __init__(self, artifact: Artifact, path: str | None = None, runnable: bool = True,
                 trust: bool = False):
        super().__init__()
        self.artifact = artifact
        self.manifest = artifact.manifest
        self.path = path
        self.runnable = runnable
        self._trust = trust
        self.partitions = [PartitionModule(artifact, p["id"], self._may_load)
                           for p in self.manifest["partitions"]]
        for m in self.partitions:
            self.import_module(m)
        self.contract = InputContract(self.manifest["model"])
        self.input_specs = self.contract.specs
        #: The sizes a dynamic artifact serves, checked on every run (None: static).
        self.profile = self.contract.profile
        self.output_names = [t["name"] for t in self.manifest["model"]["outputs"]]
        self._lookup = None
        self._plan = None
        self._constants: dict[str, np.ndarray] | None = None
        self.schedule = self.manifest.get("schedule")  # None: serial (see schedule.py)
        self._stages = None
        self._pool: ThreadPoolExecutor | None = None
        #: Said once per graph output by this module (a declared shape the result contradicts);
        #: `on_warning(line)` hears each as it happens, else Python's warnings module does.
        self.warnings: list[str] = []
        self.on_warning: Callable[[str], None] | None = None
        self._free_outputs: set[str] = set()
        self._warned: set[str] = set()

    def _may_load(self, m: "PartitionModule") -> None:
        """The gate in front of every partition's code (see provmap.runtime_module.trust)."""
        where = self.path or "artifact"
        if not self.runnable:
            raise ProvmapError(f"{where}: loaded for inspection only (runnable=False): partition "
                               "code is never loaded from it; load it runnable to run it")
        try:  # an unknown backend is said as such, before any talk of trust (issue 36)
            backend_class(m.backend)
        except BackendError as e:
            raise ProvmapError(f"{where}: partition {m.id}: {e}") from None
        if self._trust or not _loads_native_code(m.backend):
            return
        if self.artifact.digest and _trust.is_trusted(self.artifact.digest):
            return
        try:  # an unusable list is said as such: "not built here" sent users to `provmap
            _trust.check_store()  # trust`, which then failed on the same list (issue 36)
        except _trust.TrustStoreError as e:
            raise ProvmapError(
                f"{where}: refused to load partition {m.id} ({m.backend}): it is native code, "
                f"and the trust list that records this machine's builds cannot be read: {e}; "
                "fix PROVMAP_TRUST, or pass --trust if you trust this artifact") from None
        raise ProvmapError(
            f"{where}: refused to load partition {m.id} ({m.backend}): it is native code "
            f"(a shared library) from an artifact the trust list does not hold (built "
            f"elsewhere, or its entry revoked or pruned), and loading it "
            f"runs that code. If you trust where it came from: `provmap trust {where}` (records "
            f"its digest {self.artifact.digest[:16]}...), or pass --trust (trust=True in "
            "provmap.runtime_module.module.load)")

    # -- TVM-style surface -------------------------------------------------------------------
    def _functions(self):
        return {"main": self.run, "lookup": self.lookup}

    @property
    def lookup(self) -> Lookup:
        if self._lookup is None:
            self._lookup = Lookup(self.manifest, self.artifact.provenance_map())
        return self._lookup

    def load_runners(self) -> float:
        """Load every partition's code now (what run() would do on first use); returns seconds."""
        t0 = time.perf_counter()
        for m in self.partitions:
            m.runner
        self._compile_plan()
        return time.perf_counter() - t0

    def _compile_plan(self):
        if self._plan is not None:
            return self._plan
        steps = []
        # Stages of step positions: one per partition when serial.
        if is_concurrent(self.schedule):
            check_schedule(self.manifest["partitions"], self.schedule)
            pos = {m.id: k for k, m in enumerate(self.partitions)}
            stages = [[pos[pid] for pid in s] for s in self.schedule["stages"]]
        else:
            stages = [[k] for k in range(len(self.partitions))]
        stage_of = {k: n for n, s in enumerate(stages) for k in s}
        last_use: dict[str, int] = {}
        for k, m in enumerate(self.partitions):
            for n in m.runner.input_names:
                last_use[n] = max(last_use.get(n, -1), stage_of[k])
        keep = set(self.output_names)
        produced = set(self.input_specs) | set(self._constant_outputs())
        check_runner_names(self.path or "artifact", self.partitions, stages, set(produced))
        for k, m in enumerate(self.partitions):
            r = m.runner
            specs = {t["name"]: (tuple(t["shape"]), np.dtype(t["dtype"])) for t in m.info["outputs"]}
            expect = [specs.get(n) for n in r.output_names]
            steps.append((r, list(r.input_names), list(r.output_names), m, expect))
            produced.update(r.output_names)
        self._stages = [(s, [n for n, last in last_use.items() if last == i and n not in keep])
                        for i, s in enumerate(stages)]
        # Graph outputs whose shape only the model declares (nothing computed it before the
        # run) and no partition reads: a hint, the caller gets what a backend that computes
        # shapes from the data returned, as from ONNX Runtime.  A tensor another partition
        # reads is a boundary, held to the shape that partition was built for; a computed
        # shape, or one a backend fixed when it was built (TVM), stays a check.
        hints = {t["name"] for t in self.manifest["model"]["outputs"]
                 if t.get("shape_from") == "declaration"}
        self._free_outputs = {n for n in (keep & hints) - set(last_use)}
        self._outputs_plain = not (keep & (set(self._constant_outputs()) | set(self.input_specs)))
        missing = [n for n in self.output_names if n not in produced]
        if missing:
            raise ProvmapError(f"graph output(s) {missing} are computed by no partition, are no "
                               "graph input and no stored constant; the artifact is incomplete")
        self._plan = steps
        return steps

    def _constant_outputs(self) -> dict[str, np.ndarray]:
        """Graph outputs the build computed once (nothing runs for them): manifest key
        "constant_outputs", tensor name -> .npy member."""
        if self._constants is None:
            out = {}
            for name, member in (self.manifest.get("constant_outputs") or {}).items():
                data = self.artifact.members.get(member)
                if data is None:
                    raise ProvmapError(f"constant output {name!r}: the artifact has no member "
                                       f"{member!r}")
                out[name] = np.load(io.BytesIO(data), allow_pickle=False)
            self._constants = out
        return self._constants

    def run(self, inputs: Mapping[str, np.ndarray], on_partition=None) -> dict[str, np.ndarray]:
        """Run the whole model.  `inputs` maps every graph input name to an array.

        `on_partition(module, inputs, outputs, seconds)` (dicts by ONNX tensor name) is called
        after each partition: what compare and profile hook into.
        """
        env = self._check_inputs(inputs)
        steps = self._compile_plan()
        for stage, drop in self._stages:
            if len(stage) == 1:
                done = [_call(steps[stage[0]], env)]
            else:
                done = self._run_stage([steps[k] for k in stage], env)
            for k, (results, args, dt) in zip(stage, done):
                _runner, ins, outs, m, expect = steps[k]
                # A backend handing back the wrong dtype or shape would silently poison the
                # next partition; the check costs well under a microsecond per tensor.
                for name, a, spec in zip(outs, results, expect):
                    if spec is not None and (a.dtype != spec[1] or not _shape_ok(a.shape, spec[0])):
                        if a.dtype == spec[1] and name in self._free_outputs and \
                                backend_class(m.backend).computes_shapes_at_run:
                            self._output_shape_differs(m, name, a, spec)
                            continue
                        raise ProvmapError(f"partition {m.id} ({m.backend}) returned {name!r} as "
                                           f"{a.dtype}{list(a.shape)}, expected "
                                           f"{spec[1]}{list(spec[0])}")
                env.update(zip(outs, results))
                if on_partition is not None:
                    on_partition(m, dict(zip(ins, args)), dict(zip(outs, results)), dt)
            for n in drop:
                env.pop(n, None)
        # Constants are copied: a caller writing into a returned array must not change what
        # the next run returns; nor an output that is a graph input, the caller's own array.
        if self._outputs_plain:  # every output computed by a partition: nothing to copy
            return {n: env[n] for n in self.output_names}
        consts = self._constant_outputs()
        return {n: consts[n].copy() if n in consts else
                np.array(env[n]) if n in self.input_specs else env[n] for n in self.output_names}

    def _output_shape_differs(self, m: "PartitionModule", name: str, a: np.ndarray,
                              spec: tuple) -> None:
        if name in self._warned:
            return
        self._warned.add(name)
        dims = ", ".join("?" if d is None else str(d) for d in spec[0])
        line = (f"graph output '{name}' is declared {spec[1]}[{dims}] but partition {m.id} "
                f"({m.backend}) returned {a.dtype}{list(a.shape)}; the returned shape is used "
                "(as ONNX Runtime does)")
        self.warnings.append(line)
        if self.on_warning is not None:
            self.on_warning(line)
        else:
            _warnings.warn(line, ProvmapWarning, stacklevel=3)

    def _run_stage(self, steps: list, env: dict) -> list:
        """The partitions of one stage at once.  Every one is joined before anything is raised,
        so a failure never leaves a partition running behind the error (or writing into arrays
        the caller gets back); the first failure in execution order is the one reported."""
        if self._pool is None:
            width = max(len(s) for s, _d in self._stages)
            self._pool = ThreadPoolExecutor(max_workers=width, thread_name_prefix="provmap-stage")
        futures = [self._pool.submit(_call, step, env) for step in steps]
        wait(futures)
        return [f.result() for f in futures]

    def check_inputs(self, inputs: Mapping[str, np.ndarray]) -> None:
        """Refuse inputs the model does not take (names, dtypes, shapes) without running."""
        self._check_inputs(inputs)

    def _check_inputs(self, inputs: Mapping[str, np.ndarray]) -> dict:
        return self.contract.check(inputs)

    def random_inputs(self, seed: int = 0, point: str = "opt") -> dict[str, np.ndarray]:
        """Seeded inputs of the right dtypes (at the profile's `point` for a dynamic artifact)."""
        return self.contract.random(seed, point)

    def close(self) -> None:
        """Release every loaded partition's native resources now (sessions, compiled models)
        instead of at garbage collection; a later run loads them again."""
        for m in self.partitions:
            if m._runner is not None:
                m._runner.close()
                m._runner = None
        self._plan = None
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def save(self, path) -> None:
        self.artifact.save(path)


def _call(step, env: dict) -> tuple:
    """(results, inputs, seconds) of one partition; its failure as one ProvmapError line."""
    runner, ins, _outs, m, _expect = step
    args = [env[n] for n in ins]
    try:
        t0 = time.perf_counter()
        key = native_stop.enter(getattr(runner, "cancel", None))  # Ctrl-C stops it within a second
        try:
            results = runner(args)
        finally:
            native_stop.leave(key)
        return results, args, time.perf_counter() - t0
    except BackendError as e:  # the backend's own words, said of its partition
        raise ProvmapError(f"partition {m.id} ({m.backend}): {e}") from None
    except ProvmapError:
        raise
    except Exception as e:
        first = next((ln for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
        raise ProvmapError(f"partition {m.id} ({m.backend}) failed: {first}") from None


def _loads_native_code(backend: str) -> bool:
    return _trust.loads_native_code(backend)


def load(path, runnable: bool = True, trust: bool = False, runners: bool = True
         ) -> ArtifactModule:
    """Load an artifact file.  Verifies every member first; loads partition code if `runnable`.

    `runnable=False` is for reading (inspect, lookup, explain): no partition code is ever loaded,
    and run() refuses.  Partitions that are native code (TVM libraries) load only from an
    artifact this machine built or was told to trust (`provmap trust`), or with `trust=True`.
    """
    mod = ArtifactModule(read_artifact(path, hash_later=runnable), str(path), runnable=runnable,
                         trust=trust)
    if runnable and runners:  # runners=False: the caller loads them (after checking inputs)
        mod.load_runners()
    return mod


def lookup(path, onnx_node=None, kernel=None, expr=None) -> dict:
    """One dispatch lookup on a saved artifact, exactly what `provmap lookup --json` prints.

    Give one of `onnx_node` (name or n... ID), `kernel` (p0:name or bare name) or `expr`
    (e... ID).  Reads only the manifest and the map: nothing from the artifact runs.  Nothing
    matching is a ProvmapError naming the artifact and the query."""
    asked = [(k, v) for k, v in (("onnx_node", onnx_node), ("kernel", kernel), ("expr", expr))
             if v is not None]
    if len(asked) != 1:
        raise ProvmapError(f"{path}: lookup needs exactly one of onnx_node, kernel, expr")
    lk = load(path, runnable=False).lookup
    if onnx_node is not None:
        res = lk.onnx_node(onnx_node)
        if not res:
            names = {n.name for n in lk.map.nodes if n.name} | set(lk.node_ids())
            raise ProvmapError(f"{path}: no ONNX node named or with ID {onnx_node!r}"
                               + did_you_mean(onnx_node, names))
        return {"query": {"onnx_node": onnx_node}, "results": res}
    if kernel is not None:
        res = lk.kernel(kernel)
        if not res:
            names = set(lk.kernel_names()) | {k.split(":", 1)[-1] for k in lk.kernel_names()}
            raise ProvmapError(f"{path}: no kernel {kernel!r}" + did_you_mean(kernel, names))
        return {"query": {"kernel": kernel}, "results": res}
    res = lk.expr(expr)
    if res is None:
        raise ProvmapError(f"{path}: no Relax expression {expr!r}")
    return {"query": {"expr": expr}, "results": [res]}
