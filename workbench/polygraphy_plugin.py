"""provmap in Polygraphy: a runner for `polygraphy run MODEL --onnxrt --provmap ART`, and
RunResults files from `provmap run --save-outputs`.

Vendors debugging a backend already compare runners with `polygraphy run` (and bisect with
`polygraphy debug reduce`); this puts provmap's artifact beside ONNX Runtime there, in one
command, with Polygraphy's own tolerances, reports and exit status.  The plugin is found through
the `polygraphy.run.plugins` entry point in provmap's packaging (the `[polygraphy]` extra
installs Polygraphy); this module imports Polygraphy at import time, so only that entry point
and `provmap run --save-outputs` import it.

The runner is selected by `--provmap ART`: Polygraphy gives each runner a value-less selector
flag, so the selector here is `--provmap-runner`, and `--provmap ART` both names the artifact
and selects the runner, in the order given among the other runners.
"""

from __future__ import annotations

import argparse
import time
from collections import OrderedDict

import numpy as np
from polygraphy import util  # pyright: ignore[reportMissingImports]
from polygraphy.logger import G_LOGGER  # pyright: ignore[reportMissingImports]
from polygraphy.backend.base import BaseRunner  # pyright: ignore[reportMissingImports]
from polygraphy.common import TensorMetadata  # pyright: ignore[reportMissingImports]
from polygraphy.datatype import DataType  # pyright: ignore[reportMissingImports]
from polygraphy.tools.args import util as args_util  # pyright: ignore[reportMissingImports]
from polygraphy.tools.args.base import BaseRunnerArgs  # pyright: ignore[reportMissingImports]
from polygraphy.tools.script import make_invocable  # pyright: ignore[reportMissingImports]

SELECTOR = "provmap-runner"


class ProvmapRunner(BaseRunner):
    """Runs a provmap artifact end to end (every partition on its backend)."""

    def __init__(self, artifact: str, trust: bool = False, name: str | None = None):
        super().__init__(name=name, prefix="provmap-runner")
        self.artifact = str(artifact)
        self.trust = trust

    def activate_impl(self):
        from provmap.provenance.util.errors import ProvmapError
        from provmap.runtime_module.module import load

        try:
            self.mod = load(self.artifact, trust=self.trust)
        except ProvmapError as e:  # Polygraphy prints its own exception as one line, no trace
            G_LOGGER.critical(f"provmap: {e}")

    def get_input_metadata_impl(self):
        meta = TensorMetadata()
        for t in self.mod.manifest["model"]["inputs"]:
            meta.add(t["name"], dtype=DataType.from_dtype(np.dtype(t["dtype"])),
                     shape=list(t["shape"]))
        return meta

    def infer_impl(self, feed_dict):
        feeds = {k: np.asarray(util.array.to_numpy(v)) for k, v in feed_dict.items()}
        start = time.perf_counter()
        outs = self.mod.run(feeds)
        self.inference_time = time.perf_counter() - start
        return OrderedDict((t["name"], outs[t["name"]])
                           for t in self.mod.manifest["model"]["outputs"])

    def deactivate_impl(self):
        del self.mod


class _SelectWithArtifact(argparse.Action):
    """`--provmap ART`: the artifact, and this runner's place among the selected runners."""

    def __call__(self, parser, namespace, values, option_string=None):
        namespace.provmap_artifact = values
        if not isinstance(getattr(namespace, "runners", None), list):
            namespace.runners = []
        namespace.runners.append(SELECTOR)


class ProvmapRunnerArgs(BaseRunnerArgs):
    """provmap: running a provmap artifact (each partition on its backend)."""

    def get_name_opt_impl(self):
        return "provmap", SELECTOR

    def get_extra_help_text_impl(self):
        return "Give --provmap ART instead, which names the artifact and selects this runner."

    def add_parser_args_impl(self):
        self.group.add_argument("--provmap", metavar="ARTIFACT", action=_SelectWithArtifact,
                                help="compare this provmap artifact (provmap compile -o ...) "
                                "with the other runners")
        self.group.add_argument("--provmap-trust", action="store_true", default=None,
                                help="run native code (TVM partitions) from the artifact "
                                "although this machine did not build it (see `provmap trust`)")

    def parse_impl(self, args):
        self.artifact = args_util.get(args, "provmap_artifact")
        self.trust = bool(args_util.get(args, "provmap_trust"))

    def add_to_script_impl(self, script):
        if not self.artifact:
            raise SystemExit("polygraphy: the provmap runner needs the artifact: --provmap ART")
        script.add_import(imports=["ProvmapRunner"], frm="provmap.workbench.polygraphy_plugin")
        script.add_runner(make_invocable("ProvmapRunner", self.artifact, trust=self.trust))


def argument_groups():
    """The `polygraphy.run.plugins` entry point: the argument groups provmap adds to run."""
    return [ProvmapRunnerArgs()]


def save_run_results(outputs: dict, path, runner_name: str) -> None:
    """`outputs` as a Polygraphy RunResults file (one runner, one iteration), which
    `polygraphy run MODEL --onnxrt --load-outputs FILE` compares with its own runners."""
    from polygraphy.comparator import IterationResult, RunResults  # pyright: ignore[reportMissingImports]

    from provmap.provenance.util.atomic import write_atomic

    results = RunResults()
    results.append((runner_name, [IterationResult(OrderedDict(outputs), runner_name=runner_name)]))
    write_atomic(path, lambda tmp: results.save(str(tmp)))


def save_inputs_json(path, feeds: dict) -> None:
    """`feeds` as Polygraphy's inputs file (a JSON list of feed dicts), which `polygraphy run
    --load-inputs FILE` feeds to its runners: the same inputs the artifact ran on."""
    from polygraphy.json import save_json  # pyright: ignore[reportMissingImports]

    from provmap.provenance.util.atomic import write_atomic

    write_atomic(path, lambda tmp: save_json([OrderedDict(feeds)], str(tmp)))
