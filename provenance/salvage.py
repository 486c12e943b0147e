"""When TVM cannot build the whole model: which ONNX nodes it cannot build, and a map without them.

`provmap map` compiles everything TVM's Relax frontend converted, so one binding TVM then fails
on (an elementwise op reading an opaque node's output of unknown shape: "emit_te now only
supports Tensor that has ShapeExpr shape"; an integer Pow; ...) used to fail the whole map.  The
importer's rule for a node the frontend cannot convert (an opaque binding, reported "not
compilable by TVM: <reason>") applies to these nodes as well, found after the build failed:

1. Legalization, checked in one pass with no code generation.  LegalizeOps runs with every op's
   legalization wrapped: one that raises is recorded and its call left as it was.  A call that
   LegalizeOps leaves alone because an input shape is unknown (FoldConstant or code generation
   then raise on it) is legalized here by hand, to get TVM's own error.  The failing nodes are
   made opaque, the model is imported again, and the check repeats (an opaque node is typed
   from ONNX shape inference, which can differ from what the frontend inferred).
2. A failure after legalization (FoldConstant evaluating constants, VMShapeLower, code
   generation): bisection over the nodes in graph order, each probe a build with a suffix of
   them opaque; the first node whose inclusion fails the build is the culprit, with the probe's
   error.  At most `MAX_PROBES` probe builds narrow one node down; past them, a failure is
   narrowed with `COARSE_PROBES` probes only, and every node still suspect (a region of about
   an eighth of the candidates) is marked together, with the build's error and the reason it
   was marked as a region.  After `COARSE_ROUNDS` such regions the suspects of the next failure
   are marked without a probe.  The map completes either way: only nodes TVM builds are built.

A build that succeeds pays for none of this."""

from __future__ import annotations

import tvm
from tvm import relax

from .shapes import failure_hint
from .build import Build, BuildFailed, compile_tvm, cpu_target
from .util.errors import first_line
from .importer import Imported
from .model import ROLE_PRODUCED
from .relax_keys import bindings

#: Probe builds a bisection may spend on one map (about log2(nodes) per failing node).
MAX_PROBES = 16
#: Past MAX_PROBES: probes per further failure (suspects narrowed to 1/2**COARSE_PROBES of the
#: candidates, marked together), and how many such regions before the suspects go unprobed.
COARSE_PROBES = 3
COARSE_ROUNDS = 8


def legalize_failures(mod: tvm.IRModule, target=None) -> dict:
    """Binding Var of "main" -> why TVM cannot legalize its call ("legalizing <op>: <error>")."""
    from tvm.relax.backend.cpu_generic.pipeline import library_dispatch_passes

    target = target or cpu_target()
    raised: list = []  # (call, reason)
    names: set[str] = set()

    def visit(e):
        if isinstance(e, tvm.ir.Op) and e.get_attr("FLegalize") is not None:
            names.add(e.name)

    relax.analysis.post_order_visit(mod["main"], visit)

    def wrapped(legalize):
        def run(bb, call):
            try:
                return legalize(bb, call)
            except Exception as e:  # TVM raises many types; the message is the reason
                raised.append((call, f"legalizing {call.op.name}: {first_line(e)}"))
                return call
        return run

    cmap = {n: wrapped(tvm.ir.Op.get(n).get_attr("FLegalize")) for n in names}
    try:
        with target, tvm.transform.PassContext(opt_level=3):
            mod = tvm.transform.Sequential(library_dispatch_passes(target))(mod)
            mod = relax.transform.LegalizeOps(cmap)(mod)
    except Exception:  # raised outside any op's legalization: left to bisection
        return {}
    out = {}
    for b in bindings(mod["main"]):
        why = _raised_in(b.value, raised)
        call = b.value
        if why is None and isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.Op):
            legalize = call.op.get_attr("FLegalize")
            if legalize is None:
                continue
            try:  # left unlowered: only what TVM itself refuses counts
                with target:
                    legalize(relax.BlockBuilder(mod), call)
                continue
            except Exception as e:
                why = f"legalizing {call.op.name}: {first_line(e)}"
        if why is not None:
            out[b.var] = why
    return out


def _raised_in(value, raised) -> str | None:
    """The reason recorded for a call in `value` (a binding's own call or one nested in it,
    as in match_cast(reshape(...)))."""
    if not raised:
        return None
    calls = []
    relax.analysis.post_order_visit(value, lambda e: calls.append(e)
                                    if isinstance(e, relax.Call) else None)
    return next((why for c, why in raised for x in calls if c.same_as(x)), None)


def failing_nodes(imported: Imported, target=None) -> dict[int, str]:
    """ONNX node index -> why TVM cannot legalize one of its bindings (nodes already opaque
    excluded).  Computed once per import: the TVM backend's support query asks it too."""
    if imported.tvm_failures is None:
        owner = {e: n for n, e, role in imported.pmap.node_exprs if role == ROLE_PRODUCED}
        index = {n.id: n.index for n in imported.pmap.nodes}
        out: dict[int, str] = {}
        for var, why in legalize_failures(imported.mod, target).items():
            node = owner.get(imported.var_expr.get(var))
            if node is not None and index[node] not in imported.opaque:
                out.setdefault(index[node], why)
        imported.tvm_failures = out
    return imported.tvm_failures


def compile_around_failures(imported: Imported, reimport, target=None, say=None,
                            max_probes: int = MAX_PROBES) -> tuple[Build, Imported, dict]:
    """Build `imported`; if TVM fails, make the nodes it fails on opaque and build the rest.

    `reimport(not_compilable)` imports the same model again with those nodes opaque (node index
    -> reason; importer.import_onnx's `not_compilable`).  Returns the build, the import it was
    built from, and the nodes made opaque here (index -> reason); raises the build's error when
    the failing nodes cannot be found."""
    say = say or (lambda msg: None)
    forced: dict[int, str] = {}
    budget, coarse = max_probes, 0
    while True:
        try:
            return compile_tvm(imported, target), imported, forced
        except BuildFailed as e:
            failure = e
        found = failing_nodes(imported, target)
        if not found:
            allowance = budget if budget > 0 else COARSE_PROBES if coarse < COARSE_ROUNDS else 0
            if budget > 0:
                def probing(k, node, done=max_probes - budget):
                    say(f"TVM build failed in {failure.where}; bisecting: probe build "
                        f"{done + k} of at most {max_probes}, ONNX nodes #{node} and after "
                        "opaque")
            else:
                coarse += 1

                def probing(k, node):
                    say(f"TVM build failed in {failure.where}; probe budget spent, narrowing "
                        f"to a region: probe {k} of {allowance}, ONNX nodes #{node} and after "
                        "opaque")

            found, spent = _bisect(imported, reimport, forced, failure, target, allowance,
                                   probing)
            budget = max(0, budget - spent)
            if not found:
                raise failure
        while found:  # legalization again on the new import, until it is clean (cheap)
            forced.update(found)
            say(f"TVM cannot build {len(found)} ONNX node(s) ({next(iter(found.values()))}); "
                f"marked not compilable by TVM, building the rest{failure_hint(imported.model)}")
            imported = reimport(dict(forced))
            found = failing_nodes(imported, target)


def _bisect(imported: Imported, reimport, forced: dict, failure: BuildFailed, target,
            budget: int, probing) -> tuple[dict[int, str], int]:
    """The first node (in graph order) whose inclusion fails the build, and the probes spent;
    when `budget` runs out first, every node still suspect, each with the same reason."""
    produced = {n for n, _, role in imported.pmap.node_exprs if role == ROLE_PRODUCED}
    cands = sorted(n.index for n in imported.pmap.nodes
                   if n.id in produced and n.index not in imported.opaque)
    placeholder = "(bisection probe)"
    lo, hi = 0, len(cands)  # all of cands opaque builds (assumed); none opaque fails (seen)
    reason = f"{failure.where}: {failure.detail}"
    spent = 0
    while hi - lo > 1:
        if spent >= budget:
            suspects = cands[lo:hi]
            why = (f"build failed in {reason} (one of {len(suspects)} suspects, ONNX nodes "
                   f"#{suspects[0]} to #{suspects[-1]}, the probe budget could not tell apart: "
                   "marked as a region)")
            return {i: why for i in suspects}, spent
        mid = (lo + hi) // 2
        spent += 1
        probing(spent, cands[mid])
        probe = reimport({**forced, **{i: placeholder for i in cands[mid:]}})
        try:
            compile_tvm(probe, target, track=False)
        except BuildFailed as e:
            hi, reason = mid, f"{e.where}: {e.detail}"
        else:
            lo = mid
    return ({cands[hi - 1]: f"build failed in {reason}"} if cands else {}), spent
