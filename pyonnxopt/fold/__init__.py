"""Arithmetic on big weights for the fusion rules, through one interface with
three backends: numpy (the reference), numba (all cores) and cupy (a CUDA GPU).

    from pyonnxopt import fold
    w, b = fold.fold_batchnorm(conv_w, conv_b, scale, beta, mean, var, eps, axis=0)

Inputs are numpy arrays, possibly read-only memory-mapped views of the model
file; every result is a new C-contiguous array (never a view of an input),
built without temporaries the size of the input where the backend allows.
float16/bfloat16 weights are computed in float32 and rounded once.

`backend=None` picks by size (`choose_backend`, fold/select.py): numpy for
small tensors, numba for big ones when it imports (from 1 GB while numba is
not loaded in the process, since loading it costs 1.8 s or more; from 16 MB
once it is); cupy only by name or PYONNXOPT_CUPY_THRESHOLD (measured on an
H200, it lost to numba everywhere: fold/select.py); whatever is missing
falls back to numpy silently. Asking for a backend by name that
cannot run raises BackendUnavailable. numba and cupy are imported only when
chosen. The thresholds come from bench/fold_backends.py (bench/README.md);
PYONNXOPT_NUMBA_THRESHOLD and PYONNXOPT_CUPY_THRESHOLD (bytes) override them.

Results agree between backends bit for bit (a NaN's payload aside), except
matmul, where BLAS and cuBLAS sum in their own orders (float re-association
error). Casts of out-of-range floats to integers are undefined in ONNX and
may differ.
"""

from __future__ import annotations

import logging
from typing import Optional

import numpy as np

from pyonnxopt.errors import BackendUnavailable
from pyonnxopt.fold.dtypes import compute_dtype, is_float
from pyonnxopt.fold.select import BACKENDS, available, backend_module, choose_backend

log = logging.getLogger(__name__)

__all__ = [
    "BACKENDS", "BackendUnavailable", "available", "backend_module", "batchnorm_scale", "cast",
    "choose_backend", "fold_batchnorm", "matmul", "scale_channels", "transpose",
]


def _run(op: str, backend: Optional[str], nbytes: int, *args):
    """Calls `op` of the chosen backend; an automatic choice that runs out of
    accelerator memory is redone in numpy."""
    name = backend if backend is not None else choose_backend(nbytes)
    module = backend_module(name)
    if backend is None and name != "numpy":
        try:
            return getattr(module, op)(*args)
        except MemoryError as e:
            log.info("fold %s on %s ran out of memory (%s); numpy instead", op, name, e)
            return getattr(backend_module("numpy"), op)(*args)
    return getattr(module, op)(*args)


def _float_weight(weight: np.ndarray, what: str) -> np.ndarray:
    weight = np.asarray(weight)
    if not is_float(weight.dtype):
        raise TypeError(f"{what}: a float weight is needed, got {weight.dtype}")
    return weight


def _channel_axis(weight: np.ndarray, axis: int, groups: int) -> int:
    if not -weight.ndim <= axis < weight.ndim:
        raise ValueError(f"axis {axis} is out of range for a weight of rank {weight.ndim}")
    axis %= weight.ndim
    if groups != 1 and (groups < 1 or axis == 0 or weight.shape[0] % groups):
        raise ValueError(f"groups={groups} needs a channel axis after axis 0 and axis 0 ({weight.shape[0]}) divisible by it")
    return axis


def _per_channel(x, channels: int, what: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    if x.shape[0] != channels:
        raise ValueError(f"{what} has {x.shape[0]} elements, the channel axis {channels}")
    return x


def batchnorm_scale(scale, var, eps: float, backend: Optional[str] = None) -> np.ndarray:
    """s = scale / sqrt(var + eps), per channel (1-D).

    Computed in float64 and rounded once, to float64 for float64 `scale` and
    to float32 otherwise (for float16/bfloat16 parameters s stays float32, so
    that scaling a weight with it rounds only once). Per-channel vectors are
    small: every backend computes them with numpy.
    """
    if backend is not None:
        backend_module(backend)  # an unavailable backend is still an error
    scale = np.asarray(scale)
    s = _per_channel(scale, scale.size, "scale") / np.sqrt(_per_channel(var, scale.size, "var") + float(eps))
    return s.astype(compute_dtype(scale.dtype))


def scale_channels(weight, s, axis: int, backend: Optional[str] = None, groups: int = 1) -> np.ndarray:
    """weight * s broadcast along `axis` (s is 1-D with weight.shape[axis]
    elements), in the weight's dtype. s is rounded to the weight's compute
    dtype first; the product is rounded once.

    groups > 1 is a grouped ConvTranspose, whose weight is
    [C_in, C_out/groups, ...] with the output channels on axis 1: s then has
    all C_out elements and input-channel group g (of axis 0) is scaled by
    s[g * C_out/groups : (g+1) * C_out/groups].
    """
    weight = _float_weight(weight, "scale_channels")
    axis = _channel_axis(weight, axis, groups)
    s = _per_channel(s, groups * weight.shape[axis], "s").astype(compute_dtype(weight.dtype))
    return _run("scale_channels", backend, weight.nbytes, weight, s, axis, groups)


def fold_batchnorm(weight, bias, scale, beta, mean, var, eps: float, axis: int,
                   backend: Optional[str] = None, groups: int = 1) -> tuple:
    """(new_weight, new_bias) of a Conv/ConvTranspose/Gemm followed by
    BatchNormalization (inference mode), both in the weight's dtype:

        s = scale / sqrt(var + eps)
        new_weight = weight * s        (along `axis`, the output channels)
        new_bias = (bias - mean) * s + beta      (bias None means zeros)

    `groups` as in scale_channels (a grouped ConvTranspose: axis=1 and the
    per-channel vectors have all C_out = groups * weight.shape[1] elements).

    s and new_bias are computed in float64 and rounded once; new_weight is
    weight * s rounded once (s rounded to float32 first for float32 and
    half weights). Against onnxruntime running the op followed by
    BatchNormalization in float32 (Conv, ConvTranspose with and without
    groups, Gemm; tests/fold/test_backends.py), the op with these weights
    differs by at most 4e-7 of the largest output magnitude (measured over
    5 seeds); the test asserts 1e-6 of it, and rtol=1e-5, atol=1e-5.
    """
    weight = _float_weight(weight, "fold_batchnorm")
    axis = _channel_axis(weight, axis, groups)
    channels = groups * weight.shape[axis]
    s = _per_channel(scale, channels, "scale") / np.sqrt(_per_channel(var, channels, "var") + float(eps))
    b = np.zeros(channels) if bias is None else _per_channel(bias, channels, "bias")
    new_bias = ((b - _per_channel(mean, channels, "mean")) * s + _per_channel(beta, channels, "beta")).astype(weight.dtype)
    new_weight = _run("scale_channels", backend, weight.nbytes, weight, s.astype(compute_dtype(weight.dtype)), axis, groups)
    return new_weight, new_bias


def transpose(a, perm=None, backend: Optional[str] = None) -> np.ndarray:
    """ONNX Transpose: the axes of `a` in the order `perm` (reversed when None)."""
    a = np.asarray(a)
    perm = tuple(reversed(range(a.ndim))) if perm is None else tuple(int(p) for p in perm)
    if sorted(perm) != list(range(a.ndim)):
        raise ValueError(f"perm {list(perm)} is not a permutation of the {a.ndim} axes")
    return _run("transpose", backend, a.nbytes, a, perm)


def matmul(a, b, backend: Optional[str] = None) -> np.ndarray:
    """ONNX MatMul (numpy.matmul's broadcasting); halves computed in float32."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype:
        raise TypeError(f"matmul: operands of one dtype are needed, got {a.dtype} and {b.dtype}")
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("matmul: scalar operands are not allowed")
    return _run("matmul", backend, a.nbytes + b.nbytes, a, b)


def cast(a, dtype, backend: Optional[str] = None) -> np.ndarray:
    """ONNX Cast to the numpy `dtype`: float -> integer truncates toward zero
    (undefined out of range, as in ONNX), float -> bool is `!= 0`, narrower
    floats round to nearest even."""
    a = np.asarray(a)
    dtype = np.dtype(dtype)
    return _run("cast", backend, max(a.nbytes, a.size * dtype.itemsize), a, dtype)
