"""Where the output channels of Conv, ConvTranspose, Gemm and MatMul live,
in their weights and in their outputs: shared by the rules that fold a
per-channel scale or shift into those weights.

Output channel c of
    Conv           W [M, C/g, k...]   is W[c]             (weight axis 0)
    ConvTranspose  W [C, M/g, k...]   is W[i, j] for c = (i // (C/g)) * (M/g) + j
                                      (weight axis 1, in groups: fold's `groups`)
    Gemm           B [K, N] / [N, K] with transB   (weight axis 1 / 0)
    MatMul         B [K, N]                          (weight axis 1)
and of the output, axis 1 ([N, M, d...] or [rows, N]).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

import numpy as np

# ONNX element types whose weights are folded: Conv's and Gemm's float types
# that onnxruntime runs on CPU (FLOAT, FLOAT16, DOUBLE).
FOLDED_TYPES = {1: "float", 10: "float16", 11: "double"}


def attribute(node, name: str, default=None):
    """An attribute's value (strings decoded), or `default` when absent."""
    value = node.attributes.get(name, default)
    return value.decode() if isinstance(value, bytes) else value


def type_refusal(dtype: int) -> Optional[str]:
    """None for a folded element type, else why not."""
    if dtype in FOLDED_TYPES:
        return None
    if not dtype:
        return "the element type is unknown: only float16, float and double are folded"
    from onnx import TensorProto

    name = TensorProto.DataType.Name(dtype).lower() if dtype in TensorProto.DataType.values() else str(dtype)
    return f"element type {name}: only float16, float and double are folded"


@dataclass(frozen=True)
class Channels:
    out_rank: int  # rank of the producer's output; its channels are on axis 1
    count: int  # output channels
    weight_axis: int  # the weight axis that holds them
    groups: int  # >1: a grouped ConvTranspose (fold's `groups`)


def channels_of(node, weight: np.ndarray) -> Union[Channels, str]:
    """The channel layout of `node` (Conv, ConvTranspose, Gemm or MatMul)
    with constant weight `weight`, or why it cannot be folded into."""
    op = node.op_type
    if op in ("Conv", "ConvTranspose"):
        if weight.ndim < 3:
            return f"{op} weight has rank {weight.ndim}, needs at least 3"
        if op == "Conv":
            return Channels(weight.ndim, weight.shape[0], 0, 1)
        group = attribute(node, "group", 1)
        if group < 1 or weight.shape[0] % group:
            return f"ConvTranspose group={group} does not divide the weight's {weight.shape[0]} input channels"
        return Channels(weight.ndim, weight.shape[1] * group, 1, group)
    if weight.ndim != 2:
        return f"{op} weight has rank {weight.ndim}, needs 2"
    if op == "Gemm" and attribute(node, "transB", 0):
        return Channels(2, weight.shape[0], 0, 1)
    return Channels(2, weight.shape[1], 1, 1)


def per_channel_refusal(shape: list, ch: Channels) -> Optional[str]:
    """None when a constant of `shape`, broadcast against the producer's
    output, is one number per output channel (or one number); else why not."""
    if len(shape) > ch.out_rank:
        return (f"the constant's shape {shape} has more axes than the output's {ch.out_rank}: "
                "the broadcast would change the output shape")
    padded = [1] * (ch.out_rank - len(shape)) + list(shape)
    for axis, d in enumerate(padded):
        if axis == 1 and d not in (1, ch.count):
            return f"the constant's shape {shape} has {d} elements along the channel axis, the output {ch.count}"
        if axis != 1 and d != 1:
            where = "the batch axis 0" if axis == 0 else f"spatial axis {axis}"
            return f"the constant's shape {shape} varies along {where}"
    return None


def bias_refusal(node, shape: list, ch: Channels) -> Optional[str]:
    """None when the producer's own bias input (B, or Gemm's C) has a shape
    ONNX allows; else why not (a malformed model: refuse, never raise)."""
    if node.op_type != "Gemm":
        return None if shape == [ch.count] else f"{node.op_type} B has shape {shape}, not [{ch.count}]"
    if len(shape) > 2 or (shape and shape[-1] not in (1, ch.count)):
        return f"Gemm C has shape {shape}, which does not broadcast to [rows, {ch.count}]"
    return None


def channel_vector(array: np.ndarray, count: int) -> np.ndarray:
    """A per-channel constant (shape passed by per_channel_refusal) as a
    float64 vector of `count` elements."""
    return np.broadcast_to(np.asarray(array, dtype=np.float64).reshape(-1), (count,))
