"""Misbehaving backends for tests/test_cost.py.

They live in a module of their own (not in the test file) so that the cost estimator's worker
process, a fresh interpreter, can import them by "crashing_backend:ClassName"; tests/ is on
sys.path there because spawned processes inherit the parent's sys.path.
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
    """Never finishes building (a compiler stuck in a loop)."""

    name = "hanging"

    def build(self, sub):
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
