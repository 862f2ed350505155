"""fuse_conv_input_scale: a constant scale (Mul, or Div by a constant) of a
Conv's input, one number or one per input channel, becomes part of its
weight; a constant shift (Add, or Sub of a constant) does too, into its
bias, where the Conv pads nothing, and so does an inference
BatchNormalization, a scale and a shift per channel (a pre-norm block's
norm before its 1x1 Conv: CoAtNet, MaxViT):

    y = Conv(Mul(x, s), W, B)  ->  y = Conv(x, W * s[c], B)
    y = Conv(Add(x, t), W, B)  ->  y = Conv(x, W, B + sum_{j,k} W[m, j, k] * t[c])
    y = Conv(BatchNormalization(x), W, B)  ->  both, s = scale / sqrt(var + eps), t = B_bn - mean * s

where c = (m // (M/g)) * (C/g) + j is the input channel that weight
W[m, j] reads (g groups). A scale commutes with the zero padding (0 * s
is 0); a shift does not (the padded border would read t instead of 0).
Paddle's Dropout exported as Mul(0.5) before SqueezeNet's last Conv; a
Keras Rescaling(1/255) or a normalization by the std before the stem.
It runs once no other fusion fires: a GELU's final * 0.5 or a hard swish's
/ 6 before a Conv belongs to them where they can fuse. With --target ort
the Conv may be a com.microsoft FusedConv by then (act(conv(x) + z)): the
same folding holds for its convolution.

Refuses when:
 0. the scale is a GELU's final * 0.5 that no rule fused (below opset 20
    with --target onnx): onnxruntime fuses x * (1 + erf(x / sqrt 2)) * 0.5
    into one kernel at its default level, and needs the 0.5 in place
    (FastViT's Conv MLPs ran 7% slower with it folded);
 1. the Conv's weight or bias is not a constant, or its element type is
    not float16, float or double;
 2. the constant is not one number or one per input channel (it would
    broadcast x, or vary along the batch or spatial axes);
 3. a Div's constant has a 0; a constant is not finite;
 4. a shift (or a BatchNormalization) meets padding (pads not all 0, or
    auto_pad SAME_UPPER/LOWER);
 5. the BatchNormalization refusals of fuse_conv_batchnorm (training mode,
    a parameter not one per channel, not finite).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from pyonnxopt import fold
from pyonnxopt.fusion.pattern import Const, Op, Var
from pyonnxopt.fusion.rule import Edit, Match, Rule
from pyonnxopt.fusion.rules._batchnorm import batchnorm, batchnorm_refusal, epsilon, parameters
from pyonnxopt.fusion.rules._channels import Channels, attribute, channel_vector, per_channel_refusal, type_refusal
from pyonnxopt.fusion.targets import MS_DOMAIN


class FuseConvInputScale(Rule):
    name = "fuse_conv_input_scale"
    description = "a constant scale (or, without padding, shift) of a Conv's input -> its weight (bias)"
    # Its Mul may be the last node of a GELU (x * (1 + erf) * 0.5) or hard
    # swish (/ 6) that another rule fuses whole: it waits until none fires.
    after_fusions = True

    def pattern(self, opset: int) -> list:
        variants = []
        # --target ort has made its FusedConvs by the time this runs; the
        # activation and residual after the convolution change nothing here.
        for conv, domain in (("Conv", ""), ("FusedConv", MS_DOMAIN)):
            residual = [Var("z", optional=True)] if domain else []
            for ops, commutative in (("Mul|Add", True), ("Div|Sub", False)):
                affine = Op(ops, Var("x"), Const("k"), name="affine", commutative=commutative)
                variants.append(Op(conv, affine, Const("w"), Const("b", optional=True), *residual, name="conv",
                                   domain=domain))
            variants.append(Op(conv, batchnorm(Var("x"), opset), Const("w"), Const("b", optional=True), *residual,
                               name="conv", domain=domain))
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
        if "bn" in m:
            return batchnorm_refusal(m, inputs.count) or _padding_refusal(conv)
        why = per_channel_refusal(list(m.array("k").shape), inputs)
        if why:
            return f"'{m['k'].name}': {why.replace('the output', 'the input')}"
        k = m.array("k").astype(np.float64)
        if not np.all(np.isfinite(k)):
            return f"'{m['k'].name}' is not finite"
        op = m["affine"].op_type
        if op in ("Mul", "Div") and _ends_gelu(m["x"]):
            return (f"'{m['k'].name}' ends a GELU (x * (1 + erf(x / sqrt 2)) * 0.5), which onnxruntime runs as one "
                    "kernel at its default level: folded into the Conv, it would run as four ops")
        if op == "Div" and np.any(k == 0):
            return f"'{m['k'].name}' has a 0: the Div is not a scale"
        return _padding_refusal(conv) if op in ("Add", "Sub") else None

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        w, conv = m.array("w"), m["conv"]
        group = attribute(conv, "group", 1)
        scale, shift = _scale_and_shift(m, w.shape[1] * group)
        inputs = [m["x"], m["w"], m["b"], m["z"] if "z" in m else None]
        if shift is not None:  # from the weights as they are, before any scaling
            per_weight = shift[_input_channel(w.shape[0], w.shape[1], group)]  # [M, C/g]
            added = (w.astype(np.float64).reshape(w.shape[0], w.shape[1], -1).sum(axis=2) * per_weight).sum(axis=1)
            bias = m.array("b").astype(np.float64) if m["b"] is not None else np.zeros(w.shape[0])
            bias_name = m["b"].name if m["b"] is not None else f"{m['w'].name}_bias"
            inputs[2] = edit.constant((bias + added).astype(w.dtype), f"{bias_name}_shifted")
        if scale is not None:
            inputs[1] = edit.constant(fold.scale_channels(w, scale, axis=1, groups=group), f"{m['w'].name}_scaled")
        edit.replace_root(conv.op_type, inputs, domain=conv.domain, copy_attrs_from=conv)
        return None


def _scale_and_shift(m: Match, channels: int) -> tuple:
    """(s or None, t or None): the input is x * s + t, per input channel."""
    if "bn" in m:
        scale, beta, mean, var = (np.asarray(a, np.float64) for a in parameters(m))
        s = scale / np.sqrt(var + epsilon(m))
        return s, beta - mean * s
    k = channel_vector(m.array("k"), channels)
    op = m["affine"].op_type
    if op in ("Mul", "Div"):  # (a Mul's k may hold a 0; a Div's may not)
        return (k if op == "Mul" else 1.0 / k), None
    return None, (k if op == "Add" else -k)


def _ends_gelu(x) -> bool:
    """Whether x is x0 * (1 + erf(..)) or x0 * (1 + tanh(..)): a GELU
    that fuse_gelu could not take (no Gelu below opset 20 with --target
    onnx) and whose scale onnxruntime's own fusion needs in place."""
    product = x.producer
    if product is None or product.op_type != "Mul" or product.domain:
        return False
    for factor in product.inputs:
        add = factor.producer if factor is not None else None
        if add is not None and add.op_type == "Add" and not add.domain:
            if any(v is not None and v.producer is not None and v.producer.op_type in ("Erf", "Tanh")
                   for v in add.inputs):
                return True
    return False


def _padding_refusal(conv) -> Optional[str]:
    pads = attribute(conv, "pads", [0])
    if attribute(conv, "auto_pad", "NOTSET") in ("SAME_UPPER", "SAME_LOWER") or any(pads):
        return "the Conv pads its input: a shift before it would reach the padded border"
    return None


def _input_channel(out_channels: int, per_group: int, group: int) -> np.ndarray:
    """[M, C/g]: the input channel weight W[m, j] reads."""
    m = np.arange(out_channels)[:, None]
    return (m // (out_channels // group)) * per_group + np.arange(per_group)[None, :]
