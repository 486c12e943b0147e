"""A kept plan decided under contention falls back unless quiet prices confirm it (issue 35).

Why: beside a one-core CPU hog a one-thread variant wins the end-to-end check (it does not lose
a second core it never had), and the second level piles changes on it; measured afterwards on a
quiet machine the kept plan was 1.478x the best single backend.  Refusing the plan cache
(partition/measure/hygiene.py) stopped the next compile from reusing it, but the artifact
written was still the slow one.

So, when the decision (the end-to-end check, its tie-break, the second level) ran under
contention, the winner is checked against the prices already known to be quiet:

* measured end to end quietly: this search's end-to-end check if that phase was quiet, else
  the check recorded with a quietly decided plan stored for this model and these settings
  (the plan cache: read when `--research` searched again);
* else the first level's estimates whose prices were measured quietly: a whole-model price
  stored in the persistent cost cache (contended prices are quarantined for the run, never
  stored), and the searched plan's total when no price of the run stayed contended.

With no quiet end-to-end price at all, the search first waits (bounded) for quiet and repeats
its end-to-end check (quiet_again.py): a quiet repeat decides, whatever the contended run said
(`taken_again`); a load that outlasts the wait leaves the evidence below.  With no quiet price
of any kind that evidence is a guess, and the search writes nothing unless the user accepts it
(`refuse_guess`).

Measured evidence, when there is any, is used alone: estimates are isolated prices, and mixing
them with end-to-end medians in one ranking would compare two different clocks.  The winner is
confirmed when it is also the fastest on that evidence; otherwise the artifact gets the best
single configuration measured quietly, or, when none was, the library default (single:<b>) of
the backend whose quiet whole-model price is lowest.  `decide` is the rule alone, a pure
function, so it is tested without a busy machine.
"""

from __future__ import annotations

from provmap.runtime_module.artifact_build import build_artifact
from provmap.runtime_module.plan import PartitionSpec, Plan, order_plan
from provmap.runtime_module.registry import parse_variant
from provmap.runtime_module.subgraph import Subgraph

from .collage_types import CollageOptions, EndToEnd, FirstLevel, SearchSpace, SecondLevel
from .measure.cache import backend_identity
from .measure.contention import acting
from .measure.hygiene import DECISIVE, search_conditions
from .quiet_again import measure_again


# A winner whose own quiet price is this close to the quiet best is not refuted: one price
# per configuration, and this 2-core guest moves one pair's medians by 5-30% between runs
# (docs/results.md), so a smaller gap is no evidence against the end-to-end decision.
WITHIN = 0.05


def _load(conditions: dict) -> str:
    """"load X/N" of the first contended decisive phase (what the user can check with uptime),
    with what the counters saw."""
    phases = conditions.get("phases") or {}
    ph = next((phases[k] for k in DECISIVE if (phases.get(k) or {}).get("contended")),
              next(iter(phases.values()), {}))
    load = f"load {ph.get('load1', 0.0):.1f}/{ph.get('cores', 1)}"
    return f"{load}: {conditions['reason']}" if conditions.get("reason") else load


def _fmt(ms: dict) -> str:
    return ", ".join(f"{k} {v:.3f} ms" for k, v in sorted(ms.items(), key=lambda kv: kv[1]))


def decide(winner: str, conditions: dict, quiet_measured: dict, quiet_estimated: dict,
           act: bool = True, same: dict | None = None,
           contended_measured: dict | None = None) -> dict | None:
    """The fallback record for a kept plan labelled `winner`, or None when the decision was
    quiet (or contention is not acted on: PROVMAP_CONTENTION=ignore).

    `conditions` is search_conditions' record; `quiet_measured` / `quiet_estimated` map labels
    ("collage", "single:<b>", ...) to quiet end-to-end medians / quiet first-level estimates
    in ms; `same` maps a label to the one whose plan it repeats (the end-to-end check's
    e2e_same: single:b identical to collage is the same plan).  The record: `kept` (the label
    the artifact gets), `instead_of` (the winner it replaces, None when it stays), `why`, and
    the `quiet` evidence it was judged by.  `contended_measured`: the end-to-end medians
    measured under the contention itself, used only when no quiet price is known (below)."""
    if not conditions.get("contended") or not act:
        return None
    same = same or {}
    canon = lambda k: same.get(k, k)  # noqa: E731
    source, ms = (("measured end to end quietly", quiet_measured) if quiet_measured else
                  ("first-level prices measured quietly", quiet_estimated))
    ms = {k: v for k, v in ms.items() if v is not None}
    head = f"decision taken under contention ({_load(conditions)})"
    quiet = {"source": source if ms else None, "winner": min(ms, key=ms.get) if ms else None,
             "measured": dict(quiet_measured), "estimated": dict(quiet_estimated)}
    if not ms:
        return _no_quiet_price(winner, head, quiet, contended_measured or {}, canon)
    if canon(quiet["winner"]) == canon(winner):
        return {"kept": winner, "instead_of": None, "quiet": quiet,
                "why": f"{head} and confirmed by quiet prices ({source}: {_fmt(ms)})"}
    own = [v for k, v in ms.items() if canon(k) == canon(winner)]
    if own and min(own) <= ms[quiet["winner"]] * (1 + WITHIN):
        return {"kept": winner, "instead_of": None, "quiet": quiet,
                "why": f"{head}; quiet prices put it within {WITHIN:.0%} of the fastest "
                       f"({source}: {_fmt(ms)}), closer than one price can tell apart, so it "
                       "stays"}
    singles = {k: v for k, v in ms.items() if k.startswith("single:")}
    if quiet_measured and singles:
        target = min(singles, key=singles.get)
        how = "the best single configuration measured quietly"
    else:
        est = {k: v for k, v in quiet_estimated.items()
               if k.startswith("single:") and "[" not in k and v is not None}
        if not est:
            return {"kept": winner, "instead_of": None, "quiet": quiet,
                    "why": f"{head} and not confirmed by quiet prices ({source}: {_fmt(ms)}), "
                           "but no single configuration has a quiet price, so it stays"}
        target = min(est, key=est.get)
        # one backend with a quiet price is not a preference between backends (issue 36's
        # fourth afternoon: "the backend the quiet prices favour" named the only one priced)
        how = ("the library default of the backend the quiet prices favour" if len(est) > 1
               else "the library default of the only backend with a quiet whole-model price "
                    "(the others' were taken under contention, so they cannot overturn it)")
    if canon(target) == canon(winner):
        return {"kept": winner, "instead_of": None, "quiet": quiet,
                "why": f"{head}; quiet prices favour {quiet['winner']} ({source}: {_fmt(ms)}), "
                       f"and {how} is {winner} itself, so it stays"}
    return {"kept": target, "instead_of": winner, "quiet": quiet,
            "why": f"{head} and not confirmed by quiet prices ({source}: {_fmt(ms)}): "
                   f"{target} is {how}"}


def refuse_guess(rec: dict, conditions: dict, again: dict | None) -> None:
    """Raise instead of writing an artifact decided on no quiet price at all.

    Why not the guess: beside a load that outlasts the search and its wait, no measurement
    ranks the libraries as a quiet machine does.  MobileNet-v3 beside a one-core hog pinned to
    core 0 (2026-11-28, this 2-core guest): defaults ORT 2.04 / OV 4.01 ms by minimum, one
    thread ORT 3.16 / OV 3.40 (OV pins its threads from core 0) or 3.16 / 3.16 with OV's
    pinning off; quiet, OpenVINO's default is the faster by 4-13%, and the artifact the rule
    kept (ORT's default) measured 6.9-13.2% slower by minimum.  A silent loss of that size is
    worse than a second run: the user re-runs on a quiet machine, waits longer, or keeps the
    guess knowingly (`--accept-contended`; the record then says it was a guess)."""
    from provmap.provenance.util.errors import ProvmapError

    waited = (f" and {again['waited_s']:.0f} s of waiting for quiet" if again else "")
    raise ProvmapError(
        f"no artifact written: the machine stayed busy through the search{waited} "
        f"({_load(conditions)}), and no quiet price ranks the plans it measured; beside a load "
        f"the libraries do not rank as they do on a quiet machine, so its pick would be a "
        f"guess ({rec['kept']}). Run it again on a quiet machine, wait longer (--quiet-wait "
        f"SECONDS), or keep the guess with --accept-contended")


def _no_quiet_price(winner: str, head: str, quiet: dict, loaded: dict, canon) -> dict:
    """No quiet price at all (a hog through the whole search: every price contended, none
    stored): the default of the library whose one-thread configuration measured fastest beside
    the load, unless that is the winner.

    Why one-thread runs: a load of one core leaves one core, and each library on one thread
    fits in it, so their ratio is their kernels' ratio -- which is what the defaults' ratio
    mostly is on a quiet machine (2026-11-28, quiet: ResNet-50, MobileNet-v3, the detector and
    BERT-base rank the libraries alike on one thread and at their defaults; EfficientNet-B0,
    within 2-4% either way, does not).  The defaults measured beside the load rank how a
    library's threads survive a neighbour instead: EfficientNet-B0 beside a one-core hog,
    OpenVINO's default 31.9 ms against ONNX Runtime's 10.0 (quiet: 4.02 and 4.08).  And the
    winner itself was one-thread ONNX Runtime, 1.67x OpenVINO's default once quiet.

    Not a cure: OpenVINO pins its threads to cores from the first, so beside a load pinned to
    that core (bench/hog.py's is) even its one-thread run collapses (EfficientNet-B0: 20.0 ms
    against ONNX Runtime's 6.0 on one thread), and this rule then keeps ONNX Runtime's default
    whatever the quiet ranking.  Under such a load nothing measured ranks OpenVINO; what the
    rule does guarantee is a library default, never a variant the load favoured."""
    one = {k: v for k, v in loaded.items() if v is not None and k.startswith("single:")
           and parse_variant(k.split(":", 1)[1])[1] == {"threads": "1"}}
    if len({parse_variant(k.split(":", 1)[1])[0] for k in one}) < 2:
        return {"kept": winner, "instead_of": None, "quiet": quiet, "guess": True,
                "why": f"{head}; no quiet price is known to check it against, so it stays"}
    target = "single:" + parse_variant(min(one, key=one.get).split(":", 1)[1])[0]
    fmt = _fmt(one)
    quiet = {**quiet, "source": "one-thread configurations measured beside the same load",
             "loaded": dict(one)}
    if canon(target) == canon(winner):
        return {"kept": winner, "instead_of": None, "quiet": quiet, "guess": True,
                "why": f"{head}; no quiet price is known, and it is the default of the library "
                       f"whose one-thread run measured fastest beside the load ({fmt}), so it "
                       "stays"}
    return {"kept": target, "instead_of": winner, "quiet": quiet, "guess": True,
            "why": f"{head}; no quiet price is known to check it against: {target} is the "
                   f"default of the library whose one-thread run measured fastest beside the "
                   f"load ({fmt}; one thread fits the core the load leaves)"}


def _medians(measured: dict | None) -> dict:
    return {k: v["median_ms"] for k, v in (measured or {}).items()
            if isinstance(v, dict) and v.get("median_ms") is not None}


def quiet_measured(space: SearchSpace, first: FirstLevel) -> dict:
    """Labels -> end-to-end medians measured quietly (see the module doc), {} when none."""
    phases, e2e = first.phases, first.report.e2e or {}
    out = {}
    if not (phases.get("e2e") or {}).get("contended"):
        out.update(_medians(e2e.get("measured")))
    tb = e2e.get("tie_break")
    if tb and not (phases.get("tie_break") or {}).get("contended"):
        out.update(_medians(tb.get("measured")))
    if out or space.plan_keys is None:
        return out
    hit = space.cache.get_plan(*space.plan_keys)
    stored = hit[1] if hit else {}
    if stored.get("conditions") and not stored["conditions"].get("contended"):
        out.update(_medians((stored.get("e2e") or {}).get("measured")))
    return out


def quiet_estimated(space: SearchSpace, first: FirstLevel) -> dict:
    """Labels -> first-level estimates whose prices were measured quietly (module doc)."""
    view, cache = space.view, space.cache
    out = {}
    for c, e in first.dp.estimates.items():
        if not (e.valid and c.rule and "whole-model" in c.rule.split("+")):
            continue
        ident = backend_identity(space.backends[c.backend])
        key = Subgraph(view, c.ops).key
        if cache.get_in_context(key, ident) is not None or cache.get(key, ident) is not None:
            out[f"single:{c.backend}"] = e.seconds * 1e3
    if not first.cyclic and not (first.report.estimator or {}).get("contended_prices"):
        out["collage"] = first.dp.estimated_s * 1e3
    return out


def taken_again(winner: str, conditions: dict, again: dict, same: dict | None = None) -> dict:
    """The fallback record when the decision was measured again quietly (quiet_again.py): the
    end-to-end check's rule on that run keeps its pick, whatever the contended run said."""
    same = same or {}
    canon = lambda k: same.get(k, k)  # noqa: E731
    pick = again["winner"]
    ms = {k: v["median_ms"] for k, v in again["measured"].items()}
    head = (f"decision taken under contention ({_load(conditions)}); measured again after "
            f"waiting {again['waited_s']:.0f} s for quiet ({_fmt(ms)}): {again['why']}")
    quiet = {"source": "measured end to end again, quietly", "winner": pick,
             "measured": ms, "estimated": {}}
    if canon(pick) == canon(winner):
        return {"kept": winner, "instead_of": None, "quiet": quiet, "waited": again,
                "why": f"{head}, so it stays"}
    return {"kept": pick, "instead_of": winner, "quiet": quiet, "waited": again,
            "why": head}


def fall_back(space: SearchSpace, first: FirstLevel, e2e: EndToEnd, kept: SecondLevel,
              opts: CollageOptions, say) -> SecondLevel:
    """`kept`, or the configuration a quiet repeat of the decision or `decide` keeps instead
    (built from the end-to-end check's partitions where it can); the record goes into the
    report's `fallback`, said in one line."""
    report = first.report
    cond = search_conditions(first.phases, report.estimator)
    if not cond.get("contended") or not acting():
        return kept
    measured = quiet_measured(space, first)
    again = None if measured else measure_again(e2e, kept, opts, first.phases, say)
    repeated = bool(again and again["quiet"])  # decided by a quiet repeat of the check
    if repeated:
        rec = taken_again(kept.label, cond, again, same=report.e2e_same)
    else:
        # the check's own medians only: every alternative in one interleaved run, one moment
        loaded = _medians((report.e2e or {}).get("measured"))
        rec = decide(kept.label, cond, measured, quiet_estimated(space, first),
                     same=report.e2e_same, contended_measured=loaded)
        if again:
            rec = {**rec, "waited": again, "why": f"{rec['why']} (waited {again['waited_s']:.0f} "
                                                  "s for quiet, in vain)"}
    if rec.get("guess"):
        if not opts.accept_contended:
            refuse_guess(rec, cond, again)
        rec = {**rec, "why": f"{rec['why']}; a guess, kept as asked (--accept-contended)"}
    report.fallback = rec
    if rec["instead_of"] is None:
        say(f"kept {kept.label}: {rec['why']}")
        return kept
    target = rec["kept"]
    say(f"kept {target} instead of {kept.label}: {rec['why']}")
    if repeated:
        report.level = f"quiet repeat of the end-to-end check ({target})"
        return SecondLevel(target, e2e.plans[target], e2e.built[target])
    name = target.split(":", 1)[1]
    plan = order_plan(space.view, Plan(target, [PartitionSpec(
        name, list(space.view.op_nodes), why=f"{target} (fallback: {rec['why']})")]))
    art = build_artifact(space.view, plan, space.every, blobs=e2e.blobs)
    report.level = f"contention fallback ({target})"
    return SecondLevel(target, plan, art)
