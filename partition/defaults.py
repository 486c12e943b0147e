"""The defaults the command line shows in its help: a module of their own, importing nothing,
so that building the argument parser does not import the search (and with it TVM)."""

from __future__ import annotations

DEFAULT_STRATEGY = "collage"

#: Collage's backends when none are named.  TVM is opt-in (`collage:tvm,onnxruntime,openvino`
#: or `--backends`): untuned, it never won a subgraph in any search here, and pricing its
#: candidates adds 5-20 minutes to a cold search.
DEFAULT_COLLAGE_BACKENDS = ["onnxruntime", "openvino"]

#: Measuring time of a search started without one (--search-budget, provmap.compile): past it
#: only single ops and whole-model plans are measured.  Cold searches of the bundled models on
#: 2 cores measure for 25-145 s without a limit (docs/results.md's bench); 120 s leaves most of them
#: whole and keeps the slowest (VGG-19, Inception v1) to a few minutes.  None: no limit.
DEFAULT_SEARCH_BUDGET_S = 120.0
