"""The building blocks of the artifact's declared schema (manifest_types, map_types): names,
sizes and counts with the bounds every document shares.

Why bounds at all: an artifact is a stranger's text (docs/security.md).  A name of a megabyte,
a dimension past int64 or a thread count of 1e12 was once an allocation of hundreds of GiB or
a traceback deep inside a command; declared here, msgspec refuses it while it converts the
document, and the same bounds are published in docs/artifact.schema.json."""

from __future__ import annotations

import sys
from typing import Annotated, Literal

from msgspec import Meta

from .options import MAX_THREADS

MAX_DEPTH = 32           # nesting of free-form parts (plan_info, blob_meta, host, coverage)
MAX_NAME = 4096          # characters in one name (tensor, node, kernel, member)
MAX_TEXT = 1 << 20       # characters in one free text (why, warnings, reasons)
INT64_MAX = 2**63 - 1

Name = Annotated[str, Meta(max_length=MAX_NAME)]
NonEmptyName = Annotated[str, Meta(min_length=1, max_length=MAX_NAME)]
Text = Annotated[str, Meta(max_length=MAX_TEXT)]
#: a size, count or dimension: what numpy and the backends take (int64)
Count = Annotated[int, Meta(ge=0, le=INT64_MAX)]
Sha256 = Annotated[str, Meta(pattern=r"^[0-9a-f]{64}$",
                              description="a SHA-256 (64 lowercase hex digits)")]
#: a partition id names a folder of the artifact (partitions/<id>/): no separators, no dots
PartitionId = Annotated[str, Meta(pattern=r"^[A-Za-z0-9_-]{1,64}$", description="a partition "
                                   "id (1 to 64 letters, digits, _ or -)")]
#: relative, inside the artifact: no leading / or \, no drive (:), no `..` segment, so a tool
#: extracting members cannot be steered out of its directory
_MEMBER = r"^(?!(.*/)?\.\.(/|$))[A-Za-z0-9_.\-]+(/[A-Za-z0-9_.\-]+)*"
_INSIDE = "(relative, no .. segment, no drive, letters, digits and _ . - / only)"
MemberName = Annotated[str, Meta(max_length=MAX_NAME, pattern=_MEMBER + "$",
                                 description=f"a member name inside the artifact {_INSIDE}")]
NpyMember = Annotated[str, Meta(max_length=MAX_NAME, pattern=_MEMBER + r"\.npy$",
                                description=f"an .npy member inside the artifact {_INSIDE}")]
#: a dimension as TIR prints it over the profile's symbols (`past + 1`, `seq * 2 // 3`)
DimText = Annotated[str, Meta(pattern=r"^[A-Za-z0-9_ +\-*/%()]{1,64}$", description="a "
                               "dimension over the profile's symbols (at most 64 characters of "
                               "integers, names, + - * / % and parentheses)")]
#: Python reads NaN, Infinity and 1e400 as floats; a report's JSON.parse does not (a blank page)
Finite = Annotated[float, Meta(ge=-sys.float_info.max, le=sys.float_info.max)]
Threads = Annotated[int, Meta(ge=1, le=MAX_THREADS)]

#: what provenance.util.dtypes.onnx_dtype names ONNX's element types (numpy's names, ml_dtypes'
#: for the narrow floats, "object" for strings): any other text is no tensor element type
DType = Literal[
    "float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64", "uint8",
    "uint16", "uint32", "uint64", "bool", "object", "complex64", "complex128", "float8_e4m3fn",
    "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "float6_e2m3fn",
    "float6_e3m2fn", "float4_e2m1fn", "int4", "uint4", "int2", "uint2"]
