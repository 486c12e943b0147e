"""The one interface every backend implements, for measuring candidates and for running artifacts.

A backend is asked four things, always through this interface, so that what the partition search
measures is exactly what an artifact later runs (one code path, no "benchmark mode"):

1. `supports(view)`: which ONNX nodes it can take, with a reason for each one it cannot.
2. `build(sub)`: turn a `Subgraph` (the exact original ONNX nodes and initializers, and the same
   region as outlined Relax bindings) into a `Blob`: plain bytes a fresh process can load, plus the
   kernels the backend produced and which of the subgraph's nodes each kernel implements.
3. `load(blob)`: a `Runner` that executes the blob on numpy arrays.
4. `time(runner, inputs)`: warm-up, repeats, median and spread.

Third-party backends register a factory under the `provmap.backends` entry-point group (see
docs/backends.md); provmap never needs editing to add one.
"""

from __future__ import annotations

import statistics
import time as _time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

import numpy as np

from provmap.provenance.util import native_stop
from provmap.provenance.util.errors import ProvmapError

from .options import Option, canonical

if TYPE_CHECKING:  # pragma: no cover
    from .graph_view import GraphView
    from .subgraph import Subgraph

ENTRY_POINT_GROUP = "provmap.backends"


@dataclass(frozen=True)
class Support:
    ok: bool
    reason: str = ""


@dataclass
class KernelInfo:
    """One kernel (or kernel call site) a backend produced for a subgraph.

    `nodes` are positions in `Subgraph.closure` (the subgraph's ONNX nodes, in the order of the
    cut ONNX model); backends that consume Relax may give `exprs` (Relax expression IDs) instead,
    which is finer.  `kind` is free text such as "primfunc", "ort-node", "ov-layer".
    """

    name: str
    kind: str
    nodes: list[int] = field(default_factory=list)
    exprs: list[str] = field(default_factory=list)
    op: str = ""  # the kernel's operator/type as the backend names it (e.g. "FusedConv")


@dataclass
class Blob:
    """A built subgraph: everything needed to run it again in another process.

    `files` are the members stored in the artifact (names are relative, e.g. "model.onnx",
    "lib.so"); `meta` is small JSON (backend version, precision, input/output names); `source` is
    human-readable code for offline reading (Relax/TIR text, or a summary of the ONNX graph).
    """

    backend: str
    files: dict[str, bytes]
    meta: dict
    kernels: list[KernelInfo] = field(default_factory=list)
    source: str = ""


class Runner(ABC):
    """A loaded subgraph.  Inputs and outputs are numpy arrays, in `input_names`/`output_names` order.

    `input_names` may be a subset of the subgraph's ONNX inputs: a Relax-consuming backend does
    not need a tensor whose only use was folded away (e.g. a Shape of it).
    """

    input_names: list[str]
    output_names: list[str]

    @abstractmethod
    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        ...

    def cancel(self) -> None:
        """Stop a call running now in another thread, if the library can (optional; called by
        provenance/util/native_stop.py on Ctrl-C).  A call the library does not stop is ended
        with the process, one second later."""

    def close(self) -> None:  # release native resources early (optional)
        pass


@dataclass
class Timing:
    median_s: float
    p90_s: float
    min_s: float
    max_s: float
    repeats: int
    warmup: int
    samples_s: list[float] = field(default_factory=list)

    @property
    def spread(self) -> float:
        """(p90 - min) / median: how noisy the measurement was."""
        return (self.p90_s - self.min_s) / self.median_s if self.median_s else 0.0

    def to_dict(self) -> dict:
        return {"median_s": self.median_s, "p90_s": self.p90_s, "min_s": self.min_s,
                "max_s": self.max_s, "repeats": self.repeats, "warmup": self.warmup,
                "spread": self.spread}


def percentile(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def time_runner(runner: Runner, inputs: Sequence[np.ndarray], warmup: int = 2, repeats: int = 10,
                min_time_s: float = 0.0) -> Timing:
    """Median-of-repeats wall time of `runner(inputs)`, after warm-up calls.

    `min_time_s` keeps repeating (beyond `repeats`) until that much time has been spent, so tiny
    subgraphs get enough samples to be stable without making big ones slow to measure.
    Ctrl-C stops a call as it stops a run's (native_stop: the runner's cancel, else the exit).
    """
    key = native_stop.enter(getattr(runner, "cancel", None))
    try:
        for _ in range(warmup):
            runner(inputs)
        samples = []
        start = _time.perf_counter()
        while len(samples) < repeats or (_time.perf_counter() - start) < min_time_s:
            t0 = _time.perf_counter()
            runner(inputs)
            samples.append(_time.perf_counter() - t0)
            if len(samples) >= 10_000:
                break
    finally:
        native_stop.leave(key)
    return Timing(median_s=statistics.median(samples), p90_s=percentile(samples, 0.9),
                  min_s=min(samples), max_s=max(samples), repeats=len(samples), warmup=warmup,
                  samples_s=samples)


_COMMON_SPECS = (
    Option("only_ops", "ops", "run only these ONNX op types on this backend"),
    Option("exclude_ops", "ops", "never run these ONNX op types on this backend"),
)


class Backend(ABC):
    """Base class of every backend.  Subclasses set `name` and implement the abstract methods.

    Options (e.g. precision) are constructor keywords; `options()` must return them as JSON so an
    artifact records exactly how each partition was built.  The model's own precision is the
    default everywhere: reduced precision is only ever an explicit option.
    """

    name: str = ""

    #: Whether `load` runs code that came from the blob (a shared library): such partitions only
    #: load from trusted artifacts (provmap.runtime_module.trust).  True unless a backend's blobs are
    #: data its own library parses (an ONNX model, an OpenVINO IR).
    loads_native_code: bool = True

    #: Whether a runner's outputs take the shapes the backend computes from the data at run
    #: time (ONNX Runtime, OpenVINO), not ones fixed when it was built (TVM).  Only then may
    #: a graph output whose declared shape is a hint come back in another shape (module.py):
    #: a build-time shape that contradicts the declaration is more likely a wrong lowering.
    computes_shapes_at_run: bool = False

    #: Whether `build` reads the region as Relax (`Subgraph.relax_function`).  False for
    #: backends that only read the cut ONNX model (`onnx_model`, `inputs`, `outputs`, `key`,
    #: `closure`): the measuring worker then hands them an `OnnxRegion` and skips re-importing
    #: each candidate into Relax.  True by default, which is always correct, only slower.
    needs_relax: bool = True

    #: Options every backend accepts: restrict it to (or keep it off) some ONNX op types, as a
    #: vendor does for an accelerator that only handles convolutions.  Comma-separated strings
    #: (from the CLI) or lists.
    COMMON_OPTIONS = ("only_ops", "exclude_ops")

    def __init__(self, **options):
        for k in self.COMMON_OPTIONS:
            if isinstance(options.get(k), str):
                options[k] = [x.strip() for x in options[k].split(",") if x.strip()]
        known = set(self.option_names()) | set(self.COMMON_OPTIONS)
        unknown = set(options) - known
        if unknown:
            raise BackendError(f"backend {self.name!r}: unknown option(s) {sorted(unknown)}; "
                               f"known: {sorted(known)}")
        for k, v in options.items():
            why = self.option_problem(k, v)
            if why:
                raise BackendError(f"backend {self.name!r}: option {k}={v!r}: expected {why}")
        specs = self.option_specs()
        self._options = {k: canonical(specs.get(k), v) for k, v in options.items()}

    #: The options this backend declares, with types and ranges (runtime_module/options.py),
    #: checked by __init__.  A plugin may override `option_names` instead: its values are then
    #: its own to check.
    OPTIONS: Sequence[Option] = ()

    @classmethod
    def option_names(cls) -> Sequence[str]:
        return tuple(o.name for o in cls.OPTIONS)

    @classmethod
    def option_specs(cls) -> dict[str, Option]:
        specs = {o.name: o for o in _COMMON_SPECS}
        specs.update({o.name: o for o in cls.OPTIONS})
        return specs

    def build_notes(self, sub: "Subgraph") -> list[str]:
        """Lines compile prints for a partition this backend builds: what it will compute
        otherwise than the model says in cases no check can see at build time (OpenVINO's
        int64 arithmetic in 32 bits).  None by default."""
        return []

    @classmethod
    def combination_problem(cls, options: dict) -> tuple[str, str] | None:
        """(option, why) for an option that acts only beside another one `options` lack (TVM's
        trials without tune=metaschedule did nothing, and the label said tvm[trials=5]), else
        None."""
        return None

    @classmethod
    def model_variants(cls, view: "GraphView") -> list[str]:
        """Option settings ("OPTION=VALUE") worth trying as whole-model variants on the model
        because of what it holds, beside the ones tried on every model (a thread count): a
        user of this library would set them for such a model.  None by default."""
        return []

    @classmethod
    def host_problem(cls, options: dict) -> str | None:
        """None when this machine can honour `options` as given, else why not (e.g. a
        precision the CPU lacks, which a library would replace without a word)."""
        return None

    @classmethod
    def option_problem(cls, name: str, value) -> str | None:
        """None when `value` suits option `name`, else what the option expects."""
        spec = cls.option_specs().get(name)
        return spec.problem(value) if spec is not None else None

    def options(self) -> dict:
        return dict(self._options)

    @classmethod
    def takes_threads(cls) -> bool:
        """Whether a schedule's per-partition thread count (runtime_module/schedule.py) reaches
        this backend: through its `threads` option (ONNX Runtime, OpenVINO), or through its
        runner's `set_threads(n)` (TVM: not an option, so the end-to-end check's thread variants
        still skip it).  A backend that takes neither keeps its own threads."""
        return "threads" in cls.option_names()

    #: Options that change no measured price (e.g. where a tuning database lives): left out of
    #: the cost cache's keys, so moving the directory does not throw prices away.
    UNPRICED_OPTIONS: Sequence[str] = ()

    def priced_options(self) -> dict:
        return {k: v for k, v in self._options.items() if k not in self.UNPRICED_OPTIONS}

    @abstractmethod
    def version(self) -> str:
        """Version of the underlying library (part of measurement-cache keys)."""

    @abstractmethod
    def supports(self, view: "GraphView") -> dict[int, Support]:
        """Support verdict for every node index of `view.model.graph` this backend would compute."""

    def verdicts(self, view: "GraphView") -> dict[int, Support]:
        """`supports`, narrowed by the only_ops/exclude_ops options.  Strategies call this."""
        out = dict(self.supports(view))
        only = set(self._options.get("only_ops") or ())
        excl = set(self._options.get("exclude_ops") or ())
        if not (only or excl):
            return out
        for i in list(out):
            op = view.nodes[i].op_type
            if out[i].ok and only and op not in only:
                out[i] = Support(False, f"{op} is not in this backend's only_ops option")
            elif out[i].ok and op in excl:
                out[i] = Support(False, f"{op} is excluded by this backend's exclude_ops option")
        return out

    @abstractmethod
    def build(self, sub: "Subgraph") -> Blob:
        """Compile `sub`.  Raise `BackendError` (with the reason) if it cannot."""

    def prepare(self, subs: Sequence["Subgraph"]) -> dict:
        """Work worth doing once for many regions before any of them is built: a search calls
        it with every candidate region of this backend it is about to price.  TVM under
        tune=metaschedule tunes the distinct tasks of all of them in one MetaSchedule session
        (the regions overlap, so most share their workloads).  Returns a report ({} when there
        was nothing to do); raising costs the search nothing but the time, since `build` must
        work without it."""
        return {}

    @abstractmethod
    def load(self, blob: Blob) -> Runner:
        """Load a blob produced by `build` (possibly in another process, from stored files)."""

    def time(self, runner: Runner, inputs: Sequence[np.ndarray], warmup: int = 2,
             repeats: int = 10, min_time_s: float = 0.0) -> Timing:
        return time_runner(runner, inputs, warmup, repeats, min_time_s)

    def profile_kernels(self, blob: Blob, inputs: Sequence[np.ndarray],
                        repeats: int = 10) -> dict[str, float] | None:
        """Seconds per call of each kernel (names as in `blob.kernels`), from the backend's own
        profiler, or None if it has none (callers then split a partition's time evenly and
        say so).  Loads its own profiling instance of the blob; inputs in runner order.  Time
        the profiler reported for work it could not pair with a kernel goes under
        `PROFILED_UNMATCHED`, so that callers count it as unattributed instead of never
        seeing it; `PROFILED_WALL`, if given, is the wall time per call of those same calls."""
        return None

    def describe(self) -> dict:
        return {"name": self.name, "version": self.version(), "options": self.options()}


#: Key of `Backend.profile_kernels`' answer for profiled time that no kernel of the blob owns.
PROFILED_UNMATCHED = "(profiled, not a kernel of the blob)"
#: Key of the profiled calls' own time per call: their kernels' time plus the library's per-call
#: time, which is `own_time`'s smallest gap between a call's wall time and its kernels.  The
#: share of it the kernels cover is their share of a partition's time.  Why a ratio within one
#: set of calls: it holds when the machine's load changes between the partition's timing and
#: the profiling (on a shared 2-core host, ResNet-50 on OpenVINO measured 212 ms a call in one
#: and 88 ms of kernels in the other, which left 58% of its time "outside kernels").
PROFILED_WALL = "(time per profiled call)"


def own_time(walls: Sequence[float], kernels: Sequence[float]) -> float:
    """Mean kernel time per call plus the smallest (wall - kernels) gap of any call.

    Why the smallest: a call's gap is the library's own work (dispatch, copies) plus whatever
    the machine's other processes took from it between kernels.  The quietest call shows the
    library's own cost best; the rest of a gap is contention, which lands between kernels or
    inside them by chance, and goes with the kernels in proportion (Inception-v1 on OpenVINO
    beside five other jobs: 26% of its time between layers in one profile, 0% in the next).
    """
    gap = min(max(0.0, w - k) for w, k in zip(walls, kernels))
    return sum(kernels) / len(kernels) + gap


class BackendError(ProvmapError):
    """A backend could not build, load or run a subgraph; the message says which and why."""
