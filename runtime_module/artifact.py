"""Building, writing and verifying the artifact file.

The artifact is one zip file (stored, not compressed: the big members are native code and
weights, and load time matters more than size) holding:

    manifest.json            versioned; partitions, backends and options, boundary tensors, and
                             the SHA-256 of every other member
    partitioned.relax        the partitioned Relax module, printed by TVM
    map.json, map.sqlite     the provenance map (ONNX nodes <-> Relax exprs <-> kernels)
    partitions/<id>/...      each partition's code blob (TVM library, ONNX bytes, OpenVINO IR)
    partitions/<id>/source.txt   its Relax/TIR or graph source, for offline reading

Reading verifies the whole file before anything in it is used: the member list must match the
manifest exactly and every member's SHA-256 must match, so a tampered or truncated artifact is
refused before a native library is loaded.  Hashes guard against corruption and accidental
edits, not against an attacker who rewrites the manifest too (that is the trust list's job).
"""

from __future__ import annotations

import datetime as _dt
import io
import json
import os
import re
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from provmap.provenance.util.errors import ProvmapError
from provmap.provenance.model import Kernel, KernelSite, ProvenanceMap
from provmap.provenance import store
from provmap.provenance.util import atomic

from . import artifact_schema as schema, trust
from .staged import Staged, digest, stageable
from .archive import StoredZip, check_staged
from .backend import Backend, BackendError, Blob, KernelInfo
from .plan import Plan, order_plan
from .spinning import quiet_spinning
from .host import host_info, provmap_version as _provmap_version  # noqa: F401 (host_info: re-exported)

if TYPE_CHECKING:  # pragma: no cover  (reading an artifact must not import TVM: issue 36)
    from .graph_view import GraphView

FORMAT = "provmap-artifact"
#: What a manifest's model.given_as may hold to be printed in a hint.
_SAFE_NAME = re.compile(r"[A-Za-z0-9_.:+-]{1,200}")
SOURCE_MODEL = "source/model.onnx"  # optional: the user's ONNX model (compile --embed-model)
FORMAT_VERSION = 1
#: An artifact with a concurrent schedule (schedule.py) is version 2: a provmap that cannot honour
#: it refuses it rather than run it differently; one without stays 1 for older readers.
SCHEDULED_VERSION = 2
READS_VERSIONS = (FORMAT_VERSION, SCHEDULED_VERSION)
MANIFEST = trust.MANIFEST


def _sha(b) -> str:
    return digest(b)


@dataclass
class Artifact:
    """An artifact in memory: the manifest plus member bytes (everything but the manifest)."""

    manifest: dict
    members: dict[str, bytes] = field(default_factory=dict)
    #: SHA-256 of the manifest as stored (it holds every member's hash): the identity that
    #: provmap.runtime_module.trust records.  Empty until the artifact is read or saved.
    digest: str = ""
    #: The file it was read from, for messages ("" for one built in memory).
    where: str = ""
    #: Whether this process built it (build_artifact): only such an artifact is recorded as
    #: "built here" in the trust list when its builder saves it (save(record_built=True)).  One read from a file never is, however it
    #: is re-saved (issue 33: re-saving a received artifact used to make it trusted).
    built_here: bool = field(default=False, repr=False, compare=False)
    #: Staged members whose hash is still computing (read_artifact's `hash_later`):
    #: (name, staged, expected sha256); `check_pending` refuses a mismatch.
    pending: list = field(default_factory=list, repr=False, compare=False)
    #: id -> partition, built on first use (see `partition`).
    _by_id: tuple | None = field(default=None, init=False, repr=False, compare=False)

    def check_pending(self) -> None:
        """Wait for the hashes `read_artifact(hash_later=True)` left computing and refuse a
        member that is not the manifest's (one line naming the file and the member)."""
        while self.pending:
            name, staged, sha = self.pending[0]
            check_staged(self.where or "artifact", name, staged, sha)
            self.pending.pop(0)

    def partition(self, pid: str) -> dict:
        """Partition `pid` by an index: a scan of the list per call made every reader that
        visits each partition quadratic (issue 52: 20,000 empty partitions, a 4.9 MB file, took
        21 s in inspect; 80,000 did not finish in 300 s).  The index is rebuilt when the
        manifest's list is replaced or changes length (tests and with_schedule edit it)."""
        parts = self.manifest["partitions"]
        if self._by_id is None or self._by_id[0] is not parts or self._by_id[1] != len(parts):
            index: dict = {}
            for p in parts:
                index.setdefault(p["id"], p)  # the first of a duplicate, as the scan found
            self._by_id = (parts, len(parts), index)
        return self._by_id[2][pid]

    def blob(self, pid: str) -> Blob:
        """Partition `pid`'s code and data, as its backend loads them.  Every model file in it is
        checked first (onnx_guard): nothing in it may refer to data outside the artifact."""
        from .onnx_guard import check_partition_files

        p = self.partition(pid)
        prefix = f"partitions/{pid}/"
        files = {name[len(prefix):]: self.members[name] for name in p["files"]}
        check_partition_files(p["backend"], files, f"{self.where or 'artifact'}: {prefix}")
        # Kernel names come back from the manifest (their node mapping lives in the map).
        kernels = [KernelInfo(name=q.split(":", 1)[1], kind="") for q in p.get("kernels", [])]
        return Blob(backend=p["backend"], files=files, meta=p.get("blob_meta") or {},
                    kernels=kernels)

    def backend_options(self, backend: str) -> dict:
        """The options the manifest gives `backend`, each declared by the backend and of a value
        it takes: an artifact, trusted or not, cannot hand a backend a setting it does not know."""
        from .backend import Backend
        from .registry import backend_class

        options = dict(((self.manifest.get("backends") or {}).get(backend) or {})
                       .get("options") or {})
        try:
            declared = set(backend_class(backend).option_names()) | set(Backend.COMMON_OPTIONS)
        except BackendError as e:
            raise ProvmapError(f"{self.where or 'artifact'}: {e}") from None
        unknown = sorted(set(options) - declared)
        if unknown:
            raise ProvmapError(f"{self.where or 'artifact'}: manifest.json: backends."
                               f"{backend}.options: {unknown[0]!r} is not an option of backend "
                               f"{backend!r} (it takes {', '.join(sorted(declared))})")
        for k, v in options.items():  # threads=-1 ran (issue 36)
            if why := backend_class(backend).option_problem(k, v):
                raise ProvmapError(f"{self.where or 'artifact'}: manifest.json: backends."
                                   f"{backend}.options.{k}: {v!r} is refused ({why})")
        return options

    def source_model(self, given=None):
        """The ONNX model to compare against and annotate: see `resolve_model`."""
        return self.resolve_model(given)[0]

    def resolve_model(self, given=None) -> tuple:
        """(model, which): the embedded model, or `given` (a path, bundled:NAME or ModelProto)
        after checking its SHA-256.  `which` is "original" for the model as the user gave it to
        compile, "derived" for provmap's own derived copy (input shapes fixed, nodes sorted,
        shape arithmetic folded), which is accepted too and named as such by the callers."""
        import onnx

        from provmap.provenance.bundled import zoo
        from provmap.provenance.ids import model_sha256  # onnx: not at import (offline start-up)

        info = self.manifest["model"]
        if given is None:
            member = info.get("member")
            if not member:
                given_as = info.get("given_as")
                if not (isinstance(given_as, str) and _SAFE_NAME.fullmatch(given_as)):
                    given_as = None  # a stranger's manifest: printed only when plainly a name
                hint = ""
                if isinstance(given_as, str) and given_as.startswith("bundled:"):
                    hint = f": pass --model {given_as}, the model it was compiled from"
                elif isinstance(given_as, str) and given_as:
                    hint = f": pass --model PATH/{given_as}, the file it was compiled from"
                raise ProvmapError("the artifact does not embed its ONNX model (compile with "
                                   f"--embed-model) and no --model was given{hint}")
            from .onnx_guard import check_onnx_bytes

            model = check_onnx_bytes(self.members[member],
                                     f"{self.where or 'artifact'}: {member}")
            label = "the embedded model"
        else:
            model, label = given, "the given model"
            if not isinstance(given, onnx.ModelProto):
                model, _ = zoo.resolve(str(given))
                label = str(given)
        got = model_sha256(model)
        # Artifacts before the original/derived split recorded only the compiled model's hash.
        original = info.get("sha256")
        derived = info.get("derived_sha256", original)
        if got == original or not original:
            return model, "original"
        if got == derived:
            return model, "derived"
        raise ProvmapError(f"{label} is not the model this artifact was compiled from "
                           f"(SHA-256 {got[:12]}... differs from the manifest's {original[:12]}..."
                           + (f" and its derived copy's {derived[:12]}..." if derived != original
                              else "") + ")")

    def provenance_map(self) -> ProvenanceMap:
        d = schema.parse_json(self.members["map.json"], f"{self.where or 'artifact'}: map.json")
        return ProvenanceMap.from_dict(schema.check_map(d, self.where or "artifact"))

    # -- writing ---------------------------------------------------------------------------
    def save(self, path: str | os.PathLike, record_built: bool = False) -> Path:
        """Write atomically (atomic.write_atomic: temp file beside it, fsync, rename).

        The trust list is written only when the caller builds (`record_built`: compile_model,
        after building this artifact in this process): saving is not trusting, so a script that
        re-saves or copies an artifact never changes what may run here."""
        manifest = dict(self.manifest)
        manifest["members"] = {name: _sha(data) for name, data in sorted(self.members.items())}

        manifest_bytes = json.dumps(manifest, indent=1, sort_keys=True).encode()

        def write(tmp: Path) -> None:
            with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED) as z:
                z.writestr(MANIFEST, manifest_bytes)
                for name, data in sorted(self.members.items()):
                    if isinstance(data, Staged):  # streamed from its file, never in memory
                        info = zipfile.ZipInfo(name, _dt.datetime.now().timetuple()[:6])
                        info.external_attr = 0o600 << 16  # as writestr marks a member
                        with z.open(info, "w", force_zip64=data.size >= 1 << 31) as out:
                            data.write_to(out)
                    else:
                        z.writestr(name, data)

        dest = atomic.write_atomic(path, write)
        self.manifest = manifest
        self.digest = trust.manifest_digest(manifest_bytes)
        if record_built:
            self._record_built(dest)
        return dest

    def _record_built(self, dest: Path) -> None:
        """Your own builds run as they are; only code needs trust, so only code is recorded
        (a rebuild replaces its entry: the file no longer holds the old digest).  An artifact
        read from a file is never recorded, even when asked: its code is not ours."""
        native = trust.native_backends(self.manifest)
        if native and self.built_here:
            trust.add_trusted(self.digest, dest, how="built", backends=native)
        else:
            trust.forget_path(dest)


def _looks_like_onnx(p: Path) -> bool:
    """An .onnx name, or a protobuf starting with ModelProto's ir_version field (tag 0x08)."""
    try:
        with open(p, "rb") as f:
            head = f.read(1)
    except OSError:
        return False
    return p.suffix.lower() == ".onnx" or head == b"\x08"


def read_artifact(path: str | os.PathLike, hash_later: bool = False) -> Artifact:
    """Read and verify an artifact; raise ProvmapError naming the file and the first problem.

    Order matters: the container is checked (archive.StoredZip: a regular file, stored
    members whose sizes fit in it), then the manifest against the schema (artifact_schema),
    then the member list against the manifest, and only then are members read, each hashed
    as it streams; map.json is checked against its schema last.  A partition's weights are
    staged (runtime_module.staged: a file the library reads); with `hash_later` their hashes
    compute in threads while a library loads them and `Artifact.check_pending` waits (module
    load: no runner is handed out before)."""
    p = Path(path)
    try:
        with StoredZip(p) as z:
            names = z.names
            if MANIFEST not in names:
                raise ProvmapError(f"{p}: not a provmap artifact (no {MANIFEST})")
            manifest_bytes = z.read(MANIFEST)
            manifest = schema.parse_json(manifest_bytes, f"{p}: {MANIFEST}")
            schema.check_manifest(manifest, str(p), (FORMAT, READS_VERSIONS))
            expected = manifest["members"]
            # Names were checked with the manifest: no "..", no absolute or drive paths.
            listed = set(names) - {MANIFEST}
            if listed != set(expected):
                extra = sorted(listed - set(expected))
                missing = sorted(set(expected) - listed)
                raise ProvmapError(f"{p}: refused: members do not match the manifest "
                                   f"(unexpected: {extra[:3]}, missing: {missing[:3]})")
            members, pending = {}, []
            for name in sorted(expected):
                if stageable(name, z.size(name)):
                    members[name] = z.stage(name, background=hash_later)
                    pending.append((name, members[name], expected[name]))
                else:
                    members[name] = z.read(name, sha256=expected[name])
            if not hash_later:
                for name, staged, sha in pending:
                    check_staged(str(p), name, staged, sha)
                pending = []
    except zipfile.BadZipFile as e:
        if _looks_like_onnx(p):  # `provmap run model.onnx` said "not a zip file"
            raise ProvmapError(f"{p}: an ONNX model, not a provmap artifact; compile it "
                               f"first: provmap compile {p} -o {p.stem}.provmap") from None
        raise ProvmapError(f"{p}: refused: not a valid artifact file (truncated or corrupted: "
                           f"{e})") from None
    except (zipfile.LargeZipFile, OSError, EOFError, ValueError, NotImplementedError) as e:
        raise ProvmapError(f"{p}: refused: cannot read artifact: {e}") from None
    for member in (manifest.get("constant_outputs") or {}).values():
        schema.check_npy(members[member], f"{p}: {member}")
    if "map.json" in members:
        schema.check_map(schema.parse_json(members["map.json"], f"{p}: map.json"), str(p),
                         manifest)
    return Artifact(manifest=manifest, members=members, pending=pending,
                    digest=trust.manifest_digest(manifest_bytes), where=str(p))


# -- building --------------------------------------------------------------------------------

def build_artifact(view: GraphView, plan: Plan, backends: dict[str, Backend],
                   progress=None, blobs: dict | None = None) -> Artifact:
    """Build every partition of `plan` with its backend and assemble the artifact in memory.

    `blobs` may hold blobs already built for this view, keyed by (sorted op node indices,
    backend name, backend options as JSON); what is built here is added to it, so plans that share partitions (the
    second-level search's proposals) build each once.  Not the structural key: that one
    ignores weight values, and two identical blocks with different weights must not share code.
    The ONNX model itself is embedded afterwards, by `embed_source_model`: the view holds only
    the derived model, and the one to embed is the user's.
    """
    from .partitioned import partitioned_module
    from .index_bounds import index_inputs
    from .subgraph import Subgraph
    from .kernel_sites import kernel_sites, uncomputed

    say = progress or (lambda _msg: None)
    plan = order_plan(view, plan)
    backends = quiet_spinning(plan, backends)
    imp = view.imported
    members: dict[str, bytes] = {}
    parts = []
    kernels: list[Kernel] = []
    sites: list[KernelSite] = []
    site_exprs: list[tuple[str, str, str]] = []
    const = imp.const_exprs
    for p in plan.partitions:
        be = backends.get(p.backend)
        if be is None:
            raise ProvmapError(f"plan {plan.strategy}: backend {p.backend!r} was not configured")
        sub = Subgraph(view, p.ops)
        say(f"building {p.id} on {p.backend} ({len(p.ops)} op node{'s' if len(p.ops) != 1 else ''})")
        bkey = (tuple(sorted(p.ops)), p.backend, json.dumps(be.options(), sort_keys=True,
                                                          default=str))
        blob = (blobs or {}).get(bkey)
        if blob is None:
            try:
                blob = be.build(sub)
            except BackendError as e:
                raise ProvmapError(f"{imp.label}: partition {p.id} ({p.backend}, starting at "
                                   f"{view.describe(p.ops[0])}): {e}") from None
            if blobs is not None:
                blobs[bkey] = blob
        for note in be.build_notes(sub):
            say(f"note: {p.id} ({p.backend}): {note}")
        files = {}
        for name, data in blob.files.items():
            member = f"partitions/{p.id}/{name}"
            members[member] = data
            files[member] = _sha(data)
        src_member = f"partitions/{p.id}/source.txt"
        members[src_member] = blob.source.encode()
        # Provenance: one kernel per (partition, kernel name), one site per KernelInfo.
        ks, ss, es = kernel_sites(view, p.id, p.backend, blob, sub.closure, const)
        kernels += ks
        sites += ss
        site_exprs += es
        knames = [k.name for k in ks]
        folded = uncomputed(view, p.ops, es)
        if folded:
            say(f"{p.id} on {p.backend}: its kernels compute {len(p.ops) - folded} of the "
                f"{len(p.ops)} op nodes it was given; the other {folded} "
                f"{'was' if folded == 1 else 'were'} elided (an alias, "
                f"or constant at these shapes): inspect's node states list them")
        parts.append({
            "id": p.id,
            "backend": p.backend,
            "type_key": f"provmap.{p.backend}",
            "why": p.why,
            "ops": [view.node_ids[i] for i in p.ops],
            "onnx_nodes": [view.node_ids[i] for i in sub.closure],
            "exprs": list(sub.exprs),
            "inputs": [t.to_dict() for t in sub.inputs],
            "outputs": [t.to_dict() for t in sub.outputs],
            "runner_inputs": list(blob.meta.get("input_names", [t.name for t in sub.inputs])),
            "runner_outputs": list(blob.meta.get("output_names", [t.name for t in sub.outputs])),
            "blob_meta": blob.meta,
            "files": files,
            "source": src_member,
            "kernels": knames,
            "key": sub.key,
        })

    pmap = ProvenanceMap(meta=dict(imp.pmap.meta), nodes=list(imp.pmap.nodes),
                         exprs=list(imp.pmap.exprs), kernels=kernels, sites=sites,
                         node_exprs=list(imp.pmap.node_exprs), site_exprs=site_exprs)
    pmap.meta.update({"strategy": plan.strategy, "backends": plan.backends()})
    members["map.json"] = json.dumps(pmap.to_dict(), sort_keys=True).encode()
    with tempfile.TemporaryDirectory(prefix="provmap-map-") as d:
        members["map.sqlite"] = Path(store.save_sqlite(pmap, Path(d) / "map.sqlite")).read_bytes()
    try:
        members["partitioned.relax"] = partitioned_module(view, plan).script().encode()
    except Exception as e:  # a readable extra (TVM raises many types): never a reason to fail
        members["partitioned.relax"] = (f"# the partitioned Relax module could not be printed: "
                                        f"{e}\n").encode()
    constants = {}
    for k, (name, value) in enumerate(view.constant_outputs().items()):
        member = f"constants/{k}.npy"
        buf = io.BytesIO()
        np.save(buf, value, allow_pickle=False)
        members[member] = buf.getvalue()
        constants[name] = member

    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "provmap_version": _provmap_version(),
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "host": host_info(),
        "model": {
            "name": imp.label,
            # The model as the user gave it, and the one provmap compiled (the same unless
            # `derived` says what changed): compare and annotate accept both, by these hashes.
            "sha256": view.source_sha256,
            "derived_sha256": view.model_sha256,
            "derived": list(imp.derived),
            "inputs": [view.spec(n).to_dict() for n in view.graph_inputs],
            # "shape_from": "declaration": nothing computed that shape, the run returns what
            # the backend computes (module.py; provmap.provenance.normalize.reconcile_outputs).
            "outputs": [dict(view.spec(n).to_dict(), **({"shape_from": "declaration"}
                                                        if n in getattr(imp, "output_hints", ()) else {}))
                        for n in dict.fromkeys(view.graph_outputs)],  # once each (ORT runs
            # a graph listing one output twice; the artifact named it twice and refused itself)
            "onnx_nodes": len(view.nodes),
            "op_nodes": len(view.op_nodes),
            "input_shapes_given": dict(imp.input_shapes),
            # the sizes a dynamic artifact serves (provmap.provenance.profile); absent: static
            **({"shape_profile": imp.profile.to_json()} if getattr(imp, "profile", None) else {}),
            "not_compilable_by_tvm": {view.node_ids[i]: why for i, why in imp.opaque.items()},
            "folded_before_import": len(imp.folded),
            "index_inputs": index_inputs(view),
        },
        "strategy": plan.strategy,
        "plan_info": plan.info,
        "backends": {name: backends[name].describe() for name in plan.backends()},
        "partitions": parts,
        "constant_outputs": constants,
        "coverage": pmap.coverage(),
        "warnings": list(imp.warnings),  # said at compile, and by inspect/compare from here
    }
    return Artifact(manifest=manifest, members=members, built_here=True)
