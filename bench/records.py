"""A bench record on disk: NAME.json (what later runs and README read) and NAME.md (what a
reader reads), written together and atomically.  One helper because every bench writes both,
some after each model of a run that lasts hours: a record half-written by an interrupted run,
or a .md that disagrees with its .json, would be a result nobody measured."""

from __future__ import annotations

import json
from pathlib import Path


def write_record(out: Path, name: str, data: dict, text: str) -> Path:
    """Write OUT/NAME.json and OUT/NAME.md (each atomically); returns the .md's path."""
    from provmap.provenance.util.atomic import write_bytes_atomic

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(out / f"{name}.json", json.dumps(data, indent=1).encode())
    write_bytes_atomic(out / f"{name}.md", text.encode())
    return out / f"{name}.md"
