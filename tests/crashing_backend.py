"""Misbehaving backends for tests/test_cost.py.

They live in a module of their own (not in the test file) so that the cost estimator's worker
process, a fresh interpreter, can import them by "crashing_backend:ClassName"; tests/ is on
sys.path there (pyproject's pytest `pythonpath`) because spawned processes inherit the parent's
sys.path.  Child processes started otherwise get tests/ on PYTHONPATH (test_parallel.py,
test_polygraphy.py).
"""

from __future__ import annotations

import os
import time

from provmap.runtime_module.backend import BackendError, Runner
from provmap.runtime_module.backends.onnxruntime import OnnxRuntimeBackend


class CrashingBackend(OnnxRuntimeBackend):
    """Dies like a segfaulting compiler: SIGABRT in the middle of build()."""

    name = "crashy"

    def build(self, sub):
        os.abort()


class FailingBackend(OnnxRuntimeBackend):
    """Refuses every subgraph with a BackendError, as a backend lacking a kernel would."""

    name = "failing"

    def build(self, sub):
        raise BackendError("failing: build failed: no kernel for anything\nsecond line")


class HangingBackend(OnnxRuntimeBackend):
    """Never finishes building (a compiler stuck in a loop), after writing a scratch file as
    the libraries do."""

    name = "hanging"

    def build(self, sub):
        import tempfile

        with open(os.path.join(tempfile.mkdtemp(prefix="provmap-hang-"), "x"), "wb") as f:
            f.write(b"scratch")
        time.sleep(3600)


class _Perturbed(Runner):
    def __init__(self, inner: Runner, delta: float):
        self.inner = inner
        self.delta = delta
        self.input_names = inner.input_names
        self.output_names = inner.output_names

    def __call__(self, inputs):
        return [o + self.delta for o in self.inner(inputs)]

    def close(self):
        self.inner.close()


class PerturbingBackend(OnnxRuntimeBackend):
    """ONNX Runtime with 0.1 added to every output: fast and wrong."""

    name = "perturbed"

    def load(self, blob):
        return _Perturbed(super().load(blob), 0.1)


class NodePerturbingBackend(OnnxRuntimeBackend):
    """ONNX Runtime, except that any subgraph containing the ONNX node named `TARGET` comes out
    0.5 off: a wrong kernel for one node, as bisect is meant to find."""

    name = "nodeperturbed"
    TARGET = ""

    def build(self, sub):
        blob = super().build(sub)
        names = {sub.view.nodes[i].name for i in sub.ops}
        blob.meta["perturb"] = type(self).TARGET in names
        return blob

    def load(self, blob):
        runner = super().load(blob)
        return _Perturbed(runner, 0.5) if blob.meta.get("perturb") else runner


class CrashingPrepareBackend(OnnxRuntimeBackend):
    """ONNX Runtime whose once-for-many `prepare` (a tuner, say) dies with SIGABRT."""

    name = "crashyprepare"

    def prepare(self, subs):
        os.abort()


class _FailingRun(Runner):
    def __init__(self, inner: Runner):
        self.inner = inner
        self.input_names = inner.input_names
        self.output_names = inner.output_names

    def __call__(self, inputs):
        raise RuntimeError("runfail: kernel faulted at run time\nsecond line")

    def close(self):
        self.inner.close()


class RunFailingBackend(OnnxRuntimeBackend):
    """Builds and loads like ONNX Runtime; every call of its partitions then fails, as a kernel
    faulting at run time would (the executor must report it and leave nothing running)."""

    name = "runfail"

    def load(self, blob):
        return _FailingRun(super().load(blob))


class _Recording(Runner):
    """Waits `delay` seconds (at a 2-party barrier first when `meet`), runs, records the call."""

    def __init__(self, inner: Runner, owner):
        self.inner = inner
        self.owner = owner
        self.input_names = inner.input_names
        self.output_names = inner.output_names

    def __call__(self, inputs):
        owner = self.owner
        if owner.MEET is not None and owner.MEET_INPUT in self.input_names:
            owner.MEET.wait(timeout=owner.MEET_TIMEOUT_S)  # BrokenBarrierError: nobody came
        time.sleep(owner.DELAY_S)
        out = self.inner(inputs)
        owner.FINISHED.append(tuple(self.output_names))
        return out

    def close(self):
        self.inner.close()


class SlowBackend(OnnxRuntimeBackend):
    """ONNX Runtime whose calls take DELAY_S longer and are recorded in FINISHED (shared by
    every recording backend).  With MEET set (a threading.Barrier), a partition reading
    MEET_INPUT first waits there for a partner: only partitions running at the same time meet,
    so a serial executor fails them with BrokenBarrierError after MEET_TIMEOUT_S."""

    name = "slowpoke"
    DELAY_S = 0.0
    FINISHED: list = []
    MEET = None
    MEET_INPUT = "x"
    MEET_TIMEOUT_S = 10.0

    def load(self, blob):
        return _Recording(super().load(blob), SlowBackend)


class SlowBackend2(SlowBackend):
    """A second name for SlowBackend, so greedy puts two branches on two partitions."""

    name = "slowpoke2"
