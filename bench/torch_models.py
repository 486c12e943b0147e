"""The PyTorch corpus's models and their export: real architectures from torchvision and
transformers with random weights, exported to ONNX the two ways users do.

Only the parent process of `torch_corpus` imports this (and torch): the steps run in workers
that read the exported files.  Random weights need care or comparisons prove nothing: all-zero
parameters are re-drawn and BatchNorm statistics are estimated from a seeded batch (else
outputs are ~0).  torch, torchvision and transformers come from the optional `[torch]` extra, so
their imports carry `pyright: ignore[reportMissingImports]`: the static import check
(tests/test_static_imports.py) runs in the `[dev]` environment, which lacks them on purpose."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

EXPORTERS = ["torchscript", "dynamo"]


OPSET = {"torchscript": 17, "dynamo": 18}


MAX_IR = 10           # ONNX Runtime 1.32 refuses IR 11+, which onnx 1.23 writes


@dataclass
class Spec:
    """One model: how to build it and feed it."""
    name: str
    family: str
    inputs: dict            # input name -> (shape, dtype, kind) kind: "ids" | "mask" | "image"
    outputs: list
    build: object           # () -> torch.nn.Module taking the inputs positionally
    dynamic: dict = field(default_factory=dict)   # input name -> {axis: dim name}
    vocab: int = 0
    export_batch: int = 1   # batch of the example inputs at export (dynamo needs >1 for a Dim)

    def shape_dict(self, batch: int = 1) -> dict | None:
        """What fixes the exported model's symbolic dims for provmap (None when static)."""
        if not self.dynamic:
            return None
        return {n: [batch if ax == 0 else d for ax, d in enumerate(shape)]
                for n, (shape, _, _) in self.inputs.items()}


# ---- the models -------------------------------------------------------------------------------
SEQ = 16


VOCAB = 1000


def _text_inputs(seq: int = SEQ):
    return {"input_ids": ((1, seq), "int64", "ids"), "attention_mask": ((1, seq), "int64", "mask")}


def _hf(model, outputs):
    """Wrap a transformers model: named tensors in (no *args: torch.export matches dynamic_shapes
    to the signature), a tuple of tensors out."""
    import torch  # pyright: ignore[reportMissingImports]

    class _Base(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def _out(self, out):
            return tuple(getattr(out, o) for o in outputs)

    class Text(_Base):
        def forward(self, input_ids, attention_mask):
            return self._out(self.inner(input_ids=input_ids, attention_mask=attention_mask,
                                        return_dict=True))

    class Image(_Base):
        def forward(self, pixel_values):
            return self._out(self.inner(pixel_values=pixel_values, return_dict=True))

    name = type(model).__name__
    return (Image if name.startswith("ViT") else Text)(model)


def _bert():
    from transformers import BertConfig, BertModel  # pyright: ignore[reportMissingImports]
    cfg = BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=128, max_position_embeddings=64)
    return _hf(BertModel(cfg), ["last_hidden_state", "pooler_output"])


def _distilbert():
    from transformers import DistilBertConfig, DistilBertModel  # pyright: ignore[reportMissingImports]
    cfg = DistilBertConfig(vocab_size=VOCAB, dim=64, n_layers=2, n_heads=4, hidden_dim=128,
                           max_position_embeddings=64)
    return _hf(DistilBertModel(cfg), ["last_hidden_state"])


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel  # pyright: ignore[reportMissingImports]
    cfg = GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=64,
                     use_cache=False, bos_token_id=0, eos_token_id=0)
    return _hf(GPT2LMHeadModel(cfg), ["logits"])


def _vit():
    from transformers import ViTConfig, ViTModel  # pyright: ignore[reportMissingImports]
    cfg = ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=64,
                    num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
    return _hf(ViTModel(cfg), ["last_hidden_state", "pooler_output"])


# ---- user-sized: what users run (issue 35); the toys above stay as the --quick corpus --------
USER_SEQ = 128


def _bert_base():
    from transformers import BertConfig, BertModel  # pyright: ignore[reportMissingImports]
    return _hf(BertModel(BertConfig()), ["last_hidden_state", "pooler_output"])  # 768 x 12


def _gpt2_small():
    from transformers import GPT2Config, GPT2LMHeadModel  # pyright: ignore[reportMissingImports]
    cfg = GPT2Config(use_cache=False)                               # 124M: 768 x 12, vocab 50257
    return _hf(GPT2LMHeadModel(cfg), ["logits"])


def _vit_b16():
    from transformers import ViTConfig, ViTModel  # pyright: ignore[reportMissingImports]
    return _hf(ViTModel(ViTConfig()), ["last_hidden_state", "pooler_output"])  # 224, patch 16


def _yolo():
    from .yolo_like import build
    return build()


def _tv(name):
    def build():
        import torchvision  # pyright: ignore[reportMissingImports]
        return getattr(torchvision.models, name)(weights=None)
    return build


MODELS: dict[str, Spec] = {s.name: s for s in [
    Spec("bert", "transformers BertModel (encoder, attention mask)", _text_inputs(),
         ["last_hidden_state", "pooler_output"], _bert, vocab=VOCAB),
    Spec("bert_dynamic", "the same BertModel with dynamic batch and sequence axes (as users "
         "export for serving)", _text_inputs(), ["last_hidden_state", "pooler_output"], _bert,
         vocab=VOCAB, dynamic={"input_ids": {0: "batch", 1: "seq"},
                               "attention_mask": {0: "batch", 1: "seq"}}, export_batch=2),
    Spec("distilbert", "transformers DistilBertModel", _text_inputs(), ["last_hidden_state"],
         _distilbert, vocab=VOCAB),
    Spec("gpt2", "transformers GPT2LMHeadModel (decoder-only, no past, attention mask)",
         _text_inputs(), ["logits"], _gpt2, vocab=VOCAB),
    Spec("gpt2_dynamic", "the same GPT-2 with dynamic batch and sequence axes", _text_inputs(),
         ["logits"], _gpt2, vocab=VOCAB,
         dynamic={"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}},
         export_batch=2),
    Spec("vit", "transformers ViTModel (32px, patch 8)",
         {"pixel_values": ((1, 3, 32, 32), "float32", "image")},
         ["last_hidden_state", "pooler_output"], _vit),
    Spec("resnet18", "torchvision resnet18, dynamic batch axis",
         {"input": ((1, 3, 224, 224), "float32", "image")}, ["output"], _tv("resnet18"),
         dynamic={"input": {0: "N"}}, export_batch=2),
    Spec("mobilenet_v3_small", "torchvision mobilenet_v3_small",
         {"input": ((1, 3, 224, 224), "float32", "image")}, ["output"],
         _tv("mobilenet_v3_small")),
    Spec("shufflenet_v2", "torchvision shufflenet_v2_x1_0",
         {"input": ((1, 3, 224, 224), "float32", "image")}, ["output"],
         _tv("shufflenet_v2_x1_0")),
    Spec("bert_base", "transformers BertModel, BERT-base config (768 hidden, 12 layers), seq 128",
         _text_inputs(USER_SEQ), ["last_hidden_state", "pooler_output"], _bert_base,
         vocab=30522),
    Spec("gpt2_small", "transformers GPT2LMHeadModel, GPT-2 small (124M), seq 128, no past",
         _text_inputs(USER_SEQ), ["logits"], _gpt2_small, vocab=50257),
    Spec("vit_b16", "transformers ViTModel, ViT-B/16 at 224",
         {"pixel_values": ((1, 3, 224, 224), "float32", "image")},
         ["last_hidden_state", "pooler_output"], _vit_b16),
    Spec("resnet50", "torchvision resnet50",
         {"input": ((1, 3, 224, 224), "float32", "image")}, ["output"], _tv("resnet50")),
    Spec("efficientnet_b0", "torchvision efficientnet_b0",
         {"input": ((1, 3, 224, 224), "float32", "image")}, ["output"], _tv("efficientnet_b0")),
    Spec("mobilenet_v3_large", "torchvision mobilenet_v3_large",
         {"input": ((1, 3, 224, 224), "float32", "image")}, ["output"],
         _tv("mobilenet_v3_large")),
    Spec("yolo_v8n_like", "a YOLOv8n-shaped detector (bench/yolo_like.py) at 640x640",
         {"images": ((1, 3, 640, 640), "float32", "image")}, ["output0"], _yolo),
]}

#: the user-sized models of `provmap bench --user-models` (bench/user_bench.py)
USER_MODELS = ["bert_base", "gpt2_small", "vit_b16", "resnet50", "efficientnet_b0",
               "mobilenet_v3_large", "yolo_v8n_like"]


# ---- building and exporting (the parent process: the only one that imports torch) -----------
def make_feeds(spec: Spec, batch: int = 1, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, (shape, dtype, kind) in spec.inputs.items():
        shape = (batch,) + tuple(shape[1:])
        if kind == "ids":
            feeds[name] = rng.integers(0, spec.vocab, size=shape).astype(dtype)
        elif kind == "mask":  # the last quarter is padding: the mask must matter
            m = np.ones(shape, dtype=dtype)
            m[..., -max(1, shape[-1] // 4):] = 0
            feeds[name] = m
        else:
            feeds[name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def realistic_weights(model, spec: Spec, seed: int = 0) -> None:
    """Re-draw all-zero parameters; estimate BatchNorm statistics from a seeded batch."""
    import torch  # pyright: ignore[reportMissingImports]

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.numel() and not torch.any(p):
                std = 0.1 if p.dim() == 1 else 0.02
                p.copy_(torch.randn(p.shape, generator=g) * std)
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if bns:
        for m in bns:
            m.reset_running_stats()
            m.momentum = None  # cumulative average over the calibration batch
        model.train()
        feeds = make_feeds(spec, batch=8, seed=seed + 1)
        with torch.no_grad():
            model(*[torch.from_numpy(a) for a in feeds.values()])
    model.eval()


def export(spec: Spec, exporter: str, path: Path, seed: int = 0) -> dict:
    """Build, export and save one model; return facts about the file."""
    import onnx
    import torch  # pyright: ignore[reportMissingImports]

    torch.manual_seed(seed)
    model = spec.build()
    realistic_weights(model, spec, seed)
    example = tuple(torch.from_numpy(a) for a in make_feeds(spec, spec.export_batch, seed).values())
    names = list(spec.inputs)
    kw = dict(input_names=names, output_names=list(spec.outputs), opset_version=OPSET[exporter])
    t0 = time.perf_counter()
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            if spec.dynamic:
                kw["dynamic_axes"] = {n: dict(ax) for n, ax in spec.dynamic.items()}
            torch.onnx.export(model, example, str(path), dynamo=False, **kw)
        else:
            if spec.dynamic:
                dims = {d: torch.export.Dim(d, max=64 if d == "seq" else None)
                        for ax in spec.dynamic.values() for d in ax.values()}
                kw["dynamic_shapes"] = tuple(
                    {ax: dims[d] for ax, d in spec.dynamic.get(n, {}).items()} or None
                    for n in names)
            torch.onnx.export(model, example, str(path), dynamo=True, verbose=False, **kw)
    secs = time.perf_counter() - t0
    m = onnx.load(str(path))
    written_ir = m.ir_version
    m.ir_version = min(m.ir_version, MAX_IR)
    # The dynamo exporter may name outputs after its own graph; keep what it wrote.
    onnx.save(m, str(path))
    feeds = make_feeds(spec, 1, seed)
    with torch.no_grad():
        ref_torch = model(*[torch.from_numpy(a) for a in feeds.values()])
    ref_torch = [t.numpy() for t in (ref_torch if isinstance(ref_torch, tuple) else (ref_torch,))]
    return {"seconds": round(secs, 1), "ir_written": written_ir, "ir_saved": m.ir_version,
            "opset": next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx")),
            "nodes": len(m.graph.node), "ops": _op_counts(m),
            "inputs": [i.name for i in m.graph.input],
            "outputs": [o.name for o in m.graph.output],
            "feeds": feeds, "torch_outputs": ref_torch}


def _op_counts(m) -> dict:
    out: dict[str, int] = {}
    for n in m.graph.node:
        k = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}"
        out[k] = out.get(k, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))
