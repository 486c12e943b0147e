"""An artifact made from another without building anything: the same members under another
schedule, or with the user's model embedded.  Beside artifact.py, which builds and reads them:
the second level and the schedule search derive many such artifacts from one build."""

from __future__ import annotations

import json

from provmap.provenance.util.errors import ProvmapError

from .artifact import FORMAT_VERSION, SCHEDULED_VERSION, SOURCE_MODEL, Artifact


def with_schedule(art: Artifact, schedule: dict | None) -> Artifact:
    """The same artifact (members shared, nothing rebuilt) run under `schedule`
    (provmap.runtime_module.schedule; None or a one-partition-per-stage schedule without
    threads: serial, version 1)."""
    from .schedule import check_schedule, is_concurrent

    manifest = json.loads(json.dumps(art.manifest))
    manifest.pop("schedule", None)
    manifest["format_version"] = FORMAT_VERSION
    if schedule and (is_concurrent(schedule) or schedule.get("threads")):
        check_schedule(manifest["partitions"], schedule)
        manifest["schedule"] = json.loads(json.dumps(schedule))
        manifest["format_version"] = SCHEDULED_VERSION
    return Artifact(manifest=manifest, members=art.members, where=art.where,
                    built_here=art.built_here, pending=art.pending)  # its checks, shared


def embed_source_model(art: Artifact, model) -> None:
    """Store the ONNX model in the artifact (compile --embed-model), so compare, annotate and
    bisect work from the artifact alone; it roughly doubles the file (weights stored twice).
    The user's model as given, or, when only the derived one is at hand, that (named so by its
    hash)."""
    from provmap.provenance.ids import model_sha256
    from provmap.provenance.weights import serialize

    info = art.manifest["model"]
    digest = model_sha256(model)
    if digest not in (info["sha256"], info.get("derived_sha256")):
        raise ProvmapError("embed_source_model: not the model this artifact was compiled from")
    art.members[SOURCE_MODEL] = serialize(model)
    info["member"] = SOURCE_MODEL
    info["member_is"] = "original" if digest == info["sha256"] else "derived"
