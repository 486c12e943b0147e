"""A bench record: one run of one step, as OUT/<step>/<host>.json (what later runs, tests and
the docs read) and OUT/<step>/<host>.md (what a reader reads), written together and atomically.

Why one path per step and host, with neither a date nor a variant in the name: bench/out had
grown to 133 files, many dated variants of one measurement (container_2026-11-27 ... -28h), and
a README row cited six of them.  The tree now keeps a step's latest run on each host; every
earlier run is the same path in git history (`git log -p -- bench/out/<step>/<host>.md`), so a
citation names a file that exists, or an older one `@ <commit>`.  The date, host and versions
travel inside the record (its "record" block and the markdown's last line), not in its name.

Why the host in the path: numbers from two machines are not one series (the AVX2 and AVX-512
guests ranked ONNX Runtime and OpenVINO differently), so a run on one must not replace the
other's.  The host slug is short and stable (CPU family, ISA class, core count): never a
hostname or a kernel build, which change between two boots of the same guest.

Why atomically: some steps write after each model of a run that lasts hours: a record
half-written by an interrupted run, or a .md that disagrees with its .json, would be a result
nobody measured."""

from __future__ import annotations

import json
import os
import platform
import re
import sys
import time
from pathlib import Path

#: Where records go when a step is given no -o: the checkout's bench/out (run from its root).
DEFAULT_ROOT = "bench/out"

#: CPU feature flag -> ISA class, widest first: what decides which kernels the libraries run.
_ISA = (("avx512f", "avx512"), ("avx2", "avx2"), ("sve", "sve"), ("asimd", "neon"),
        ("neon", "neon"))


def host_slug(cpu_model: str | None = None, flags=None, cpus: int | None = None,
              machine: str | None = None) -> str:
    """This machine's name in record paths, e.g. `amd-epyc-avx512-2cpu`: the CPU model's first
    words, its widest vector ISA and its core count (each argument given overrides what this
    machine says, for naming a record measured elsewhere)."""
    from provmap.runtime_module.host import _cpu_model, cpu_flags

    model = _cpu_model() if cpu_model is None else cpu_model
    flags = cpu_flags() if flags is None else flags
    cpus = os.cpu_count() if cpus is None else cpus
    machine = (machine or platform.machine() or "cpu").lower()
    text = re.sub(r"\((r|tm)\)|@.*|\b(cpu|processor|unknown|\d+-core)\b", " ", model.lower())
    words = re.findall(r"[a-z0-9]+", text)[:4] or [re.sub(r"[^a-z0-9_]+", "-", machine)]
    isa = next((name for flag, name in _ISA if flag in flags), None)
    return "-".join([*words, *([isa] if isa else []), f"{cpus}cpu"])


def record_stem(step: str, out: str | os.PathLike | None = None) -> Path:
    """Where STEP's record goes, without suffix: OUT/<step>/<host-slug>, OUT being bench/out
    unless given.  An OUT ending in .json names the record's own file (the -o FILE some steps
    took before records had one place), kept so an old command line still writes where it
    says."""
    if out is not None and str(out).endswith(".json"):
        return Path(out).with_suffix("")
    return Path(DEFAULT_ROOT if out is None else out) / step / host_slug()


def check_output(out: str | os.PathLike | None) -> None:
    """Refuse, before any measuring, an -o no record could be written under: a file where the
    root directory is meant, or a root (or .json file) whose directory does not exist (a typo
    would otherwise create directories, or lose an hour's run at its end).  ProvmapError."""
    from provmap.provenance.util.errors import ProvmapError

    given = Path(DEFAULT_ROOT if out is None else out)
    if str(given).endswith(".json"):
        if given.is_dir():
            raise ProvmapError(f"-o {given}: is a directory; give the records' root, or a "
                               ".json file")
    elif given.exists() and not given.is_dir():
        raise ProvmapError(f"-o {given}: not a directory (the records' root)")
    if not given.parent.is_dir():
        hint = " (the default: run from the checkout, or give -o)" if out is None or \
            str(out) == DEFAULT_ROOT else ""
        raise ProvmapError(f"-o {given}: directory {given.parent} does not exist{hint}")


def versions() -> dict:
    """Python and the libraries a bench number depends on (None: not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": sys.version.split()[0]}
    for dist, key in (("provmap", "provmap"), ("apache-tvm", "tvm"),
                      ("onnxruntime", "onnxruntime"), ("openvino", "openvino"), ("onnx", "onnx"),
                      ("numpy", "numpy")):
        try:
            out[key] = version(dist)
        except PackageNotFoundError:
            out[key] = None
    return out


def stamp(step: str) -> dict:
    """What every record says of its run, whatever the step's own keys: the step, the host (slug,
    CPU model, cores, machine), when it was written (UTC) and the versions."""
    from provmap.runtime_module.host import _cpu_model

    return {"step": step, "host": host_slug(), "cpu_model": _cpu_model(),
            "cpus": os.cpu_count(), "machine": platform.machine(),
            "written": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "versions": versions()}


def footer(rec: dict) -> str:
    """The markdown's last line: the same facts as the JSON's record block, for a reader."""
    v = rec["versions"]
    libs = ", ".join(f"{k} {v[k]}" for k in ("provmap", "onnxruntime", "openvino", "tvm")
                     if v.get(k))
    return (f"\n---\nRecord of `provmap bench {rec['step']}` on {rec['host']} "
            f"({rec['cpu_model']}, {rec['cpus']} CPUs), written {rec['written']}; {libs}. "
            "Earlier runs of this step on this host: this file's git history.\n")


def write_record(step: str, out: str | os.PathLike | None, data: dict, text: str) -> Path:
    """Write STEP's record (see record_stem) from the step's results and markdown, each
    atomically, with the record block first in the JSON and the footer last in the markdown;
    returns the .md's path.  A step that writes after every model calls this each time: the
    record on disk is always a whole one."""
    from provmap.provenance.util.atomic import write_bytes_atomic

    stem = record_stem(step, out)
    rec = stamp(step)
    body = {"record": rec, **{k: v for k, v in data.items() if k != "record"}}
    write_bytes_atomic(stem.with_suffix(".json"),
                       json.dumps(body, indent=1, default=str).encode())
    md = stem.with_suffix(".md")
    write_bytes_atomic(md, (text.rstrip("\n") + "\n" + footer(rec)).encode())
    return md
