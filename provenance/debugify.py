"""A debugify-style checker: run passes, report every site or ID that lost provenance.

Like LLVM's -debugify-each: the point is to catch the pass that breaks the map, not to notice
at the end that some kernel maps to nothing.  A finding is one of
- "unmapped site": a call the pass created (or rewrote) that carries no expression ID;
- "lost ids": IDs that were on some site before the pass and are on none after it, although the
  value they computed is still used;
- "dropped ids" are reported too but are not failures: they were removed as dead code.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import tvm

from .importer import Imported
from .propagate import PassReport, ProvenanceTracker


@dataclass
class Finding:
    pass_name: str
    kind: str  # "unmapped site" | "lost ids"
    detail: str

    def __str__(self):
        return f"{self.pass_name}: {self.kind}: {self.detail}"


@dataclass
class DebugifyReport:
    reports: list[PassReport] = field(default_factory=list)

    @property
    def findings(self) -> list[Finding]:
        out = []
        for r in self.reports:
            for s in r.unmapped_sites:
                out.append(Finding(r.pass_name, "unmapped site", s))
            if r.lost_ids:
                out.append(Finding(r.pass_name, "lost ids", ", ".join(sorted(r.lost_ids)[:8])
                                   + (" ..." if len(r.lost_ids) > 8 else "")))
        return out

    @property
    def ok(self) -> bool:
        return not self.findings

    def summary(self) -> str:
        lines = [f"{r.pass_name}: sites {r.sites_before}->{r.sites_after}, "
                 f"{dict(r.matched)}, dropped {len(r.dropped_ids)}" for r in self.reports]
        lines += [str(f) for f in self.findings]
        return "\n".join(lines)


def check_passes(imported: Imported, passes, target=None, functions=("main",)):
    """Apply each pass in turn (debugify-each); return (final module, tracker, report).

    Nested passes a pass runs internally are tracked too (through a pass instrument), so a
    Sequential is checked step by step.
    """
    tracker = ProvenanceTracker(imported.mod, imported.var_expr, functions)
    mod = imported.mod
    ctx_target = target or tvm.target.Target({"kind": "llvm"})
    with ctx_target, tvm.transform.PassContext(opt_level=3, instruments=[tracker.instrument()]):
        for p in passes:
            mod = p(mod)
            if tracker.tracks(mod) and tracker.changed(mod):  # a pass the instrument did not see
                tracker.update(mod, p.info.name)
    return mod, tracker, DebugifyReport(list(tracker.reports))


def check_build(imported: Imported, target=None):
    """The whole default CPU build, checked pass by pass, plus the bytecode join."""
    from .build import compile_tvm

    build = compile_tvm(imported, target)
    return build, DebugifyReport(list(build.tracker.reports))
