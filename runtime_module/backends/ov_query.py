"""Support verdicts when OpenVINO's query_model throws on the whole model: find where.

query_model runs the CPU plugin's transformations, and one that throws takes the whole query
with it.  On an ordinary `quantize_static` QDQ CNN (the fourteenth afternoon) the
low-precision MultiplyPartialTransformation threw on the final Mul, and every node was marked
unsupported with that message, blamed on node #0: greedy and collage silently ran everything
on ONNX Runtime, and excluding Mul changed nothing, though OpenVINO runs all the rest.

So the op nodes are queried in prefixes of the compute order (a prefix is closed under
producers, so it cuts into a model of its own): the shortest prefix that fails ends at the
node the failure is charged to; the prefix before it gets its own verdicts, and the search
goes on from the node after.  Binary search: O(failures x log nodes) queries, each a cut,
a conversion and a query.
"""

from __future__ import annotations

from typing import Callable


class RegionFailed(Exception):
    """query_model (or the cut, or the conversion) failed on a region: the message says why."""


def query_in_segments(ops: list[int], query: Callable[[list[int]], dict],
                      describe: Callable[[int], str]) -> dict:
    """Verdicts for `ops` (in compute order) from `query(region)` -> {node: Support}, which
    raises RegionFailed.  A failing node gets Support(False, why) naming it and the error."""
    from ..backend import Support

    out: dict = {}
    start = 0
    while start < len(ops):
        seg = ops[start:]
        seen: dict[int, dict | str] = {}

        def attempt(k: int):
            if k not in seen:
                try:
                    seen[k] = query(seg[:k])
                except RegionFailed as e:
                    seen[k] = str(e)
            return seen[k]

        if isinstance(attempt(len(seg)), dict):
            out.update(seen[len(seg)])
            break
        lo, hi = 1, len(seg)  # seg[:hi] fails; find the shortest failing prefix
        while lo < hi:
            mid = (lo + hi) // 2
            if isinstance(attempt(mid), dict):
                lo = mid + 1
            else:
                hi = mid
        if hi > 1:
            out.update(attempt(hi - 1))
        culprit = seg[hi - 1]
        out[culprit] = Support(False, f"OpenVINO fails on the region ending at "
                                      f"{describe(culprit)}: {attempt(hi)}")
        start += hi
    return out
