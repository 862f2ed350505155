"""The cupy fold backend: upload, compute on the GPU, download.

Elementwise work (scale_channels, cast) goes in pieces of at most _PIECE
bytes, so GPU memory stays bounded whatever the weight's size; transposes
and matmuls go whole. GPU memory cupy pooled is returned after every call,
and running out of it raises MemoryError (an automatic choice then redoes the
work in numpy). Imported only when a tensor is big enough to use it.

cupy has no bfloat16: those weights (and float64 -> float16 casts, which
cupy would round twice) go to numpy. Products are single roundings, as on
the CPU, so results equal numpy's except matmul (cuBLAS sums in its own
order).
"""

from __future__ import annotations

import functools

import cupy as cp
import numpy as np

from pyonnxopt.errors import first_line
from pyonnxopt.fold import numpy_backend
from pyonnxopt.fold.dtypes import compute_dtype

name = "cupy"
_PIECE = 256 << 20


def device_problem():
    """None when a CUDA device is usable, else why not (one line)."""
    try:
        count = cp.cuda.runtime.getDeviceCount()
    except Exception as e:  # CUDARuntimeError, or a missing driver library
        return f"no CUDA device was found ({first_line(e)})"
    return None if count > 0 else "no CUDA device was found"


def _on_gpu(fn):
    @functools.wraps(fn)
    def wrapper(*args):
        try:
            return fn(*args)
        except cp.cuda.memory.OutOfMemoryError as e:
            raise MemoryError(f"GPU out of memory: {first_line(e)}") from e
        finally:
            cp.get_default_memory_pool().free_all_blocks()
            cp.get_default_pinned_memory_pool().free_all_blocks()
    return wrapper


def _bfloat16(*arrays) -> bool:
    return any(a.dtype.name == "bfloat16" for a in arrays)


@_on_gpu
def scale_channels(weight: np.ndarray, s: np.ndarray, axis: int, groups: int) -> np.ndarray:
    if _bfloat16(weight) or not weight.dtype.isnative:
        return numpy_backend.scale_channels(weight, s, axis, groups)
    weight = np.ascontiguousarray(weight)
    out = np.empty(weight.shape, weight.dtype)
    if weight.size == 0:
        return out
    channels = weight.shape[axis]
    rows = int(np.prod(weight.shape[: axis + 1], dtype=np.int64))
    group_rows = rows // groups  # rows of [rows, inner] per group of axis 0
    inner = weight.size // rows
    w2, o2 = weight.reshape(rows, inner), out.reshape(rows, inner)
    s_gpu = cp.asarray(s)
    compute = compute_dtype(weight.dtype)
    # Whole rows per piece; a row bigger than a piece is cut along its length
    # (then one row per piece, so every slice stays contiguous).
    rows_per_piece = max(1, _PIECE // max(1, inner * weight.itemsize))
    cols_per_piece = inner if rows_per_piece > 1 else max(1, _PIECE // weight.itemsize)
    for r0 in range(0, rows, rows_per_piece):
        r1 = min(rows, r0 + rows_per_piece)
        r = cp.arange(r0, r1)
        factors = s_gpu[(r // group_rows) * channels + r % channels][:, None]
        for c0 in range(0, inner, cols_per_piece):
            c1 = min(inner, c0 + cols_per_piece)
            piece = cp.asarray(w2[r0:r1, c0:c1]).astype(compute, copy=False)
            (piece * factors).astype(weight.dtype, copy=False).get(out=o2[r0:r1, c0:c1])
    return out


@_on_gpu
def transpose(a: np.ndarray, perm: tuple) -> np.ndarray:
    if a.dtype.hasobject or a.dtype.itemsize not in (1, 2, 4, 8):
        return numpy_backend.transpose(a, perm)
    items = np.dtype(f"u{a.dtype.itemsize}")  # any dtype: only items move
    moved = cp.ascontiguousarray(cp.asarray(np.ascontiguousarray(a).view(items)).transpose(perm))
    return moved.get().view(a.dtype)


@_on_gpu
def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if _bfloat16(a, b):
        return numpy_backend.matmul(a, b)
    compute = compute_dtype(a.dtype) if a.dtype == np.float16 else a.dtype
    product = cp.matmul(cp.asarray(a).astype(compute, copy=False), cp.asarray(b).astype(compute, copy=False))
    return np.asarray(product.astype(a.dtype, copy=False).get())


@_on_gpu
def cast(a: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if _bfloat16(a, np.empty(0, dtype)) or a.dtype.hasobject or dtype.hasobject or a.dtype.kind in "SUV" \
            or dtype.kind in "SUV" or (a.dtype == np.float64 and dtype == np.float16):
        return numpy_backend.cast(a, dtype)
    a = np.ascontiguousarray(a)
    out = np.empty(a.shape, dtype)
    flat_in, flat_out = a.reshape(-1), out.reshape(-1)
    step = max(1, _PIECE // max(a.itemsize, dtype.itemsize))
    for i in range(0, flat_in.size, step):
        cp.asarray(flat_in[i:i + step]).astype(dtype).get(out=flat_out[i:i + step])
    return out
