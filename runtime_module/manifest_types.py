"""manifest.json, declared: what every field holds, which may be absent, and the bounds that
keep a stranger's manifest from becoming a traceback or an impossible allocation.

Why declared (issue 53): the hand-written typed checks this replaces said the same less
readably and could not be handed to another tool.  msgspec converts the types of 100,000
partitions in 0.3 s (the old checks: 1.2 s), and schema_publish turns these classes into
docs/artifact.schema.json.  What types cannot say (a partition's files are members with those
hashes, a tensor fits in memory, a runner reads what an earlier partition made) is checked
after conversion by artifact_schema and manifest_flow.  Fields a class does not name are
ignored, as provmap always did with fields a newer provmap adds."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import UNSET, Meta, Struct, UnsetType

from .index_bounds import INDEXED_OPS
from .schema_types import (Count, DimText, DType, Finite, MemberName, Name, NonEmptyName,
                           NpyMember, PartitionId, Sha256, Text, Threads)

#: free-form JSON (shown, never interpreted): only its depth and sizes are bounded, by code
Free = dict[str, Any]
#: a backend option's value; lists only for only_ops/exclude_ops (checked by code)
OptionValue = (Annotated[str, Meta(max_length=4096)] | int | Finite | bool | None
               | list[Annotated[str, Meta(max_length=128)]])


class Tensor(Struct, kw_only=True):
    """A graph or partition boundary tensor.  A dimension is null where the shape profile
    decides it at run time; `bytes` is the size of the static shape (a 0 dim counts 1)."""
    name: Name
    dtype: DType
    shape: Annotated[list[Count | None], Meta(max_length=64)]
    bytes: Count
    #: per dimension, what an open one is in the profile's symbols (`past + 1`)
    symbols: Annotated[list[DimText | None], Meta(max_length=64)] | None = None


class IndexUse(Struct, kw_only=True):
    """A graph input read straight as indices by `node`: run refuses an index outside
    -size..size-1 (one axis: `size`; GatherND/ScatterND: `sizes`, one per column)."""
    node: Name
    op: Literal[INDEXED_OPS]  # type: ignore[valid-type]
    size: Count | UnsetType = UNSET
    sizes: Annotated[list[Count], Meta(min_length=1, max_length=64)] | UnsetType = UNSET


class ShapeProfile(Struct, forbid_unknown_fields=True):
    """A dynamic artifact's input dims (a size, or a symbol) and each symbol's [min, opt, max]."""
    inputs: Annotated[dict[Name, Annotated[list[Count | Name], Meta(max_length=64)]],
                      Meta(max_length=65536)]
    symbols: Annotated[dict[Name, tuple[Count, Count, Count]], Meta(max_length=4096)]


class Model(Struct, kw_only=True):
    name: Text
    sha256: Sha256
    inputs: list[Tensor]
    #: every model provmap compiles has an output (`run` wrote an empty .npz, exit 0)
    outputs: Annotated[list[Tensor], Meta(min_length=1)]
    derived: list[Text] | None = None
    derived_sha256: Sha256 | UnsetType = UNSET
    onnx_nodes: Count | UnsetType = UNSET
    op_nodes: Count | UnsetType = UNSET
    folded_before_import: Count | UnsetType = UNSET
    input_shapes_given: dict[Name, Annotated[list[Count], Meta(max_length=64)]] = {}
    shape_profile: ShapeProfile | UnsetType = UNSET
    not_compilable_by_tvm: dict[Name, Text] = {}
    member: MemberName | None = None
    member_is: Name | None = None
    given_as: Name | UnsetType = UNSET
    #: older artifacts hold one use per input, newer a list
    index_inputs: dict[Name, IndexUse | Annotated[list[IndexUse], Meta(max_length=10_000)]] = {}


class Backend(Struct, kw_only=True):
    version: Name
    options: dict[Annotated[str, Meta(max_length=128)], OptionValue]
    name: Name | UnsetType = UNSET  # read by scripts; must be the entry's own key


class BlobMeta(Struct, kw_only=True):
    """What the backend recorded about a partition's blob (more fields are free-form)."""
    #: every backend here runs on the CPU
    device: Literal["CPU"] = "CPU"
    input_names: list[Name] | None = None
    output_names: list[Name] | None = None
    #: must equal the backend's options: a precision only the blob records runs unseen
    precision: Name | UnsetType = UNSET


class Partition(Struct, kw_only=True):
    id: PartitionId
    backend: NonEmptyName
    type_key: Name
    ops: list[Name]
    onnx_nodes: list[Name]
    inputs: list[Tensor]
    outputs: list[Tensor]
    files: dict[MemberName, Sha256]
    source: MemberName
    kernels: list[Name]
    why: Text = ""
    exprs: list[Name] = []
    runner_inputs: list[Name] = []
    runner_outputs: list[Name] = []
    blob_meta: BlobMeta | UnsetType = UNSET
    key: Name | UnsetType = UNSET


class Schedule(Struct, kw_only=True):
    """Stages of partition ids run in order, the partitions of one stage at once."""
    stages: list[list[Name]]
    threads: dict[Name, Threads] | None = None
    why: Text = ""


class Manifest(Struct, kw_only=True):
    """manifest.json of a provmap artifact (docs/artifact.md)."""
    format: Literal["provmap-artifact"]
    format_version: Literal[1, 2]
    members: dict[MemberName, Sha256]
    model: Model
    strategy: Name
    backends: dict[NonEmptyName, Backend]
    partitions: Annotated[list[Partition], Meta(max_length=1_000_000)]
    host: Free | None
    created_utc: Name
    coverage: Free | None
    provmap_version: Name | UnsetType = UNSET
    plan_info: Free | None = None
    warnings: list[Text] = []
    constant_outputs: dict[Name, NpyMember] | None = None
    schedule: Schedule | None = None
