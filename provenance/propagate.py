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

from .pass_instrument import TrackingInstrument
from .relax_keys import (ValueKeys, bindings, callee, expr_name, host_functions, relax_callee,
                         relax_functions)


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


class _FunctionMatch:
    """One followed function across one pass, while the rules match it: which old site each
    new binding claimed, the provenance gathered so far, and the old module's value keys and
    consumer graph, built only when a pass actually re-created bindings (most passes keep every
    Var and need neither)."""

    def __init__(self, keys: ValueKeys, old_mod, new_mod, fname: str, old_prov: dict,
                 report: PassReport):
        self.keys, self.old_mod, self.new_mod = keys, old_mod, new_mod
        self.old_f, self.new_f = old_mod[fname], new_mod[fname]
        self.old_prov, self.report = old_prov, report
        self.old_b = list(bindings(self.old_f))
        self.old_callee: dict = {}     # old var -> its callee, None for non-sites
        self.new_fns = relax_functions(new_mod)
        self.claimed_by: dict = {}     # old var -> new var that claimed it
        self.new_prov: dict = {}
        self.env_new = {p: ("param", i) for i, p in enumerate(self.new_f.params)}
        self.table: dict = defaultdict(list)
        self.consumers: dict = defaultdict(list)
        self._built = False

    def ensure_table(self) -> None:
        if self._built:
            return
        self._built = True
        old_fns = relax_functions(self.old_mod)
        env_old = {p: ("param", i) for i, p in enumerate(self.old_f.params)}
        for b in self.old_b:
            k = self.keys.key(b.value, env_old, old_fns)
            env_old[b.var] = ("v", b.var)
            self.table[k].append(b.var)
            for fv in relax.analysis.free_vars(b.value):
                self.consumers[fv].append(b.var)

    def claim(self, old_var, new_var, rule) -> bool:
        if old_var in self.claimed_by:
            return False
        self.claimed_by[old_var] = new_var
        if old_var in self.old_prov:
            self.new_prov.setdefault(new_var, set()).update(self.old_prov[old_var])
        self.report.matched[rule] += 1
        return True

    def take(self, k, new_var, rule):
        for ov in self.table.get(k, ()):
            if ov not in self.claimed_by:
                self.claim(ov, new_var, rule)
                return ov
        return None


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
            for fv in () if _reads_only_shape(val) else relax.analysis.free_vars(val):
                srcs.extend(upstream.get(fv, ()))
            upstream[v] = srcs
            for s in srcs:
                if eid:
                    prov[s].add(eid)
            if not srcs and eid and not _reads_only_shape(val):
                # Computes nothing (alias of an input, constant tuple): no kernel by nature,
                # said in reports (a shape read is the VM's: model.mark_vm_evaluated).
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
        """The rules of the module doc, in order, over one followed function; returns its new
        site provenance."""
        m = _FunctionMatch(self.keys, old_mod, new_mod, fname, self.prov[fname], report)
        report.sites_before += len(m.old_prov)
        m.old_callee = {b.var: self.callee(b.value) for b in m.old_b}  # None for non-sites
        pending = self._match_bindings(m)
        self._match_occurrences(m, pending)
        self._expand(m.old_f, m.old_prov, m.old_callee, m.new_f, m.env_new, m.claimed_by,
                     m.new_prov, report)
        self._absorb(m)
        return self._new_sites(m, fname)

    def _match_bindings(self, m: _FunctionMatch) -> dict:
        """Rules 1-3 (identity, value, outlining) over the new bindings, in order.  Returns the
        new kernel-call sites none of them matched, by callee, for occurrence matching."""
        pending = defaultdict(list)    # callee -> new site vars awaiting occurrence matching
        for b in bindings(m.new_f):
            v, val = b.var, b.value
            site = self.callee(val)
            # Identity only between like kinds: CallTIRRewrite keeps `lv` as an alias of the
            # output buffer while the kernel call moves to a new binding.
            if v in m.old_callee and (m.old_callee[v] is not None) == (site is not None):
                m.claim(v, v, "identity")
                m.env_new[v] = ("v", v)
                continue
            m.ensure_table()
            k = self.keys.key(val, m.env_new, m.new_fns)
            ov = m.take(k, v, "value")
            if ov is not None:
                m.env_new[v] = ("v", ov)
                continue
            fn = relax_callee(m.new_mod, val)
            if fn is not None:
                claimed, result = self._evaluate(m.new_fns, fn, val.args, m.env_new, m.table,
                                                 m.claimed_by)
                for ov in claimed:
                    m.claim(ov, v, "outlining")
                if not claimed and site is not None:
                    # A pass that renames the symbolic variables inside outlined functions
                    # (CanonicalizeTIRVariables) defeats the evaluation: rule 4 then.
                    m.env_new[v] = ("new", v)
                    pending[site].append(v)
                    continue
                m.new_prov.setdefault(v, set())
                m.env_new[v] = result
                continue
            m.env_new[v] = ("new", v)
            if site is not None:
                pending[site].append(v)
        return pending

    @staticmethod
    def _match_occurrences(m: _FunctionMatch, pending: dict) -> None:
        """Rule 4: kernel calls that changed shape but not identity, k-th to k-th."""
        old_unclaimed = defaultdict(list)
        for ov, s in m.old_callee.items():
            if s is not None and ov not in m.claimed_by:
                old_unclaimed[s].append(ov)
        for s, news in pending.items():
            for nv, ov in zip(news, old_unclaimed.get(s, ())):
                m.claim(ov, nv, "occurrence")
                m.new_prov.setdefault(nv, set())

    def _absorb(self, m: _FunctionMatch) -> None:
        """Rule 6: vanished sites hand their IDs to their nearest surviving consumers."""
        for ov, ids in m.old_prov.items():
            if ov in m.claimed_by or not ids:
                continue
            m.ensure_table()
            targets = set()
            seen = {ov}
            queue = deque(m.consumers.get(ov, ()))
            while queue:
                c = queue.popleft()
                if c in seen:
                    continue
                seen.add(c)
                if c in m.claimed_by and c in m.old_prov:
                    targets.add(m.claimed_by[c])
                else:
                    queue.extend(m.consumers.get(c, ()))
            if not targets and self._escapes(m.old_f, ov, m.consumers):
                # Feeds the function result through non-sites only; the surviving result value
                # is whatever the new function returns, so credit the sites it references.
                targets = self._result_sites(m.new_f, m.new_prov)
            if targets:
                for t in targets:
                    m.new_prov.setdefault(t, set()).update(ids)
                m.report.matched["absorbed"] += 1
            else:
                m.report.dropped_ids |= set(ids)

    def _new_sites(self, m: _FunctionMatch, fname: str) -> dict:
        """The new function's sites and their IDs; a site with none is reported unmapped."""
        out = {}
        for b in bindings(m.new_f):
            s = self.callee(b.value)
            if s is None and b.var not in m.new_prov:
                continue
            ids = m.new_prov.get(b.var, set())
            if s is None:
                continue  # provenance parked on a non-site (should not happen): lost, reported
            if not ids:
                m.report.unmapped_sites.append(f"{fname}: {b.var.name} = {s}(...)")
            out[b.var] = frozenset(ids)
        m.report.sites_after += len(out)
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
        return TrackingInstrument(self)


def _reads_only_shape(value) -> bool:
    """R.shape_of reads sizes, not elements: no alias of the tensor's kernel (the importer's
    Gather index normalization made a LayerNorm kernel "compute" BERT's pooler Gather)."""
    return isinstance(value, relax.Call) and getattr(value.op, "name", None) == "relax.shape_of"


def _shape_unknown(ty) -> bool:
    if isinstance(ty, relax.TupleType):
        return any(_shape_unknown(f) for f in ty.fields)
    return isinstance(ty, relax.TensorType) and not isinstance(ty.shape, relax.ShapeExpr)
