"""The inference-mode BatchNormalization that fuse_conv_batchnorm and
fuse_gemm_batchnorm fold into the weights before it, and the conditions
under which it is one per-channel affine map y = s * x + t."""

from __future__ import annotations

from typing import Optional

import numpy as np

from pyonnxopt import fold
from pyonnxopt.fusion.pattern import Const, Op
from pyonnxopt.fusion.rules._channels import attribute

EPSILON_DEFAULT = 1e-5
PARAMETERS = ("scale", "beta", "mean", "var")


def batchnorm(producer: Op, opset: int) -> Op:
    """BatchNormalization(producer, constant scale, B, mean, var), named "bn".
    training_mode exists from opset 14; before, the outputs say the mode."""
    attrs = {"training_mode": 0} if opset >= 14 else {}
    return Op("BatchNormalization", producer, *(Const(p) for p in PARAMETERS), name="bn", attrs=attrs)


def batchnorm_refusal(m, channels: int) -> Optional[str]:
    """None when the matched "bn" normalizes `channels` channels with its
    stored statistics and only Y exists; else why not."""
    bn = m["bn"]
    if any(v is not None for v in bn.outputs[1:]):
        return "BatchNormalization has outputs besides Y (training mode)"
    if m.opset < 7 and not attribute(bn, "is_test", 0):
        return "BatchNormalization is_test=0: training mode"
    if m.opset < 9 and attribute(bn, "spatial", 1) != 1:
        return "BatchNormalization spatial=0: statistics per element, not per channel"
    for p in PARAMETERS:
        shape = list(m.array(p).shape)
        if shape != [channels]:
            return f"BatchNormalization {p} has shape {shape}, the producer {channels} channels"
    scale, beta, mean, var = parameters(m)
    # Folded, an infinite or NaN factor would reach outputs the original
    # computes differently (inf * 0 in the weight sums).
    if not (np.isfinite(fold.batchnorm_scale(scale, var, epsilon(m))).all() and np.isfinite(beta).all()
            and np.isfinite(mean).all()):
        return "BatchNormalization's scale / sqrt(var + epsilon), mean or B is not finite"
    return None


def epsilon(m) -> float:
    return float(attribute(m["bn"], "epsilon", EPSILON_DEFAULT))


def parameters(m) -> tuple:
    """(scale, beta, mean, var) as arrays."""
    return tuple(m.array(p) for p in PARAMETERS)
