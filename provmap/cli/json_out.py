"""JSON that strict parsers accept: a float that is not finite is written `null`.

Why: Python's json writes NaN and Infinity as bare `NaN`/`Infinity`, which is not JSON; a
stranger's manifest may hold them in free-form fields (`host`, `plan_info`: Python's reader
accepts them), and `inspect --json` printed them, so `jq` and JavaScript's JSON.parse refused
the whole output (issue 52).  `null` is what JavaScript's own JSON.stringify writes for them.
"""

from __future__ import annotations

import json
import math


def finite(x):
    """`x` with every non-finite float (at any depth of dicts, lists, tuples) as None."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite(v) for v in x]
    return x


def strict_dumps(obj, **kw) -> str:
    """json.dumps of `obj` with non-finite floats as null (never NaN/Infinity)."""
    return json.dumps(finite(obj), allow_nan=False, **kw)


#: Every command's --json indents this much.  Why one value: inspect and lookup indented 2,
#: compare, profile, bisect, explain and `trust --list` 1, report and annotate not at all (issue
#: 52); a script diffing two commands' output, or a reader, met three layouts of one tool.
INDENT = 2


def print_json(obj) -> None:
    """A command's --json answer on stdout: strict (`strict_dumps`) and indented as all are."""
    print(strict_dumps(obj, indent=INDENT))
