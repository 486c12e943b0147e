"""The `bundled:NAME` names, and the one check of a model argument that needs no library.

Stdlib only, because the command line runs it before importing TVM: TVM's import takes seconds
(it imports torch when torch is installed), and `compile bundled:squeezenett` or `map
missing.onnx` used to wait those seconds to be told the name was wrong (issue 53).  zoo.py,
which builds the models, takes its names from here, so the two cannot disagree."""

from __future__ import annotations

#: The curated light models the tests and the bench run whole.
LIGHT_MODELS = ("resnet50", "squeezenet", "vgg19", "inception_v1", "bvlc_alexnet")
#: Every light model onnx ships, each a ``bundled:NAME`` (issue 36: 5 of the 9 were).
ALL_LIGHT_MODELS = LIGHT_MODELS + ("densenet121", "inception_v2", "shufflenet", "zfnet512")
#: Names accepted after ``bundled:`` by zoo.resolve.
BUNDLED = ALL_LIGHT_MODELS + ("transformer",)

BUNDLED_PREFIX = "bundled:"
#: ``bundled:NAME:original``: a light model with its constant ``ConstantOfShape`` weights.
ORIGINAL_SUFFIX = ":original"


def bundled_name(spec: str) -> tuple[str, bool]:
    """(NAME, whether `:original` was asked) of a ``bundled:`` spec; a ProvmapError for a
    name that is none of BUNDLED, with the close ones."""
    from ..util.errors import ProvmapError, did_you_mean

    name = spec[len(BUNDLED_PREFIX):]
    original = name.endswith(ORIGINAL_SUFFIX)
    if original:
        name = name[: -len(ORIGINAL_SUFFIX)]
    if name in BUNDLED:
        return name, original
    raise ProvmapError(f"{spec}: unknown bundled model {name!r}{did_you_mean(name, BUNDLED) or ';'}"
                       f" expected one of "
                       f"{', '.join(BUNDLED)} (a light model with {ORIGINAL_SUFFIX} appended "
                       "for its constant weights)")


def check_model_spec(spec) -> None:
    """Refuse, as the model's reader would, a bundled name that does not exist or a path that
    is missing or a directory.  What the file holds is the reader's to judge (it needs onnx)."""
    import os

    from ..util.files import refuse_absent_model

    text = os.fspath(spec)
    if text.startswith(BUNDLED_PREFIX):
        bundled_name(text)
    else:
        refuse_absent_model(text)
