"""What this CPU really has (runtime_module/host.py), and the TVM target built from it."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import relax as R

from provmap.runtime_module import host
from provmap.runtime_module.backends import tvm_tuning


def test_native_target_turns_off_what_the_cpu_hides(monkeypatch):
    """A VM guest may report a Zen 4's family and model (LLVM: znver4, AVX-512) with the AVX-512
    flags masked: -mcpu=znver4 alone then builds code that dies with SIGILL (issue 32, measured
    in MetaSchedule's runner on a 2-core AMD EPYC)."""
    avx2_only = frozenset({"sse2", "avx", "avx2", "fma"})
    monkeypatch.setattr(host, "cpu_flags", lambda: avx2_only)
    assert "-avx512f" in tvm_tuning.hidden_features() and "-avx2" not in \
        tvm_tuning.hidden_features()
    everything = avx2_only | {"avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni",
                              "amx_tile"}
    monkeypatch.setattr(host, "cpu_flags", lambda: everything)
    assert tvm_tuning.hidden_features() == []
    monkeypatch.setattr(host, "cpu_flags", lambda: frozenset())  # no /proc/cpuinfo flags line
    assert tvm_tuning.hidden_features() == []


def test_code_built_for_this_native_cpu_runs_here():
    target = tvm_tuning.make_target("native")
    flags = host.cpu_flags()
    if "sse2" in flags and "avx512f" not in flags:
        assert "-avx512f" in [str(a) for a in target.attrs.get("mattr", [])]

    @tvm.script.ir_module
    class Mod:
        @R.function
        def main(x: R.Tensor((64, 64), "float32"), w: R.Tensor((64, 64), "float32")):
            return R.nn.relu(R.matmul(x, w))

    ex = tvm.compile(Mod, target=target)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    rng = np.random.default_rng(0)
    x, w = (rng.standard_normal((64, 64)).astype(np.float32) for _ in range(2))
    got = vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(w)).numpy()
    np.testing.assert_allclose(got, np.maximum(x @ w, 0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("machine,flags,exact", [
    ("x86_64", {"avx2"}, False), ("x86_64", {"avx2", "avx512_vnni"}, True),
    ("x86_64", {"avx2", "avx_vnni"}, True), ("aarch64", set(), True)])
def test_int8_pairs_are_exact_only_with_vnni_on_x86(monkeypatch, machine, flags, exact):
    monkeypatch.setattr(host.platform, "machine", lambda: machine)
    monkeypatch.setattr(host, "cpu_flags", lambda: frozenset(flags))
    assert host.int8_pairs_exact() is exact
