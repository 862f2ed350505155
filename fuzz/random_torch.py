"""Random torch modules exported to ONNX, for fuzz/fuzz_pipeline.py
(`--source torch`): what the exporters really write (Shape/Gather/Concat
arithmetic, their Reshape and Transpose habits, the decompositions of
LayerNorm, GELU and attention) on random compositions of layers.

A model is a stack of blocks on an image [N, C, H, W] or a sequence
[B, S, E]: convolutions with BatchNorm and activations, pooling, residual
blocks, channel shuffles, squeeze-excite gates, pixel shuffles and
upsampling, GroupNorm, a switch between the two layouts (patch tokens, or
detection heads' boxes), Linear, LayerNorm, GELU, 1-d convolutions over the
sequence, torch's MultiheadAttention and a hand-written attention,
permutes, flattens and reshapes. It is exported by the TorchScript
exporter at a random opset, or with `dynamo=True` by the dynamo exporter
(torch's default since 2.9; 2 to 10 s a model) at 18 or the random opset
above it, half the time with a dynamic batch (and sequence) axis. `random_torch_model(seed)` returns
(onnx.ModelProto, feeds); torch seeds the weights, so a seed gives the same
model on the same torch.
"""

from __future__ import annotations

import contextlib
import functools
import io
import math
import types
import warnings

import numpy as np
import onnx

OPSETS = (14, 16, 17, 18)  # scaled_dot_product_attention exports from 14


@functools.cache  # torch's import and the classes, once
def _modules():
    import torch
    from torch import nn

    torch.backends.mha.set_fastpath_enabled(False)  # its fused kernel has no ONNX export

    class Attention(nn.Module):
        """BERT's self-attention as written in transformers (before SDPA)."""

        def __init__(self, e: int, heads: int, mask: bool):
            super().__init__()
            self.heads, self.d = heads, e // heads
            self.q, self.k, self.v, self.o = (nn.Linear(e, e) for _ in range(4))
            self.mask = mask

        def forward(self, x):
            b, s, e = x.shape
            split = [b, s, self.heads, self.d]
            q = self.q(x).view(split).permute(0, 2, 1, 3)
            k = self.k(x).view(split).permute(0, 2, 1, 3)
            v = self.v(x).view(split).permute(0, 2, 1, 3)
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.d)
            if self.mask:
                causal = torch.triu(torch.ones(s, s, dtype=torch.bool), 1)
                scores = scores.masked_fill(causal, -1e9)
            y = torch.matmul(scores.softmax(-1), v).permute(0, 2, 1, 3).reshape(b, s, e)
            return self.o(y)

    class Residual(nn.Module):
        def __init__(self, body: nn.Module, act: nn.Module):
            super().__init__()
            self.body, self.act = body, act

        def forward(self, x):
            return self.act(self.body(x) + x)

    class ToSequence(nn.Module):  # [N, C, H, W] -> [N, H*W, C], a ViT's patch tokens
        def forward(self, x):
            return x.flatten(2).transpose(1, 2)

    class Permute(nn.Module):
        def __init__(self, perm):
            super().__init__()
            self.perm = perm

        def forward(self, x):
            return x.permute(*self.perm)

    class SplitHeads(nn.Module):  # reshape to heads and back, through a computed shape
        def __init__(self, heads: int):
            super().__init__()
            self.heads = heads

        def forward(self, x):
            b, s, e = x.shape
            y = x.reshape(b, s, self.heads, -1).transpose(1, 2)
            return y.transpose(1, 2).reshape(b, s, e) * 2.0

    class DetectionHeads(nn.Module):
        """Two heads on one feature map, each a Conv whose channels are
        anchors x values, moved last and flattened to boxes, the heads'
        boxes concatenated: [N, C, H, W] -> [N, boxes, k]. SSD and
        RetinaNet permute the Conv's output to NHWC; YOLO splits the
        anchors off first and moves the values last."""

        def __init__(self, c: int, anchors: int, k: int, yolo: bool, kernel: int):
            super().__init__()
            self.anchors, self.k, self.yolo = anchors, k, yolo
            self.convs = nn.ModuleList(nn.Conv2d(c, anchors * k, kernel, padding=kernel // 2) for _ in range(2))

        def forward(self, x):
            n = x.shape[0]
            boxes = []
            for conv in self.convs:
                y = conv(x)
                if self.yolo:
                    h, w = y.shape[2:]
                    y = y.view(n, self.anchors, self.k, h, w).permute(0, 1, 3, 4, 2)
                else:
                    y = y.permute(0, 2, 3, 1)
                boxes.append(y.reshape(n, -1, self.k))
            return torch.cat(boxes, 1)

    class ChannelShuffle(nn.Module):  # ShuffleNet's: Reshape, Transpose, Reshape
        def __init__(self, groups: int):
            super().__init__()
            self.groups = groups

        def forward(self, x):
            n, c, h, w = x.shape
            return x.view(n, self.groups, c // self.groups, h, w).transpose(1, 2).reshape(n, c, h, w)

    class SqueezeExcite(nn.Module):  # MobileNetV3's and EfficientNet's channel gate
        def __init__(self, c: int):
            super().__init__()
            self.down, self.up = nn.Conv2d(c, max(1, c // 2), 1), nn.Conv2d(max(1, c // 2), c, 1)

        def forward(self, x):
            s = x.mean((2, 3), keepdim=True)
            return x * torch.sigmoid(self.up(torch.relu(self.down(s))))

    class SequenceConv(nn.Module):  # a Conv1d over [B, S, E] (wav2vec, Conformer): transposed in and out
        def __init__(self, e: int, kernel: int, depthwise: bool):
            super().__init__()
            self.conv = nn.Conv1d(e, e, kernel, padding=kernel // 2, groups=e if depthwise else 1)

        def forward(self, x):
            return self.conv(x.transpose(1, 2)).transpose(1, 2)

    return types.SimpleNamespace(torch=torch, nn=nn, Attention=Attention, Residual=Residual, ToSequence=ToSequence,
                                 Permute=Permute, SplitHeads=SplitHeads, DetectionHeads=DetectionHeads,
                                 ChannelShuffle=ChannelShuffle, SqueezeExcite=SqueezeExcite,
                                 SequenceConv=SequenceConv)


def random_torch_model(seed: int, dynamo: bool = False) -> tuple:
    m = _modules()
    torch, nn = m.torch, m.nn
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)

    def chance(p):
        return bool(rng.random() < p)

    def act():
        return [nn.ReLU(), nn.GELU(), nn.SiLU(), nn.Hardswish(), nn.Sigmoid(), nn.ReLU6(),
                nn.GELU(approximate="tanh"), nn.LeakyReLU(0.1)][int(rng.integers(8))]

    def heads(e):
        return int(rng.choice([h for h in (1, 2, 4) if e % h == 0]))

    batch = int(rng.choice([1, 2]))
    image = chance(0.5)
    c, h = int(rng.choice([3, 4, 8])), int(rng.choice([8, 12, 16]))
    e, s = int(rng.choice([8, 12, 16])), int(rng.choice([4, 6, 8]))
    shape = (batch, c, h, h) if image else (batch, s, e)
    layers = []
    for _ in range(int(rng.integers(2, 7))):
        kind = int(rng.integers(10 if image else 7))
        if image and kind == 0:
            k, stride = int(rng.choice([1, 3])), int(rng.choice([1, 1, 2]))
            out = int(rng.choice([c, 2 * c]))
            layers += [nn.Conv2d(c, out, k, padding=k // 2, stride=stride, groups=c if chance(0.3) else 1,
                                 bias=chance(0.5)), nn.BatchNorm2d(out)]
            if chance(0.7):
                layers.append(act())
            c, h = out, (h + 2 * (k // 2) - k) // stride + 1
        elif image and kind == 1:
            body = nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c), act(), nn.Conv2d(c, c, 1),
                                 nn.BatchNorm2d(c))
            layers.append(m.Residual(body, act()))
        elif image and kind == 2 and h >= 4:
            layers.append(nn.MaxPool2d(2) if chance(0.5) else nn.AvgPool2d(2))
            h //= 2
        elif image and kind == 3:
            layers += [nn.ZeroPad2d(1), nn.Conv2d(c, c, 3)]
        elif image and kind == 4:  # a channels-last LayerNorm (ConvNeXt)
            layers += [m.Permute([0, 2, 3, 1]), nn.LayerNorm(c), m.Permute([0, 3, 1, 2])]
        elif image and kind == 5:
            groups = [g for g in (2, 4) if c % g == 0]
            layers.append(m.ChannelShuffle(int(rng.choice(groups))) if groups and chance(0.5) else
                          m.SqueezeExcite(c))
        elif image and kind == 6:
            if c % 4 == 0 and chance(0.5):
                layers.append(nn.PixelShuffle(2))
                c, h = c // 4, 2 * h
            elif h <= 12:
                layers.append(nn.Upsample(scale_factor=2, mode=str(rng.choice(["nearest", "bilinear"]))))
                h *= 2
        elif image and kind == 7:
            groups = [g for g in (1, 2, 4) if c % g == 0]
            layers.append(nn.GroupNorm(int(rng.choice(groups)), c))
        elif image and kind == 8:  # to boxes: a sequence of k values each from here
            k = int(rng.choice([4, 6, 8]))
            layers.append(m.DetectionHeads(c, int(rng.choice([1, 2, 3])), k, chance(0.5), int(rng.choice([1, 3]))))
            image, e = False, k
        elif image:  # to tokens: a sequence model from here
            layers += [m.ToSequence(), nn.LayerNorm(c)]
            image, e = False, c
        elif kind == 0:
            out = int(rng.choice([e, 2 * e]))
            layers += [nn.Linear(e, out), act()]
            e = out
        elif kind == 1:
            layers.append(m.Residual(nn.Sequential(nn.LayerNorm(e), nn.Linear(e, 2 * e), nn.GELU(),
                                                   nn.Linear(2 * e, e)), nn.Identity()))
        elif kind == 2:
            layers += [m.Residual(m.Attention(e, heads(e), chance(0.5)), nn.Identity()), nn.LayerNorm(e)]
        elif kind == 3:
            layers.append(m.SplitHeads(heads(e)))
        elif kind == 4:
            layers.append(nn.Dropout(0.1))
        elif kind == 5:
            layers.append(m.SequenceConv(e, int(rng.choice([1, 3])), chance(0.5)))
        else:
            layers.append(nn.TransformerEncoderLayer(e, heads(e), 2 * e, dropout=0.0, batch_first=True))
    model = nn.Sequential(*layers).eval()
    x = torch.randn(*shape)
    axes = {"x": {0: "batch"}, "y": {0: "batch"}} if chance(0.5) else None
    opset, fold = int(rng.choice(OPSETS)), chance(0.5)
    if dynamo:  # its exporter starts at opset 18 and folds (with onnxscript's optimizer) always
        with warnings.catch_warnings(), torch.no_grad(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            program = torch.onnx.export(model, (x,), input_names=["x"], output_names=["y"],
                                        opset_version=max(opset, 18), dynamic_axes=axes, dynamo=True)
        return program.model_proto, {"x": x.numpy()}
    buffer = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), buffer, input_names=["x"], output_names=["y"],
                          opset_version=opset, dynamic_axes=axes, dynamo=False, do_constant_folding=fold)
    return onnx.load_from_string(buffer.getvalue()), {"x": x.numpy()}
