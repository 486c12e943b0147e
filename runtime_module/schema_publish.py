"""The artifact's schema as JSON Schema (docs/artifact.schema.json), for tools that read
artifacts without provmap.  Generated from the declared types, never written by hand, so it
says exactly what provmap checks on read (tests/test_artifact_schema.py compares the committed
file with this output).  Regenerate after changing manifest_types or map_types:

    python -m provmap.runtime_module.schema_publish > docs/artifact.schema.json
"""

from __future__ import annotations

import json

import msgspec

from .manifest_types import Manifest
from .map_types import ProvenanceMap

_ABOUT = ("manifest.json of a provmap artifact (docs/artifact.md); its member map.json is "
          "#/$defs/ProvenanceMap (docs/map-schema.md).  Generated from "
          "provmap.runtime_module.manifest_types and map_types.  What a type cannot state is "
          "checked by provmap when it reads an artifact, beyond this schema: every member "
          "named is in the archive with its hash, tensors fit in memory and match their "
          "bytes, partitions read only what earlier ones make, and map.json names the nodes "
          "and kernels the partitions do (docs/security.md).")


def json_schema() -> dict:
    (manifest, _pmap), defs = msgspec.json.schema_components([Manifest, ProvenanceMap])
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "provmap artifact", "description": _ABOUT, **manifest, "$defs": defs}


def text() -> str:
    """The file's exact text (sorted keys, two-space indents, a final newline)."""
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    print(text(), end="")
