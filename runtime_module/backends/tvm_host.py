"""Whether this CPU can run code built for a TVM target (issue 36).

`--backend-option tvm.mcpu=skylake-avx512` on a host without AVX-512 compiled, and `run` then
died with "Illegal instruction" (exit 132): no message, no artifact named.  LLVM knows which
features a target's CPU name (and `-mattr`) switches on; /proc/cpuinfo knows which this CPU
has.  The instruction-set features below are the ones whose absence kills a process; the
others LLVM lists (tuning hints such as `fast-gather`) change no instruction a CPU lacks."""

from __future__ import annotations

import json

#: LLVM feature -> /proc/cpuinfo flag, for the x86 instruction-set extensions code generation
#: may use.  A feature not in this table is never called missing.
_X86_FEATURES = {
    "sse3": "pni", "ssse3": "ssse3", "sse4.1": "sse4_1", "sse4.2": "sse4_2", "popcnt": "popcnt",
    "avx": "avx", "avx2": "avx2", "fma": "fma", "f16c": "f16c", "bmi": "bmi1", "bmi2": "bmi2",
    "lzcnt": "abm", "movbe": "movbe", "avx512f": "avx512f", "avx512bw": "avx512bw",
    "avx512cd": "avx512cd", "avx512dq": "avx512dq", "avx512vl": "avx512vl",
    "avx512vnni": "avx512_vnni", "avx512bf16": "avx512_bf16", "avx512fp16": "avx512_fp16",
    "avx512vbmi": "avx512vbmi", "avx512ifma": "avx512ifma", "avxvnni": "avx_vnni",
    "amx-tile": "amx_tile", "amx-int8": "amx_int8", "amx-bf16": "amx_bf16",
}


def _host_flags() -> frozenset[str] | None:
    """This CPU's flags, or None where /proc/cpuinfo is not an x86 one (nothing to compare)."""
    from ..host import cpu_flags

    flags = cpu_flags()
    return flags if "sse2" in flags else None


def missing_features(target) -> list[str]:
    """The instruction-set features `target` (a tvm Target, its JSON text or a dict) lets LLVM
    use that this CPU lacks, sorted; [] when it can run here or nothing can be told."""
    flags = _host_flags()
    if flags is None:
        return []
    import tvm
    from tvm.target import codegen

    try:
        if isinstance(target, str):
            target = json.loads(target)
        if not isinstance(target, tvm.target.Target):
            target = tvm.target.Target(target)
        if str(target.kind.name) != "llvm":
            return []
        features = {str(f) for f in codegen.llvm_get_cpu_features(target)}
    except Exception:  # noqa: BLE001 - a target LLVM cannot read: its load says so
        return []
    return sorted(f for f in features if f in _X86_FEATURES and _X86_FEATURES[f] not in flags)


def refuse_foreign_cpu(meta: dict) -> None:
    """BackendError naming what a partition's recorded target needs that this CPU lacks; to be
    asked before its library is loaded, since such code dies with SIGILL (exit 132, no message)
    at its first kernel, whichever command ran it."""
    from ..backend import BackendError

    missing = missing_features(meta.get("target") or "")
    if not missing:
        return
    try:
        t = json.loads(meta.get("target") or "{}")
    except ValueError:
        t = {}
    cpu = t.get("mcpu") if isinstance(t, dict) else None
    raise BackendError(f"tvm: the partition's code was built for "
                       f"{f'mcpu={cpu}' if cpu else 'another CPU'} and needs "
                       f"{', '.join(missing)}, which this CPU lacks; rebuild it here (without "
                       "tvm.mcpu, or tvm.mcpu=native)")
