"""Carry expression IDs through Relax passes, down to every kernel call of the executable.

Why not spans: most Relax passes drop them (LegalizeOps, FuseTIR, CallTIRRewrite; outlined call
sites never get one), and TVM deduplicates structurally equal functions, so anything stored
*inside* a fused function describes only one of its call sites.  Provenance therefore lives on
call sites ("sites": bindings that call an op, a PrimFunc, a Relax function or a packed
function), and is carried across each pass by matching the module before and after it:

1. identity   - a binding whose Var object survived the pass keeps its provenance (passes that
                rewrite a value in place, e.g. LegalizeOps, FoldConstant, FuseTIR, keep the Var);
2. value      - a new binding whose value, with its arguments mapped back to the old module, is
                structurally the old value (ToNonDataflow re-creates every Var);
3. outlining  - a call to a Relax function (FuseOps, FuseOpsByPattern, MergeCompositeFunctions)
                is evaluated symbolically against the old bindings: each binding of the callee's
                body, with parameters bound to this call site's arguments, is looked up among the
                old values, so every call site of a deduplicated function claims its own bindings;
4. occurrence - the k-th remaining call of kernel K after the pass is the k-th remaining call of K
                before it (CallTIRRewrite, memory planning, builtin lowering reshape calls but never
                reorder or merge them);
5. expansion  - new sites that read only the inputs of one vanished old site (and what the pass
                emitted for it) belong to it: LegalizeOps lowers an op with a run-time output
                shape into a shape function and the kernel (`_expand`);
6. absorption - an old site that nothing claimed (folded constant, fused away) hands its IDs to
                the nearest surviving sites that consume it; if none consume it, its IDs are
                reported as dropped (dead code).

The same occurrence rule joins the final IR with the VM executable's bytecode, which names each
kernel it calls.  Every step is checked by provmap.provenance.debugify.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field

import tvm
from tvm import relax

from .relax_keys import ValueKeys, bindings, callee, expr_name, host_functions


@dataclass
class PassReport:
    """What one pass did to provenance; debugify turns these into findings."""

    pass_name: str
    sites_before: int = 0
    sites_after: int = 0
    matched: dict = field(default_factory=lambda: defaultdict(int))  # rule -> count
    unmapped_sites: list = field(default_factory=list)  # "func: var = callee" with no provenance
    lost_ids: set = field(default_factory=set)      # IDs on sites before, on no site after
    dropped_ids: set = field(default_factory=set)   # IDs whose whole consumer cone vanished

    @property
    def ok(self) -> bool:
        return not self.unmapped_sites and not self.lost_ids


class ProvenanceTracker:
    """Follows site provenance through a sequence of modules (one per pass)."""

    def __init__(self, mod: tvm.IRModule, var_expr: dict, functions=("main",)):
        self.mod = mod
        self.functions = list(functions)
        self.keys = ValueKeys()
        self.reports: list[PassReport] = []
        self.dropped: dict[str, str] = {}  # expr id -> pass that dropped it
        self.host_funcs: set[str] = host_functions(mod)  # never sites (see host_functions)
        self.prov: dict[str, dict] = {}
        for fname in self.functions:
            self.prov[fname] = self._initial(mod[fname], var_expr)

    # ---- initial state ------------------------------------------------------------------
    def _initial(self, func, var_expr):
        """Sites own their binding's ID plus the IDs of non-site bindings that alias them."""
        prov: dict = {}
        upstream: dict = {}  # non-site var -> list of site vars it stands for
        for b in bindings(func):
            v, val = b.var, b.value
            eid = var_expr.get(v)
            if self.callee(val) is not None:
                prov[v] = {eid} if eid else set()
                upstream[v] = [v]
                continue
            srcs = []
            for fv in relax.analysis.free_vars(val):
                srcs.extend(upstream.get(fv, ()))
            upstream[v] = srcs
            for s in srcs:
                if eid:
                    prov[s].add(eid)
            if not srcs and eid:
                # A value that computes nothing (alias of an input, constant tuple): such an
                # ID has no kernel by nature; remember it so reports can say why.
                self.dropped.setdefault(eid, "import (no computation)")
        return {v: frozenset(p) for v, p in prov.items()}

    def all_ids(self) -> set:
        out = set()
        for p in self.prov.values():
            for s in p.values():
                out |= s
        return out

    def callee(self, value) -> str | None:
        c = callee(value)
        return None if c in self.host_funcs else c

    # ---- one pass -----------------------------------------------------------------------
    def tracks(self, mod) -> bool:
        """True when `mod` is the module we follow (not a nested pass's private module)."""
        for f in self.functions:
            if f not in [gv.name_hint for gv in mod.get_global_vars()]:
                return False
            new, old = mod[f], self.mod[f]
            if not isinstance(new, relax.Function) or len(new.params) != len(old.params):
                return False
        return True

    def changed(self, mod) -> bool:
        return any(not mod[f].same_as(self.mod[f]) for f in self.functions)

    def update(self, mod: tvm.IRModule, pass_name: str) -> PassReport:
        report = PassReport(pass_name)
        self.host_funcs |= host_functions(mod)
        before_ids = self.all_ids()
        new_prov = {}
        for f in self.functions:
            new_prov[f] = self._update_function(f, self.mod, mod, report)
        self.prov = new_prov
        self.mod = mod
        after_ids = self.all_ids()
        report.lost_ids = before_ids - after_ids - report.dropped_ids
        for eid in report.dropped_ids:
            self.dropped.setdefault(eid, pass_name)
        self.reports.append(report)
        return report

    def _update_function(self, fname, old_mod, new_mod, report):
        K = self.keys
        old_f, new_f = old_mod[fname], new_mod[fname]
        old_prov = self.prov[fname]
        old_b = list(bindings(old_f))
        report.sites_before += len(old_prov)

        old_callee = {b.var: self.callee(b.value) for b in old_b}  # None for non-sites
        new_fns = self._relax_functions(new_mod)
        # Value keys of the old module and its consumer graph are built only when a pass
        # actually re-created bindings: most passes keep every Var and need neither.
        table: dict = defaultdict(list)
        consumers: dict = defaultdict(list)
        built = False

        def ensure_table():
            nonlocal built
            if built:
                return
            built = True
            old_fns = self._relax_functions(old_mod)
            env_old = {p: ("param", i) for i, p in enumerate(old_f.params)}
            for b in old_b:
                k = K.key(b.value, env_old, old_fns)
                env_old[b.var] = ("v", b.var)
                table[k].append(b.var)
                for fv in relax.analysis.free_vars(b.value):
                    consumers[fv].append(b.var)

        claimed_by: dict = {}          # old var -> new var that claimed it
        new_prov: dict = {}
        env_new = {p: ("param", i) for i, p in enumerate(new_f.params)}
        pending = defaultdict(list)    # callee -> new site vars awaiting occurrence matching

        def claim(old_var, new_var, rule):
            if old_var in claimed_by:
                return False
            claimed_by[old_var] = new_var
            if old_var in old_prov:
                new_prov.setdefault(new_var, set()).update(old_prov[old_var])
            report.matched[rule] += 1
            return True

        def take(k, new_var, rule):
            for ov in table.get(k, ()):
                if ov not in claimed_by:
                    claim(ov, new_var, rule)
                    return ov
            return None

        for b in bindings(new_f):
            v, val = b.var, b.value
            site = self.callee(val)
            # Identity only between like kinds: CallTIRRewrite keeps `lv` as an alias of the
            # output buffer while the kernel call moves to a new binding.
            if v in old_callee and (old_callee[v] is not None) == (site is not None):
                claim(v, v, "identity")
                env_new[v] = ("v", v)
                continue
            ensure_table()
            k = K.key(val, env_new, new_fns)
            ov = take(k, v, "value")
            if ov is not None:
                env_new[v] = ("v", ov)
                continue
            fn = self._relax_callee(new_mod, val)
            if fn is not None:
                claimed, result = self._evaluate(new_fns, fn, val.args, env_new, table, claimed_by)
                for ov in claimed:
                    claim(ov, v, "outlining")
                new_prov.setdefault(v, set())
                env_new[v] = result
                continue
            env_new[v] = ("new", v)
            if site is not None:
                pending[site].append(v)

        # Occurrence matching for kernel calls that changed shape but not identity.
        old_unclaimed = defaultdict(list)
        for ov, s in old_callee.items():
            if s is not None and ov not in claimed_by:
                old_unclaimed[s].append(ov)
        for s, news in pending.items():
            for nv, ov in zip(news, old_unclaimed.get(s, ())):
                claim(ov, nv, "occurrence")
                new_prov.setdefault(nv, set())

        self._expand(old_f, old_prov, old_callee, new_f, env_new, claimed_by, new_prov, report)

        # Absorption of vanished sites into their nearest surviving consumers.
        for ov, ids in old_prov.items():
            if ov in claimed_by or not ids:
                continue
            ensure_table()
            targets = set()
            seen = {ov}
            queue = deque(consumers.get(ov, ()))
            while queue:
                c = queue.popleft()
                if c in seen:
                    continue
                seen.add(c)
                if c in claimed_by and c in old_prov:
                    targets.add(claimed_by[c])
                else:
                    queue.extend(consumers.get(c, ()))
            if not targets and self._escapes(old_f, ov, consumers):
                # Feeds the function result through non-sites only; the surviving result value
                # is whatever the new function returns, so credit the sites it references.
                targets = self._result_sites(new_f, new_prov)
            if targets:
                for t in targets:
                    new_prov.setdefault(t, set()).update(ids)
                report.matched["absorbed"] += 1
            else:
                report.dropped_ids |= set(ids)

        out = {}
        for b in bindings(new_f):
            s = self.callee(b.value)
            if s is None and b.var not in new_prov:
                continue
            ids = new_prov.get(b.var, set())
            if s is None:
                continue  # provenance parked on a non-site (should not happen): lost, reported
            if not ids:
                report.unmapped_sites.append(f"{fname}: {b.var.name} = {s}(...)")
            out[b.var] = frozenset(ids)
        report.sites_after += len(out)
        return out

    def _expand(self, old_f, old_prov, old_callee, new_f, env_new, claimed_by, new_prov, report):
        """Rule 5, expansion: new sites no other rule claimed, each read only from the inputs
        of one vanished old site whose output shape was unknown (and from what the pass
        emitted for it), belong to that site.  LegalizeOps lowers an op whose output shape is
        only known at run time (dynamic_strided_slice, ...) into a shape function,
        tensor_to_shape, match_cast and the kernel: four new bindings, two of them kernels, and
        a new Var, because its type now has a shape.  Only such sites qualify: a call over
        static shapes that a pass replaced by another is still reported (debugify)."""
        gone = [b for b in bindings(old_f) if old_callee[b.var] is not None
                and b.var not in claimed_by and _shape_unknown(b.var.ty)]
        if not gone:
            return
        old_params = {p: ("param", i) for i, p in enumerate(old_f.params)}
        reads = {b.var: {old_params.get(v, ("v", v)) for v in relax.analysis.free_vars(b.value)}
                 for b in gone}
        back = {nv: ov for ov, nv in claimed_by.items()}
        deps: dict = {}    # unmatched new var -> old values (or ("own", old site)) it reads
        owner: dict = {}   # new site -> the old site it was emitted for
        parts = defaultdict(list)

        def source(v):
            k = env_new.get(v)
            if k is None or k[0] not in ("param", "v", "new"):
                return {("?",)}  # a value outlining or the pass computed: nothing to read back
            if k[0] != "new":
                return {k}
            u = k[1]
            if u in back:
                return {("v", back[u])}
            if u in owner:
                return {("own", owner[u])}
            return deps.get(u, {("?",)})

        for b in bindings(new_f):
            v = b.var
            if env_new.get(v) != ("new", v) or v in back:
                continue
            d = set().union(*(source(fv) for fv in relax.analysis.free_vars(b.value)))
            deps[v] = d
            site = self.callee(b.value)
            if site is None or not d or ("?",) in d:
                continue
            own = {x[1] for x in d if x[0] == "own"}
            plain = {x for x in d if x[0] != "own"}
            fits = [ov for ov in reads if own <= {ov} and plain <= reads[ov]]
            if not fits:
                continue
            # Two vanished sites over the same inputs: a kernel goes to the first that has
            # not yet been given a call of it (each lowering calls its kernels once).
            ov = next((o for o in fits if site not in {self.callee(x) for x in parts[o]}),
                      fits[0])
            owner[v] = ov
            parts[ov].append(v)
            new_prov.setdefault(v, set()).update(old_prov.get(ov, ()))
        for ov, news in parts.items():
            claimed_by[ov] = news[-1]  # the last one computes the value; consumers read it
            report.matched["expansion"] += 1

    @staticmethod
    def _relax_functions(mod):
        return {gv.name_hint: f for gv, f in mod.functions.items() if isinstance(f, relax.Function)}

    @staticmethod
    def _relax_callee(mod, val):
        if isinstance(val, relax.Call) and isinstance(val.op, tvm.ir.GlobalVar):
            f = mod[val.op]
            if isinstance(f, relax.Function):
                return f
        return None

    def _evaluate(self, fns, func, args, env, table, taken):
        """Run `func`'s body over old-module value keys; return (claimed old vars, result key).

        Callees may be global functions (FuseOps, FuseOpsByPattern) or functions bound to a
        local Var inside the body (MergeCompositeFunctions nests its composites that way).
        """
        K = self.keys
        local = {p: K.key(a, env) for p, a in zip(func.params, args)}
        local_fns = dict(fns)
        claimed = []
        taken = set(taken)
        for b in bindings(func):
            val = b.value
            if isinstance(val, relax.Function):
                local_fns[b.var] = val
                continue
            inner = None
            if isinstance(val, relax.Call):
                op = val.op
                inner = local_fns.get(expr_name(op) if isinstance(op, tvm.ir.GlobalVar) else op)
            if inner is not None:
                # A whole call may match an old call of the same function (a composite that
                # was merged as a unit); otherwise look inside it.
                hit = next((ov for ov in table.get(K.key(val, local, local_fns), ())
                            if ov not in taken), None)
                if hit is not None:
                    claimed.append(hit)
                    taken.add(hit)
                    local[b.var] = ("v", hit)
                    continue
                sub, res = self._evaluate(local_fns, inner, val.args, local, table, taken)
                claimed.extend(sub)
                taken.update(sub)
                local[b.var] = res
                continue
            k = K.key(val, local, local_fns)
            hit = next((ov for ov in table.get(k, ()) if ov not in taken), None)
            if hit is not None:
                claimed.append(hit)
                taken.add(hit)
                local[b.var] = ("v", hit)
            else:
                local[b.var] = k
        return claimed, K.key(func.body.body, local)

    @staticmethod
    def _escapes(func, var, consumers) -> bool:
        ret = set(relax.analysis.free_vars(func.body.body))
        seen, queue = set(), deque([var])
        while queue:
            v = queue.popleft()
            if v in ret:
                return True
            if v in seen:
                continue
            seen.add(v)
            queue.extend(consumers.get(v, ()))
        return False

    @staticmethod
    def _result_sites(func, new_prov):
        return {v for v in relax.analysis.free_vars(func.body.body) if v in new_prov}

    # ---- results ------------------------------------------------------------------------
    def sites(self, fname="main"):
        """[(var, callee, ids)] for the current module, in call order."""
        prov = self.prov[fname]
        return [(b.var, self.callee(b.value), prov.get(b.var, frozenset()))
                for b in bindings(self.mod[fname]) if self.callee(b.value) is not None]

    def instrument(self):
        return _TrackingInstrument(self)


def _shape_unknown(ty) -> bool:
    if isinstance(ty, relax.TupleType):
        return any(_shape_unknown(f) for f in ty.fields)
    return isinstance(ty, relax.TensorType) and not isinstance(ty.shape, relax.ShapeExpr)


@tvm.instrument.pass_instrument
class _TrackingInstrument:
    """Updates a tracker after every pass that changed the followed functions (nested included)."""

    def __init__(self, tracker: ProvenanceTracker):
        self.tracker = tracker

    def run_after_pass(self, mod, info):
        t = self.tracker
        if info.name.startswith(("tirx.", "s_tir.")):
            return
        if t.tracks(mod) and t.changed(mod):
            t.update(mod, info.name)
