"""A YOLOv8n-shaped detector in plain torch, for the user-sized bench (issue 35).

Why build one: no PyPI package checked ships a YOLO .onnx file in its wheel (onnx-predict-yolov8
1.0.6 holds only code), hub downloads do not work here, and ultralytics' own export needs its
weights.  This follows YOLOv8n's published layout (width 0.25, depth 0.33: C2f blocks, SPPF,
an FPN/PAN neck, a decoupled head with distribution focal loss decoding over 16 bins) so its
ONNX graph has the ops and sizes a user's `yolo export format=onnx` file has: Conv+SiLU
(Sigmoid*Mul), Split, Concat, Resize, MaxPool, Softmax, the anchor arithmetic, and a
(1, 84, 8400) output at 640x640.  torch is imported inside `build` only (`[torch]` extra)."""

from __future__ import annotations

SIZE = 640
CLASSES = 80
REG_MAX = 16


def build(width: float = 0.25, depth: float = 0.33, classes: int = CLASSES, size: int = SIZE,
          dynamic: bool = False):
    """`dynamic`: the anchors computed in the graph from the feature maps' sizes, as
    Ultralytics' exporter writes them for `dynamic=True` (a buffer for 640x640 otherwise: the
    model then runs at that size only)."""
    import torch  # pyright: ignore[reportMissingImports]
    from torch import nn  # pyright: ignore[reportMissingImports]

    def ch(c):
        return max(16, int(c * width))

    def reps(n):
        return max(1, round(n * depth))

    class Conv(nn.Module):
        def __init__(self, ci, co, k=1, s=1):
            super().__init__()
            self.conv = nn.Conv2d(ci, co, k, s, k // 2, bias=False)
            self.bn = nn.BatchNorm2d(co)
            self.act = nn.SiLU()

        def forward(self, x):
            return self.act(self.bn(self.conv(x)))

    class Bottleneck(nn.Module):
        def __init__(self, c, shortcut):
            super().__init__()
            self.cv1, self.cv2, self.add = Conv(c, c, 3), Conv(c, c, 3), shortcut

        def forward(self, x):
            y = self.cv2(self.cv1(x))
            return x + y if self.add else y

    class C2f(nn.Module):
        def __init__(self, ci, co, n, shortcut=True):
            super().__init__()
            self.c = co // 2
            self.cv1 = Conv(ci, 2 * self.c)
            self.cv2 = Conv((2 + n) * self.c, co)
            self.m = nn.ModuleList(Bottleneck(self.c, shortcut) for _ in range(n))

        def forward(self, x):
            y = list(self.cv1(x).split((self.c, self.c), 1))
            y.extend(m(y[-1]) for m in self.m)
            return self.cv2(torch.cat(y, 1))

    class SPPF(nn.Module):
        def __init__(self, ci, co):
            super().__init__()
            self.cv1, self.cv2 = Conv(ci, ci // 2), Conv(ci * 2, co)
            self.m = nn.MaxPool2d(5, 1, 2)

        def forward(self, x):
            y = [self.cv1(x)]
            y.extend(self.m(y[-1]) for _ in range(3))
            return self.cv2(torch.cat(y, 1))

    c1, c2, c3, c4, c5 = ch(64), ch(128), ch(256), ch(512), ch(1024)

    class Detector(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(Conv(3, c1, 3, 2), Conv(c1, c2, 3, 2),
                                      C2f(c2, c2, reps(3)))
            self.p3 = nn.Sequential(Conv(c2, c3, 3, 2), C2f(c3, c3, reps(6)))
            self.p4 = nn.Sequential(Conv(c3, c4, 3, 2), C2f(c4, c4, reps(6)))
            self.p5 = nn.Sequential(Conv(c4, c5, 3, 2), C2f(c5, c5, reps(3)), SPPF(c5, c5))
            self.up = nn.Upsample(scale_factor=2, mode="nearest")
            self.n4 = C2f(c5 + c4, c4, reps(3), False)
            self.n3 = C2f(c4 + c3, c3, reps(3), False)
            self.d3, self.m4 = Conv(c3, c3, 3, 2), C2f(c3 + c4, c4, reps(3), False)
            self.d4, self.m5 = Conv(c4, c4, 3, 2), C2f(c4 + c5, c5, reps(3), False)
            cb, cc = max(16, c3 // 4, REG_MAX * 4), max(c3, min(classes, 100))
            self.box = nn.ModuleList(nn.Sequential(Conv(c, cb, 3), Conv(cb, cb, 3),
                                                   nn.Conv2d(cb, 4 * REG_MAX, 1))
                                     for c in (c3, c4, c5))
            self.cls = nn.ModuleList(nn.Sequential(Conv(c, cc, 3), Conv(cc, cc, 3),
                                                   nn.Conv2d(cc, classes, 1))
                                     for c in (c3, c4, c5))
            self.register_buffer("proj", torch.arange(REG_MAX, dtype=torch.float32)
                                 .view(1, REG_MAX, 1, 1))
            anchors, strides = [], []
            for s in (8, 16, 32):
                n = size // s
                ys, xs = torch.meshgrid(torch.arange(n) + 0.5, torch.arange(n) + 0.5,
                                        indexing="ij")
                anchors.append(torch.stack((xs, ys), 0).reshape(2, -1))
                strides.append(torch.full((1, n * n), float(s)))
            self.register_buffer("anchors", torch.cat(anchors, 1).unsqueeze(0))
            self.register_buffer("strides", torch.cat(strides, 1).unsqueeze(0))

        def forward(self, images):
            x = self.stem(images)
            p3 = self.p3(x)
            p4 = self.p4(p3)
            p5 = self.p5(p4)
            t4 = self.n4(torch.cat((self.up(p5), p4), 1))
            o3 = self.n3(torch.cat((self.up(t4), p3), 1))
            o4 = self.m4(torch.cat((self.d3(o3), t4), 1))
            o5 = self.m5(torch.cat((self.d4(o4), p5), 1))
            feats = [torch.cat((b(f), c(f)), 1).flatten(2)
                     for f, b, c in zip((o3, o4, o5), self.box, self.cls)]
            out = torch.cat(feats, 2)
            box, cls = out.split((4 * REG_MAX, classes), 1)
            dist = box.reshape(box.shape[0], 4, REG_MAX, -1).transpose(1, 2).softmax(1)
            dist = (dist * self.proj).sum(1)                       # (1, 4, n): DFL expectation
            lt, rb = dist.split(2, 1)
            anchors, strides = (self.anchors, self.strides) if not dynamic else \
                _grid((o3, o4, o5))
            xy1, xy2 = anchors - lt, anchors + rb
            xywh = torch.cat(((xy1 + xy2) / 2, xy2 - xy1), 1) * strides
            return torch.cat((xywh, cls.sigmoid()), 1)

    def _grid(feats):
        anchors, strides = [], []
        for f, s in zip(feats, (8, 16, 32)):
            h, w = f.shape[2], f.shape[3]
            ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float32) + 0.5,
                                    torch.arange(w, dtype=torch.float32) + 0.5, indexing="ij")
            anchors.append(torch.stack((xs, ys), 0).reshape(2, -1))
            strides.append(torch.ones((1, h * w)) * s)
        return torch.cat(anchors, 1).unsqueeze(0), torch.cat(strides, 1).unsqueeze(0)

    return Detector()
