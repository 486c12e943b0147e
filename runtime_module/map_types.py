"""map.json (docs/map-schema.md) and `provmap profile --json` files, declared.

Why records forbid unknown fields and manifests do not: the map's records are read into
ProvenanceMap's dataclasses field by field, so a field provmap does not know is an edit, never
a newer writer's addition; the manifest is read by key and a newer provmap may add some.
Why the join tables name their roles: lookup prints a role as given, and a stranger's
"<script>" was printed (the twelfth afternoon); only the two each table documents are read.
Which ids the tables join, and whether the map agrees with the manifest: member_schema."""

from __future__ import annotations

from typing import Any, Literal

from msgspec import Struct

from provmap.provenance.model import ROLE_COMPUTE, ROLE_CONSTANT, ROLE_FOLDED, ROLE_PRODUCED

from .schema_types import Count, Finite, Name, Sha256, Text


NodeRole = Literal[ROLE_PRODUCED, ROLE_FOLDED]  # type: ignore[valid-type]
SiteRole = Literal[ROLE_COMPUTE, ROLE_CONSTANT]  # type: ignore[valid-type]


class OnnxNode(Struct, kw_only=True, forbid_unknown_fields=True):
    id: Text
    name: Text
    op_type: Text
    domain: Text
    index: Count
    inputs: list[Name]
    outputs: list[Name]
    #: why the node produced no code (an Identity...), or null
    elided: Text | None = None


class RelaxExpr(Struct, kw_only=True, forbid_unknown_fields=True):
    id: Text
    function: Text
    var: Text
    op: Text
    shape: Text | None
    dtype: Text | None
    index: Count


class Kernel(Struct, kw_only=True, forbid_unknown_fields=True):
    name: Text
    function: Text
    backend: Text
    kind: Text


class KernelSite(Struct, kw_only=True, forbid_unknown_fields=True):
    id: Text
    kernel: Text
    caller: Text
    ordinal: Count


class ProvenanceMap(Struct, kw_only=True):
    """map.json of a provmap artifact: the provenance map (docs/map-schema.md)."""
    schema_version: Literal[1]
    onnx_nodes: list[OnnxNode]
    relax_exprs: list[RelaxExpr]
    kernels: list[Kernel]
    kernel_sites: list[KernelSite]
    node_exprs: list[tuple[Name, Name, NodeRole]]  # [onnx node id, relax expr id, role]
    site_exprs: list[tuple[Name, Name, SiteRole]]  # [kernel site id, relax expr id, role]
    meta: dict[str, Any] = {}


class ProfiledPartition(Struct, kw_only=True):
    partition: Name
    ms: Finite | None = None


class ProfiledNode(Struct, kw_only=True):
    id: Name
    ms: Finite | None = None
    shared_with: list[Name] | None = None


class Profile(Struct, kw_only=True):
    """`provmap profile --json`, read back by `report --profile` and `overlays --profile`."""
    partitions: list[ProfiledPartition]
    onnx_nodes: list[ProfiledNode] | None = None
    e2e_ms: Finite | None = None
    artifact_digest: Sha256 | None = None
