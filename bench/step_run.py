"""The command-line frame shared by the bench's model steps (limit, container, hog_compile).

Why one frame: each step names its models the same way (ONNX files, bundled: names, or the
user-sized models exported once), checks its output directory before any measuring, stamps the
same date/host/load/versions header, and writes its record (records.py: OUT/<step>/<host>.json
and .md) only when every model has been measured.  Keeping that in one place means a fix to
any of it (an output check, a refused model) reaches every step.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Callable


def step_parser(prog: str, doc: str, output_help: str = "") -> argparse.ArgumentParser:
    """PROG's options (PROG: the step's module); OUTPUT_HELP is no longer used: every step's -o
    is the records' root (kept in the signature for the steps that pass it)."""
    from .steps import parser

    ap = parser(prog, doc)
    ap.add_argument("models", nargs="*", help="ONNX files or bundled: names")
    ap.add_argument("--user-models", help="comma-separated user-sized models (exported once)")
    ap.add_argument("--models-dir", help="where the user-sized models are (or go)")
    return ap


def header(res: dict, title: str, prog: str) -> list[str]:
    """The markdown's first lines: the title with the date, then host, load and versions."""
    from .steps import command

    h = res["host"]
    return [f"# {title}, {res['date']}", "",
            f"Host: {h.get('cpu_model')} ({h.get('machine')}, {h.get('cpus')} CPUs), load at "
            f"start {res['load_at_start']}, at end {res['load_at_end']}; "
            f"`{command(prog)}`; "
            + ", ".join(f"{k} {v}" for k, v in res["versions"].items()) + ".", ""]


def run_step(prog: str, a: argparse.Namespace, key: str, measure: Callable,
             markdown: Callable, step: str, check: Callable | None = None,
             extra: dict | None = None) -> int:
    """Resolve the models, call `measure(specs, say)` for res[key], write STEP's record."""
    from provmap.provenance.bundled import zoo
    from provmap.provenance.util.errors import ProvmapError
    from provmap.runtime_module.host import host_info
    from provmap.runtime_module.host import _cpu_model

    from .records import versions, write_record
    from .user_bench import prepare

    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    try:
        if check is not None:
            check(a)
        specs = list(a.models)
        if a.user_models:
            specs += prepare([n for n in a.user_models.split(",") if n],
                             Path(a.models_dir) if a.models_dir else None, progress=say)
        if not specs:
            raise ProvmapError("no model: name ONNX files or --user-models")
        for spec in specs:  # every model resolves before anything is measured or written
            zoo.resolve(spec if spec.startswith("bundled:") or os.path.exists(spec)
                        else f"bundled:{spec}")
        res = {"date": time.strftime("%Y-%m-%d"), "started": time.strftime("%H:%M:%S"),
               "host": {**host_info(), "cpu_model": _cpu_model()},
               "load_at_start": [round(x, 2) for x in os.getloadavg()],
               "versions": versions(), **(extra or {})}
        res[key] = measure(specs, say)
        res["load_at_end"] = [round(x, 2) for x in os.getloadavg()]
        written = write_record(step, a.output, res, markdown(res))
    except ProvmapError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    print(written)
    return 0
