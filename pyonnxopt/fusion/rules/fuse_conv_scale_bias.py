"""fuse_conv_scale_bias: a constant per-output-channel Mul or Add after a
Conv, ConvTranspose or Gemm with constant weights becomes part of them.

    y = Mul(Conv(x, W, B), k)   ->  y = Conv(x, W * k, B * k)
    y = Add(Conv(x, W, B), k)   ->  y = Conv(x, W, B + k)      (B absent: k)
    y = Mul(Gemm(a, W, C), k)   ->  y = Gemm(a, W * k, C * k)
    y = Add(Gemm(a, W, C), k)   ->  y = Gemm(a, W, beta * C + k), beta = 1
(either input order; attributes kept). k is one number, or one per output
channel: [M, 1, 1] or [1, M, 1, 1] after a 2-D Conv, [M] or [1, M] after a
Gemm (broadcast from the right, so [M] after a Conv would vary along the
last spatial axis). W * k scales W along its output channels through
pyonnxopt.fold (grouped ConvTranspose included); the bias vectors are
computed in float64 and rounded once.

Refuses when:
1. W, B/C or k is not a constant, or the producer's output has another reader
   or is a graph output (pattern);
2. W is not float16, float or double, or k's element type is not W's;
3. k has more axes than the output (the broadcast would change its shape);
4. k varies along the batch axis or a spatial axis, or has a channel count
   other than the output's;
5. the weight's rank does not fit the op, ConvTranspose's group does not
   divide its input channels, or B/C has a shape ONNX does not allow;
6. a Mul's constant holds inf or NaN;
7. the opset is below 7 (Mul and Add broadcast by attribute there).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from pyonnxopt import fold
from pyonnxopt.fusion.pattern import Const, Op, Var
from pyonnxopt.fusion.rule import Edit, Match, Rule
from pyonnxopt.fusion.rules._channels import (Channels, attribute, bias_refusal, channel_vector, channels_of,
                                              per_channel_refusal, type_refusal)


class FuseConvScaleBias(Rule):
    name = "fuse_conv_scale_bias"
    description = "fold a constant per-channel Mul or Add into the Conv/ConvTranspose/Gemm weights before it"
    min_opset = 7

    def pattern(self, opset: int) -> Op:
        producer = Op("Conv|ConvTranspose|Gemm", Var("x"), Const("w"), Const("b", optional=True), name="producer")
        return Op("Mul|Add", producer, Const("k"), name="op", commutative=True)

    def check(self, m: Match) -> Optional[str]:
        why = type_refusal(m.dtype("w"))
        if why:
            return why
        if m.dtype("k") != m.dtype("w"):
            return "the constant's element type is not the weight's"
        ch = channels_of(m["producer"], m.array("w"))
        if isinstance(ch, str):
            return ch
        why = bias_refusal(m["producer"], m.shape("b"), ch) if m["b"] is not None else None
        if why:
            return why
        why = per_channel_refusal(m.shape("k"), ch)
        if why:
            return why
        if m.root.op_type == "Mul" and not np.isfinite(m.array("k")).all():
            # inf * 0 inside the weight sums would differ from the product outside
            return "the scale is not finite"
        return None

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        producer, w = m["producer"], m.array("w")
        ch: Channels = channels_of(producer, w)
        k = m.array("k")
        bias = m.array("b") if m["b"] is not None else None
        gemm = producer.op_type == "Gemm"
        attrs, scaled = {}, m.root.op_type == "Mul"
        if scaled:
            w = fold.scale_channels(w, channel_vector(k, ch.count), ch.weight_axis, groups=ch.groups)
            if bias is not None:
                # Gemm's C may be [rows, N]: it scales elementwise, k broadcasting along its columns.
                bias = bias * k.astype(np.float64) if gemm else bias * channel_vector(k, ch.count)
        elif gemm:
            beta = float(attribute(producer, "beta", 1.0))
            bias = k.astype(np.float64) if bias is None else beta * bias.astype(np.float64) + k.astype(np.float64)
            attrs["beta"] = 1.0
        else:
            bias = channel_vector(k, ch.count) if bias is None else bias + channel_vector(k, ch.count)
        inputs = [m["x"], edit.constant(w, f"{m['w'].name}_scaled") if scaled else m["w"]]
        if bias is not None:
            inputs.append(edit.constant(np.asarray(bias).astype(w.dtype), f"{m['w'].name}_bias"))
        edit.replace_root(producer.op_type, inputs, attrs, copy_attrs_from=producer)
        return None
