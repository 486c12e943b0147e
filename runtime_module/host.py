"""Which machine this is, for keys that must not mix hosts: measured prices (the cost cache)
and MetaSchedule tuning records (the TVM backend's tuning database) are only valid on the CPU
they were taken on."""

from __future__ import annotations

import hashlib
import os
import platform
import sys

def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown-cpu"


def cpu_flags() -> frozenset[str]:
    """The first processor's feature flags from /proc/cpuinfo (empty where there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith(("flags", "features")):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def int8_pairs_exact() -> bool:
    """Whether uint8 x int8 dot products are exact here: an x86 CPU needs VNNI, without it ORT's
    and OpenVINO's int8 kernels saturate int16 pair sums (provenance/int8_pairs.py)."""
    if platform.machine().lower() not in ("x86_64", "amd64", "i686", "x86"):
        return True
    return bool(cpu_flags() & {"avx512_vnni", "avx_vnni", "amx_int8"})


_HOST: str | None = None


def host_fingerprint() -> str:
    """Short hash of CPU model, core count and machine type (library versions are keyed apart,
    through `Backend.version()`)."""
    global _HOST
    if _HOST is None:
        text = f"{_cpu_model()}|{os.cpu_count()}|{platform.machine()}"
        _HOST = hashlib.blake2b(text.encode(), digest_size=6).hexdigest()
    return _HOST


def host_info() -> dict:
    return {"platform": platform.platform(), "machine": platform.machine(),
            "processor": platform.processor(), "cpus": os.cpu_count(),
            "python": sys.version.split()[0]}


def provmap_version() -> str:
    try:
        from importlib.metadata import version
        return version("provmap")
    except Exception:
        return "unknown"
