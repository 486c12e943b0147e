"""`provmap bench --user-models`: the bench on the models users run (issue 35), in one command.

BERT-base and GPT-2 small at seq 128, ViT-B/16 at 224, ResNet-50, EfficientNet-B0,
MobileNet-v3-large and a YOLOv8n-shaped detector at 640 (bench/torch_models.py USER_MODELS),
exported the way users export them (`torch.onnx.export`, dynamo by default, random seeded
weights made realistic by torch_models.realistic_weights), generated on the fly into a cache
directory and never committed.  The toy corpus stays the `--quick` run.

Why the export runs in a child process: importing torch loads its own OpenMP runtime and
thread pools into the process, and the bench process must measure ONNX Runtime and OpenVINO
as a user's serving process has them, without a third pool on the same 2 cores.  The child is
this module (`python -m provmap.bench.user_bench --export NAME ...`).

Why these settings (user_options): tens-of-ms models need fewer repeats than 0.05 ms toys for
the same confidence, and each alternative's block lasts >= 1 s anyway; the cold search gets a
larger budget (the issue's target: under 10 minutes each here); untuned TVM is left out by
default (10-100x slower on these models, `--backends` adds it back).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from provmap.provenance.util.errors import ProvmapError

EXPORTERS = ("dynamo", "torchscript")


def user_model_names() -> list[str]:
    """Without importing torch: the list lives beside the specs."""
    from .torch_models import USER_MODELS

    return list(USER_MODELS)


def models_dir() -> Path:
    """Beside the cost cache ($PROVMAP_CACHE's folder, else ~/.cache/provmap): user-models/."""
    env = os.environ.get("PROVMAP_CACHE")
    base = Path(env).parent if env else Path.home() / ".cache" / "provmap"
    return base / "user-models"


def torch_available() -> bool:
    import importlib.util

    return all(importlib.util.find_spec(m) is not None
               for m in ("torch", "torchvision", "transformers"))


def model_path(name: str, exporter: str, out_dir: Path) -> Path:
    return Path(out_dir) / exporter / f"{name}.onnx"


def prepare(names: list[str], out_dir: Path | None = None, exporter: str = "dynamo",
            progress=None) -> list[str]:
    """The ONNX files of `names`, exporting the missing ones (one child process each)."""
    from .user_variants import make, split

    say = progress or (lambda m: None)
    known = user_model_names()
    variants = {n: split(n) for n in names}
    bad = [n for n in names if variants[n][0] not in known]
    if bad:
        raise ProvmapError(f"--user-models: unknown model(s) {', '.join(bad)}; known: "
                           f"{', '.join(known)}")
    if exporter not in EXPORTERS:
        raise ProvmapError(f"--exporter {exporter!r}: one of {', '.join(EXPORTERS)}")
    out_dir = Path(out_dir or models_dir())
    paths = []
    for full in names:
        n, variant = variants[full]
        p = model_path(n, exporter, out_dir)
        if not p.exists():
            if not torch_available():
                raise ProvmapError(
                    f"{p}: not exported yet, and exporting needs the [torch] extra (torch, "
                    "torchvision, transformers): pip install -e '.[torch]'")
            say(f"[{n}] exporting ({exporter}) into {p.parent}")
            r = subprocess.run([sys.executable, "-m", "provmap.bench.user_bench", "--export", n,
                                "--exporter", exporter, "-o", str(out_dir)],
                               capture_output=True, text=True)
            if r.returncode != 0 or not p.exists():
                raise ProvmapError(f"exporting {n} ({exporter}) failed:\n{r.stderr[-3000:]}")
        if variant is not None:
            p = make(str(p), variant, lambda m, full=full: say(f"[{full}] {m}"))
        paths.append(str(p))
    return paths


def export_one(name: str, exporter: str, out_dir: Path) -> Path:
    """In the child: export, fix symbolic dims to batch 1, write NAME.onnx and NAME.json (the
    export's facts) atomically."""
    from .export_corpus import export_static

    final = model_path(name, exporter, out_dir)
    final.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=final.parent, prefix=f".{name}-") as d:
        info: dict = {}
        path = export_static(name, exporter, Path(d), info)
        facts = {k: v for k, v in info.items() if k not in ("feeds", "torch_outputs")}
        final.with_suffix(".json").write_text(json.dumps(facts, indent=1))
        # the dynamo exporter may write the weights beside the file; one file is what we keep
        import onnx

        m = onnx.load(str(path))
        onnx.save(m, str(final) + ".tmp")
        os.replace(str(final) + ".tmp", final)
    return final


def user_options(paths: list[str], **kw):
    from .suite import SuiteOptions

    base = dict(models=list(paths), backends=["onnxruntime", "openvino"], repeats=10, passes=3,
                scaling_sizes=[], provenance_repeats=0, search_budget_s=300.0,
                refine_budget_s=120.0)
    base.update({k: v for k, v in kw.items() if v is not None})
    return SuiteOptions(**base)


def main(argv=None) -> int:
    from .steps import parser

    ap = parser("user_bench", __doc__, output=None)
    ap.add_argument("--export", metavar="NAME", help="export one user-sized model (the child "
                    "process of `provmap bench --user-models`)")
    ap.add_argument("--exporter", default="dynamo", choices=EXPORTERS)
    ap.add_argument("-o", "--output", help="models directory (default: beside the cost cache)")
    ap.add_argument("--list", action="store_true", help="print the user-sized model names")
    a = ap.parse_args(argv)
    if a.list:
        print("\n".join(user_model_names()))
        return 0
    out = Path(a.output) if a.output else models_dir()
    if a.export:
        print(export_one(a.export, a.exporter, out))
        return 0
    for p in prepare(user_model_names(), out, a.exporter, progress=lambda m: print(m,
                                                                                  file=sys.stderr)):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
