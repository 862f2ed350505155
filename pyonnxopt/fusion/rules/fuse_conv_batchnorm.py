"""fuse_conv_batchnorm: a BatchNormalization (inference) after a Conv or
ConvTranspose with constant weights becomes part of those weights.

    y = BatchNormalization(Conv(x, W, B), scale, beta, mean, var)
 -> y = Conv(x, W', B')      (every attribute of the Conv kept)

    s  = scale / sqrt(var + epsilon)              per output channel c
    W' = W * s   along the output channels (Conv: W[c]; ConvTranspose with
                 group g: W[i, j] for c = (i // (C/g)) * (M/g) + j)
    B' = (B - mean) * s + beta                    (B absent: zeros)
computed by pyonnxopt.fold (float64 for the vectors, one rounding).

Refuses when:
1. W, B or a BatchNormalization parameter is not a constant (pattern);
2. the Conv's output has another reader or is a graph output (pattern);
3. BatchNormalization is in training mode: training_mode=1 (pattern),
   outputs besides Y, or is_test=0 below opset 7;
4. spatial=0 (opsets 1-8): statistics per element, not per channel;
5. the weight is not float16, float or double;
6. the weight's rank is below 3, ConvTranspose's group does not divide
   its input channels, or B is not one number per output channel;
7. a BatchNormalization parameter is not one number per output channel;
8. scale / sqrt(var + epsilon), mean or B is not finite.
"""

from __future__ import annotations

from typing import Optional

from pyonnxopt import fold
from pyonnxopt.fusion.pattern import Const, Op, Var
from pyonnxopt.fusion.rule import Edit, Match, Rule
from pyonnxopt.fusion.rules._batchnorm import batchnorm, batchnorm_refusal, epsilon, parameters
from pyonnxopt.fusion.rules._channels import Channels, bias_refusal, channels_of, type_refusal


class FuseConvBatchnorm(Rule):
    name = "fuse_conv_batchnorm"
    description = "fold an inference BatchNormalization into the Conv/ConvTranspose before it"
    near_miss_min_ops = 1  # every BatchNormalization left unfused is worth a reason

    def pattern(self, opset: int) -> Op:
        conv = Op("Conv|ConvTranspose", Var("x"), Const("w"), Const("b", optional=True), name="conv")
        return batchnorm(conv, opset)

    def check(self, m: Match) -> Optional[str]:
        why = type_refusal(m.dtype("w"))
        if why:
            return why
        ch = channels_of(m["conv"], m.array("w"))
        if isinstance(ch, str):
            return ch
        if m["b"] is not None:
            why = bias_refusal(m["conv"], m.shape("b"), ch)
            if why:
                return why
        return batchnorm_refusal(m, ch.count)

    def rewrite(self, m: Match, edit: Edit) -> Optional[str]:
        conv = m["conv"]
        w = m.array("w")
        ch: Channels = channels_of(conv, w)
        bias = m.array("b") if m["b"] is not None else None
        new_w, new_b = fold.fold_batchnorm(w, bias, *parameters(m), epsilon(m), axis=ch.weight_axis,
                                           groups=ch.groups)
        bias_hint = f"{m['b'].name}_bn" if m["b"] is not None else f"{m['w'].name}_bn_bias"
        inputs = [m["x"], edit.constant(new_w, f"{m['w'].name}_bn"), edit.constant(new_b, bias_hint)]
        edit.replace_root(conv.op_type, inputs, copy_attrs_from=conv)
        return None
