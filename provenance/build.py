"""The all-TVM CPU build with provenance: import, compile under tracking, join with bytecode.

We compile with the CPU backend's own default Relax pipeline (LegalizeOps, FoldConstant, FuseOps,
FuseTIR, ... : tvm.relax.backend.cpu_generic), passed explicitly because tvm.compile's "default"
string on llvm picks a pipeline without fusion.  Tracking rides along as a pass instrument, so
the passes that run are exactly the ones a plain build runs.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

import tvm
from tvm import relax

from . import weights
from .util.errors import ProvmapError
from .importer import Imported
from .model import ROLE_COMPUTE, ROLE_CONSTANT, Kernel, KernelSite, ProvenanceMap, mark_vm_evaluated
from .relax_keys import PLUMBING_PACKED
from .propagate import ProvenanceTracker
from .shapes import failure_hint

_FUNC_RE = re.compile(r"^@(\S+):\s*$")
_CALL_RE = re.compile(r"^\s+call\s+(\S+)\s+in:")


def cpu_target() -> tvm.target.Target:
    # TVM 0.27 rejects "llvm -mcpu=..." strings; the dict form is the supported spelling.
    return tvm.target.Target({"kind": "llvm"})


def cpu_pipeline(target):
    return relax.backend.cpu_generic.get_default_pipeline(target)


def bytecode_calls(ex, skip=frozenset()) -> dict[str, list[str]]:
    """Kernel calls per VM function, in execution order, read from the executable's bytecode.

    `skip`: more plumbing callees than PLUMBING_PACKED (the build's shape functions)."""
    calls: dict[str, list[str]] = defaultdict(list)
    fn = None
    for line in ex.as_text().splitlines():
        m = _FUNC_RE.match(line)
        if m:
            fn = m.group(1)
            continue
        m = _CALL_RE.match(line)
        if m and fn is not None and m.group(1) not in PLUMBING_PACKED and m.group(1) not in skip:
            calls[fn].append(m.group(1))
    return dict(calls)


class JoinError(RuntimeError):
    """The IR's kernel calls and the bytecode's disagree: provenance cannot be trusted."""


class BuildFailed(ProvmapError):
    """tvm.compile raised: `where` is the pass it raised in ("code generation" after the
    Relax pipeline), `detail` the first line of TVM's error (provmap.provenance.salvage reads
    both to decide which nodes TVM cannot build)."""

    def __init__(self, label: str, where: str, detail: str, hint: str = ""):
        super().__init__(f"{label}: TVM build failed: {detail}{hint}")
        self.where, self.detail = where, detail


@tvm.instrument.pass_instrument
class _PassStack:
    """The passes running right now, innermost last: where a failing build raised."""

    def __init__(self):
        self.stack: list[str] = []

    def run_before_pass(self, mod, info):
        self.stack.append(info.name)

    def run_after_pass(self, mod, info):
        self.stack.pop()

    def where(self) -> str:
        # Wrappers (the pipeline's module pass, Sequential) name no step of the build.
        inner = [p for p in self.stack if p not in ("_pipeline", "sequential")]
        return inner[-1] if inner else "code generation"


@dataclass
class Build:
    executable: object
    pmap: ProvenanceMap
    tracker: ProvenanceTracker | None
    mod: tvm.IRModule


def compile_tvm(imported: Imported, target=None, track: bool = True) -> Build:
    target = target or cpu_target()
    tracker = ProvenanceTracker(imported.mod, imported.var_expr) if track else None
    passes = _PassStack()
    instruments = [passes] + ([tracker.instrument()] if tracker else [])
    try:
        # shedding: the VM's code generation reads every constant (the weights' pages, over
        # provenance.weights' map), which stayed resident beside the rest of a map or build.
        with tvm.transform.PassContext(opt_level=3, instruments=instruments), \
                weights.shedding():
            ex = tvm.compile(imported.mod, target=target, relax_pipeline=cpu_pipeline(target))
    except Exception as e:  # TVM's InternalError/TVMError...: one line naming the model
        lines = [ln for ln in str(e).splitlines() if ln.strip()]
        first = next((ln for ln in lines if "Check failed" in ln or "Error" in ln),
                     lines[0] if lines else type(e).__name__)
        hint = failure_hint(imported.model) if imported.model is not None else ""
        raise BuildFailed(imported.label, passes.where(), first.strip(), hint) from None
    if tracker is None:
        return Build(ex, imported.pmap, None, imported.mod)
    pmap = join_executable(imported, tracker, ex, target)
    return Build(ex, pmap, tracker, tracker.mod)


def join_executable(imported: Imported, tracker: ProvenanceTracker, ex, target,
                    backend: str = "tvm") -> ProvenanceMap:
    """Attach kernels and call sites to a copy of the import map, checking the join is exact."""
    src = imported.pmap
    pmap = ProvenanceMap(meta=dict(src.meta), nodes=[_copy(n) for n in src.nodes],
                         exprs=list(src.exprs), node_exprs=list(src.node_exprs))
    pmap.meta.update({"backend": backend, "target": str(target.kind.name),
                      "tvm_version": tvm.__version__})
    calls = bytecode_calls(ex, skip=tracker.host_funcs)
    final = tracker.mod
    prim = {gv.name_hint for gv, f in final.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}
    kernels: dict[str, Kernel] = {}
    for fname in tracker.functions:
        ir_sites = tracker.sites(fname)
        bc = calls.get(fname, [])
        ir_count: dict[str, int] = defaultdict(int)
        for _, c, _ in ir_sites:
            ir_count[c] += 1
        bc_count: dict[str, int] = defaultdict(int)
        for c in bc:
            bc_count[c] += 1
        if dict(ir_count) != dict(bc_count):
            diff = sorted(set(ir_count.items()) ^ set(bc_count.items()))
            raise JoinError(f"{fname}: IR kernel calls and bytecode differ: {diff[:6]}")
        occurrence: dict[str, int] = defaultdict(int)
        for ordinal, (_, name, ids) in enumerate(ir_sites):
            k = occurrence[name]
            occurrence[name] += 1
            sid = f"{fname}/{name}#{k}"
            pmap.sites.append(KernelSite(id=sid, kernel=name, caller=fname, ordinal=ordinal))
            if name not in kernels:
                kind = ("primfunc" if name in prim else
                        "builtin" if name.startswith("vm.builtin.") else "packed")
                kernels[name] = Kernel(name=name, function=name, backend=backend, kind=kind)
            all_const = all(e in imported.const_exprs for e in ids)
            for e in sorted(ids):
                role = ROLE_CONSTANT if (e in imported.const_exprs and not all_const) else ROLE_COMPUTE
                pmap.site_exprs.append((sid, e, role))
    pmap.kernels = sorted(kernels.values(), key=lambda k: k.name)
    _explain_unmapped(pmap, tracker)
    return pmap


def _copy(n):
    from dataclasses import replace
    return replace(n, inputs=list(n.inputs), outputs=list(n.outputs))


def _explain_unmapped(pmap: ProvenanceMap, tracker: ProvenanceTracker) -> None:
    """A node whose bindings reach no kernel gets the reason the tracker recorded, or the
    VM builtin that evaluates it."""

    reached = {e for _, e, _ in pmap.site_exprs}
    by_node = defaultdict(list)
    for nid, eid, _ in pmap.node_exprs:
        by_node[nid].append(eid)
    for n in pmap.nodes:
        exprs = by_node.get(n.id, ())
        if n.elided or any(e in reached for e in exprs):
            continue
        why = sorted({tracker.dropped[e] for e in exprs if e in tracker.dropped})
        if why:
            n.elided = "; ".join(
                "computes nothing at run time" if w.startswith("import") else
                f"removed by {w} (its result is unused)" for w in why)
    mark_vm_evaluated(pmap)

