"""The artifact file: writing it and verifying it when read (building one: artifact_build.py).

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
import json
import os
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from provmap.provenance.util.errors import ProvmapError
from provmap.provenance.model import ProvenanceMap
from provmap.provenance.util import atomic

from . import artifact_schema as schema, trust
from .staged import Staged, digest, stageable
from .archive import StoredZip, check_staged
from .backend import BackendError, Blob, KernelInfo

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
        manifest["members"] = {name: digest(data) for name, data in sorted(self.members.items())}

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
                if not stageable(name, z.size(name)):
                    members[name] = z.read(name, sha256=expected[name])
                    continue
                members[name] = z.stage(name, background=hash_later)
                if hash_later:
                    pending.append((name, members[name], expected[name]))
                else:
                    check_staged(str(p), name, members[name], expected[name])
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
