"""The reference fold backend: plain numpy, one thread.

Every function writes into one new C-contiguous array and makes no
temporary the size of its input, except `matmul` of float16/bfloat16, which
holds float32 copies of both operands (BLAS has no half precision).
Arguments are already checked and normalized by `pyonnxopt.fold`.
"""

from __future__ import annotations

import numpy as np

from pyonnxopt.fold.dtypes import compute_dtype, is_half

name = "numpy"


def scale_channels(weight: np.ndarray, s: np.ndarray, axis: int, groups: int) -> np.ndarray:
    """weight * s along `axis`; `s` is 1-D in the compute dtype of the weight,
    groups * weight.shape[axis] long: group g (of axis 0) takes its slice."""
    out = np.empty(weight.shape, weight.dtype)
    # Axis 0 split into (groups, rest): s broadcasts over both group and channel.
    grouped = (groups, weight.shape[0] // groups) + weight.shape[1:]
    shape = [1] * len(grouped)
    shape[0], shape[axis + 1] = groups, weight.shape[axis]
    # dtype= computes in s's precision; numpy converts halves in small
    # buffers, so no float32 copy of the weight is made.
    np.multiply(weight.reshape(grouped), s.reshape(shape), out=out.reshape(grouped), dtype=s.dtype, casting="same_kind")
    return out


def transpose(a: np.ndarray, perm: tuple) -> np.ndarray:
    return a.transpose(perm).copy(order="C")


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # asarray: 1-D @ 1-D gives a numpy scalar; ONNX gives a 0-d tensor.
    if is_half(a.dtype):
        compute = compute_dtype(a.dtype)
        return np.asarray(np.matmul(a.astype(compute), b.astype(compute)).astype(a.dtype))
    return np.asarray(np.matmul(a, b))


def cast(a: np.ndarray, dtype: np.dtype) -> np.ndarray:
    # Out-of-range float -> int is undefined in ONNX; numpy's warning about it
    # would only be noise here.
    with np.errstate(invalid="ignore", over="ignore"):
        return a.astype(dtype, order="C", copy=True)
