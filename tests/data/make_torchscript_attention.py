"""Writes tests/data/torchscript_attention_dynamic.onnx (the file is committed; this is how it was
made, with the [torch] extra): a tiny attention block exported by torch.onnx.export(dynamo=False,
opset 17) with dynamic batch and sequence axes, so its view/reshape shapes are Shape -> Gather ->
Unsqueeze -> Concat chains that provmap folds once --input-shape fixes the axes.

    python3 tests/data/make_torchscript_attention.py tests/data/torchscript_attention_dynamic.onnx
"""
import sys

import onnx
import torch  # pyright: ignore[reportMissingImports]  (the [torch] extra; not run by the suite)

torch.manual_seed(0)

class Block(torch.nn.Module):
    def __init__(self, d=16, h=2):
        super().__init__()
        self.h, self.d = h, d
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.out = torch.nn.Linear(d, d)
        self.norm = torch.nn.LayerNorm(d)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        def heads(t):
            return t.view(b, s, self.h, self.d // self.h).transpose(1, 2)
        q, k, v = heads(q), heads(k), heads(v)
        att = torch.softmax(q @ k.transpose(-1, -2) / (self.d // self.h) ** 0.5, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, s, self.d)
        return self.norm(x + self.out(y))

m = Block().eval()
x = torch.randn(2, 5, 16)
torch.onnx.export(m, (x,), sys.argv[1], dynamo=False, opset_version=17, input_names=["x"],
                  output_names=["y"], dynamic_axes={"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}})
mp = onnx.load(sys.argv[1])
mp.ir_version = min(mp.ir_version, 8)
onnx.save(mp, sys.argv[1])
print(len(mp.graph.node), [n.op_type for n in mp.graph.node][:40])
