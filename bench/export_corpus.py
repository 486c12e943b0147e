"""Export the PyTorch corpus (bench/torch_models.py) as static-shape ONNX files for `provmap bench`.

The bench compares backends on fixed shapes (a search prices one shape), so symbolic
dimensions are fixed to the spec's batch 1 (`provmap.provenance.shapes.apply_input_shapes`, what
`--input-shape` does).  Needs the optional `[torch]` extra.

    provmap bench export_corpus -o /tmp/corpus            # every model, dynamo
    provmap bench /tmp/corpus/*.onnx --backends onnxruntime,openvino
"""

from __future__ import annotations

import sys
from pathlib import Path

from .torch_models import EXPORTERS, MODELS, export

#: one of each architecture family; the *_dynamic twins differ only in their axes; the
#: user-sized models (torch_models.USER_MODELS) are `provmap bench --user-models`' own
DEFAULT = ["bert", "distilbert", "gpt2", "vit", "resnet18", "mobilenet_v3_small",
           "shufflenet_v2"]


def export_static(name: str, exporter: str, out_dir: Path, facts: dict | None = None) -> Path:
    """Export `name` to out_dir/NAME.onnx; `facts`, when given, receives the export's facts
    (torch_models.export's dict: seconds, nodes, ops, opset, feeds, torch outputs)."""
    import onnx

    from provmap.provenance.shapes import apply_input_shapes

    spec = MODELS[name]
    path = out_dir / f"{name}.onnx"
    info = export(spec, exporter, path)
    if facts is not None:
        facts.update(info)
    shapes = spec.shape_dict(1)
    if shapes:
        model = apply_input_shapes(onnx.load(str(path)), shapes, name)
        onnx.save(model, str(path))
    return path


def main(argv=None) -> int:
    from .steps import parser

    ap = parser("export_corpus", __doc__, output=None)
    ap.add_argument("-o", "--output", required=True, help="directory for NAME.onnx files")
    ap.add_argument("--models", default=",".join(DEFAULT))
    ap.add_argument("--exporter", default="dynamo", choices=EXPORTERS)
    a = ap.parse_args(argv)
    out = Path(a.output)
    out.mkdir(parents=True, exist_ok=True)
    for name in [m for m in a.models.split(",") if m]:
        if name not in MODELS:
            print(f"export_corpus: unknown model {name!r}; known: {', '.join(MODELS)}",
                  file=sys.stderr)
            return 2
        print(f"export_corpus: {name} ({a.exporter})", file=sys.stderr, flush=True)
        print(export_static(name, a.exporter, out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
