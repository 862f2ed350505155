"""fuse_conv_input_scale: a constant scale (Mul, or Div by a constant) of a
Conv's input, one number or one per input channel, becomes part of its
weight; a constant shift (Add, or Sub of a constant) does too, into its
bias, where the Conv pads nothing:

    y = Conv(Mul(x, s), W, B)  ->  y = Conv(x, W * s[c], B)
    y = Conv(Add(x, t), W, B)  ->  y = Conv(x, W, B + sum_{j,k} W[m, j, k] * t[c])

where c = (m // (M/g)) * (C/g) + j is the input channel that weight
W[m, j] reads (g groups). A scale commutes with the zero padding (0 * s
is 0); a shift does not (the padded border would read t instead of 0).
Paddle's Dropout exported as Mul(0.5) before SqueezeNet's last Conv; a
Keras Rescaling(1/255) or a normalization by the std before the stem.

Refuses when:
 1. the Conv's weight or bias is not a constant, or its element type is
    not float16, float or double;
 2. the constant is not one number or one per input channel (it would
    broadcast x, or vary along the batch or spatial axes);
 3. a Div's constant has a 0; a constant is not finite;
 4. a shift meets padding (pads not all 0, or auto_pad SAME_UPPER/LOWER).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from pyonnxopt import fold
from pyonnxopt.fusion.pattern import Const, Op, Var
from pyonnxopt.fusion.rule import Edit, Match, Rule
from pyonnxopt.fusion.rules._channels import Channels, attribute, channel_vector, per_channel_refusal, type_refusal


class FuseConvInputScale(Rule):
    name = "fuse_conv_input_scale"
    description = "a constant scale (or, without padding, shift) of a Conv's input -> its weight (bias)"

    def pattern(self, opset: int) -> list:
        variants = []
        for ops, commutative in (("Mul|Add", True), ("Div|Sub", False)):
            affine = Op(ops, Var("x"), Const("k"), name="affine", commutative=commutative)
            variants.append(Op("Conv", affine, Const("w"), Const("b", optional=True), name="conv"))
        return variants

    def check(self, m: Match) -> Optional[str]:
        w = m.array("w")
        why = type_refusal(m.dtype("w"))
        if why:
            return why
        conv = m["conv"]
        group = attribute(conv, "group", 1)
        if w.ndim < 3 or group < 1 or w.shape[0] % group:
            return f"Conv weight of shape {list(w.shape)} with group={group}"
        inputs = Channels(w.ndim, w.shape[1] * group, 1, group)
        why = per_channel_refusal(list(m.array("k").shape), inputs)
        if why:
            return f"'{m['k'].name}': {why.replace('the output', 'the input')}"
        k = m.array("k").astype(np.float64)
        if not np.all(np.isfinite(k)):
            return f"'{m['k'].name}' is not finite"
        op = m["affine"].op_type
        if op == "Div" and np.any(k == 0):
            return f"'{m['k'].name}' has a 0: the Div is not a scale"
        if op in ("Add", "Sub"):
            pads = attribute(conv, "pads", [0])
            if attribute(conv, "auto_pad", "NOTSET") in ("SAME_UPPER", "SAME_LOWER") or any(pads):
                return "the Conv pads its input: a shift before it would reach the padded border"
        return None

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        w, conv = m.array("w"), m["conv"]
        group = attribute(conv, "group", 1)
        channels = w.shape[1] * group
        k = channel_vector(m.array("k"), channels)
        op = m["affine"].op_type
        bias_name = m["b"].name if m["b"] is not None else f"{m['w'].name}_bias"
        inputs = [m["x"], m["w"]] + ([m["b"]] if m["b"] is not None else [])
        if op in ("Mul", "Div"):
            scaled = fold.scale_channels(w, 1.0 / k if op == "Div" else k, axis=1, groups=group)
            inputs[1] = edit.constant(scaled, f"{m['w'].name}_scaled")
        else:
            shift = -k if op == "Sub" else k
            per_weight = shift[_input_channel(w.shape[0], w.shape[1], group)]  # [M, C/g]
            added = (w.astype(np.float64).reshape(w.shape[0], w.shape[1], -1).sum(axis=2) * per_weight).sum(axis=1)
            bias = m.array("b").astype(np.float64) if m["b"] is not None else np.zeros(w.shape[0])
            new_bias = edit.constant((bias + added).astype(w.dtype), f"{bias_name}_shifted")
            inputs = [m["x"], m["w"], new_bias]
        edit.replace_root("Conv", inputs, copy_attrs_from=conv)
        return None


def _input_channel(out_channels: int, per_group: int, group: int) -> np.ndarray:
    """[M, C/g]: the input channel weight W[m, j] reads."""
    m = np.arange(out_channels)[:, None]
    return (m // (out_channels // group)) * per_group + np.arange(per_group)[None, :]
