"""Model -> provenance map with an all-TVM build: the Python twin of `provmap map`.

It lives on the lowest floor because it needs nothing but the importer, TVM's default pipeline
and the store; the CLI only prints what `map_model` returns."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from .util.errors import ProvmapError
from .model import ProvenanceMap
from .type_oracle import TypeOracle


@dataclass
class MapResult:
    """What one `map_model` call produced.

    `coverage` is the map's coverage summary plus the counts the CLI prints with --json;
    `not_compilable` maps an ONNX node index to the importer's reason TVM cannot convert it;
    `files` is (json_path, sqlite_path) when the map was saved."""
    pmap: ProvenanceMap
    label: str
    coverage: dict
    not_compilable: dict[int, str] = field(default_factory=dict)
    findings: list[str] = field(default_factory=list)
    files: tuple | None = None
    #: ONNX node index -> why TVM computes it in float32 between Casts (provmap.provenance.half).
    widened: dict[int, str] = field(default_factory=dict)


def map_model(model, out: str | os.PathLike | None = None, input_shapes: dict | None = None,
              progress=None, type_oracle: TypeOracle | None = None,
              dims: dict | None = None) -> MapResult:
    """Import `model` (path, "bundled:NAME" or ModelProto), build it with TVM following every
    binding through every pass, and (if `out`) save OUT.json and OUT.sqlite atomically.

    Nodes TVM cannot convert, or cannot build once converted (provmap.provenance.salvage), stay
    in the map, marked "not compilable by TVM: <reason>"; the rest is built and mapped.
    `dims` sizes the model's symbols (`--dim`); a dimension left open or given a range stays
    symbolic, which TVM compiles (provmap.provenance.symbolic).
    `type_oracle` types what ONNX's inference cannot (provmap.provenance.type_oracle); this
    floor has none, so `provmap.map` and `provmap map` pass ONNX Runtime's
    (provmap.partition.model_source.map_model)."""
    from . import store
    from .bundled import zoo
    from .ids import model_sha256
    from .debugify import DebugifyReport
    from .importer import import_onnx, mark_not_compilable, read_model
    from .salvage import compile_around_failures

    say = progress or (lambda msg: None)
    label = None
    if isinstance(model, (str, os.PathLike)) and str(model).startswith("bundled:"):
        label = str(model)
        try:
            model, _ = zoo.resolve(label)
        except (KeyError, ValueError) as e:
            raise ProvmapError(f"{label}: {e}") from None
    t0 = time.perf_counter()
    proto, loaded_label = read_model(model)  # as given: import_onnx normalizes and checks it
    label = label or loaded_label
    imported = import_onnx(proto, label=label, shape_dict=input_shapes, type_oracle=type_oracle,
                           dims=dims)
    t1 = time.perf_counter()
    say(f"imported {label}: {len(imported.pmap.nodes)} ONNX nodes, "
        f"{len(imported.pmap.exprs)} Relax bindings ({t1 - t0:.2f} s)")

    def reimport(not_compilable):
        return import_onnx(proto, label=label, shape_dict=input_shapes, check=False,
                           not_compilable=not_compilable, type_oracle=type_oracle, dims=dims)

    try:
        build, imported, _ = compile_around_failures(imported, reimport, say=say)
    except ProvmapError:
        raise
    except Exception as e:  # TVM's own errors (InternalError, TVMError...): one line, no trace
        first = next((ln for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
        raise ProvmapError(f"{label}: TVM build failed: {first}") from None
    t2 = time.perf_counter()
    say(f"compiled with TVM (llvm, default CPU pipeline) in {t2 - t1:.2f} s")
    pmap = build.pmap
    opaque = mark_not_compilable(pmap, imported)
    if opaque:
        say(f"{opaque} ONNX node(s) not compilable by TVM (mapped as such; see "
            "onnx_nodes[].elided)")
    if imported.widened:
        say(f"{len(imported.widened)} half-precision ONNX node(s) computed in float32 between "
            "Casts (TVM would accumulate in half precision, or its import or lowering mixes "
            "float32 into them)")
    pmap.meta["model_sha256"] = model_sha256(proto)
    findings = [str(f) for f in DebugifyReport(build.tracker.reports).findings]
    files = None
    if out is not None:
        os.makedirs(os.path.dirname(os.path.abspath(os.fspath(out))), exist_ok=True)
        files = tuple(str(p) for p in store.save(pmap, os.fspath(out)))
    cov = pmap.coverage()
    cov.update({"onnx_nodes_not_compilable": opaque,
                "onnx_nodes_in_float32": len(imported.widened), "debugify_findings": findings,
                "import_s": round(t1 - t0, 3), "compile_s": round(t2 - t1, 3)})
    if files:
        cov.update({"json": files[0], "sqlite": files[1]})
    return MapResult(pmap, label, cov, dict(imported.opaque), findings, files,
                     dict(imported.widened))
