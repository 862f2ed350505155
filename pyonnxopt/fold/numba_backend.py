"""The numba fold backend: the same results as numpy, on every core.

Kernels are `njit(parallel=True, cache=True)` with `prange` over the outer
dimension (rows of the weight, tiles of a transpose), so the first call in
a fresh environment compiles (1-3 s a kernel) and later processes load them
from the cache (see numba_cache for where). Imported only when a tensor is
big enough to use it. numba picks its threading layer; with GNU OpenMP
("omp") a process forked after a parallel kernel ran must not run one, and
its threads wait passively (below).

float16/bfloat16 go as uint16 bits (numba_half); transposes move raw items
of 1, 2, 4 or 8 bytes, so they take any such dtype. What numba cannot do
exactly goes to numpy: matmul (numpy's BLAS is multi-threaded already),
casts other than among bool/integers/float32/float64 and between float32
and the halves, and object or odd-sized items.
"""

from __future__ import annotations

import os

# GNU OpenMP's threads spin while they wait; on a busy machine the spinning
# takes the cores the kernel's other threads need: measured on 2 shared
# cores, 24 ms for a 1 MB scale instead of 0.1 ms. Read when numba's OpenMP
# layer starts; a value the user set stays.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numba  # noqa: E402, F401  (configured before any kernel below is compiled)
import numpy as np  # noqa: E402

from pyonnxopt.fold import numpy_backend  # noqa: E402
from pyonnxopt.fold.numba_cache import configure  # noqa: E402

configure(os.path.dirname(os.path.abspath(__file__)))

from numba import njit, prange  # noqa: E402

from pyonnxopt.fold.numba_half import half_bits, table  # noqa: E402

name = "numba"

# Below this many elements per row, scaling goes column-wise (the
# per-channel factors repeated along a row) so rows stay long.
_SHORT_ROW = 64
_TILE = 32
_TABLES: dict = {}


def _table(dtype) -> np.ndarray:
    key = np.dtype(dtype).name
    if key not in _TABLES:
        _TABLES[key] = table(dtype)
    return _TABLES[key]


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint16)


def _readonly(a: np.ndarray) -> np.ndarray:
    """A read-only view: numba compiles a kernel once per writability, and
    inputs often are read-only (memory-mapped weights); one variant will do."""
    view = a.view()
    view.flags.writeable = False
    return view


# ---- scale_channels


# Rows of [outer * channels, inner]: row r is channel r % channels of group
# r // group_rows, so it takes s[group * channels + r % channels].


@njit(parallel=True, cache=True)
def _scale_rows(w, s, channels, group_rows, out):
    for r in prange(w.shape[0]):
        sc = s[(r // group_rows) * channels + r % channels]
        for i in range(w.shape[1]):
            out[r, i] = w[r, i] * sc


@njit(parallel=True, cache=True)
def _scale_rows_half(w, values, s, channels, group_rows, bf16, out):
    for r in prange(w.shape[0]):
        sc = s[(r // group_rows) * channels + r % channels]
        for i in range(w.shape[1]):
            out[r, i] = half_bits(values[w[r, i]] * sc, bf16)


# Rows of [outer, channels * inner] (short inner dims): row r belongs to
# group r // group_rows, whose factors are s_rows[group], repeated per item.


@njit(parallel=True, cache=True)
def _scale_cols(w, s_rows, group_rows, out):
    for r in prange(w.shape[0]):
        s_row = s_rows[r // group_rows]
        for i in range(w.shape[1]):
            out[r, i] = w[r, i] * s_row[i]


@njit(parallel=True, cache=True)
def _scale_cols_half(w, values, s_rows, group_rows, bf16, out):
    for r in prange(w.shape[0]):
        s_row = s_rows[r // group_rows]
        for i in range(w.shape[1]):
            out[r, i] = half_bits(values[w[r, i]] * s_row[i], bf16)


def scale_channels(weight: np.ndarray, s: np.ndarray, axis: int, groups: int) -> np.ndarray:
    if not weight.dtype.isnative:  # numba has no byte-swapped arrays
        return numpy_backend.scale_channels(weight, s, axis, groups)
    weight = _readonly(np.ascontiguousarray(weight))
    out = np.empty(weight.shape, weight.dtype)
    if weight.size == 0:
        return out
    outer = int(np.prod(weight.shape[:axis], dtype=np.int64))
    channels = weight.shape[axis]
    inner = weight.size // (outer * channels)
    half = weight.dtype.name in ("float16", "bfloat16")
    bf16 = weight.dtype.name == "bfloat16"
    w, o = (_bits(weight), _bits(out)) if half else (weight, out)
    if inner >= _SHORT_ROW or outer == 1:
        w2, o2 = w.reshape(outer * channels, inner), o.reshape(outer * channels, inner)
        group_rows = outer // groups * channels
        if half:
            _scale_rows_half(w2, _table(weight.dtype), s, channels, group_rows, bf16, o2)
        else:
            _scale_rows(w2, s, channels, group_rows, o2)
    else:
        s_rows = np.repeat(s.reshape(groups, channels), inner, axis=1)
        w2, o2 = w.reshape(outer, channels * inner), o.reshape(outer, channels * inner)
        if half:
            _scale_cols_half(w2, _table(weight.dtype), s_rows, outer // groups, bf16, o2)
        else:
            _scale_cols(w2, s_rows, outer // groups, o2)
    return out


# ---- transpose


def reduce_transpose(shape: tuple, perm: tuple) -> tuple:
    """(input shape, perm) of the same data movement with size-1 axes dropped
    and input axes that stay next to each other, in order, merged into one:
    [O, I, kh, kw] with perm (1, 0, 2, 3) is [O, I, kh*kw] with (1, 0, 2)."""
    kept = [a for a in range(len(shape)) if shape[a] != 1]
    position = {a: i for i, a in enumerate(kept)}
    groups: list = []  # runs of kept input axes, in output order
    for a in perm:
        if shape[a] == 1:
            continue
        if groups and position[groups[-1][-1]] + 1 == position[a]:
            groups[-1].append(a)
        else:
            groups.append([a])
    by_input = sorted(range(len(groups)), key=lambda g: groups[g][0])
    new_shape = tuple(int(np.prod([shape[a] for a in groups[g]], dtype=np.int64)) for g in by_input)
    rank = {g: i for i, g in enumerate(by_input)}
    return new_shape, tuple(rank[g] for g in range(len(groups)))


@njit(parallel=True, cache=True)
def _transpose_tiles(src, dst, oshape, istride, ostride, dq, oq, dl, sl, item, tile):
    """Tiles of the output axis q (contiguous in the input, output stride oq)
    by the last output axis (contiguous in the output, input stride sl), for
    every index of the other output axes (oshape/istride/ostride). Offsets
    and strides count items of `item` elements that move whole."""
    nd = oshape.shape[0]
    outer = 1
    for d in range(nd):
        outer *= oshape[d]
    tiles_q = (dq + tile - 1) // tile
    for work in prange(outer * tiles_q):
        rem = work // tiles_q
        i0 = (work % tiles_q) * tile
        i1 = min(dq, i0 + tile)
        ib = 0
        ob = 0
        for d in range(nd - 1, -1, -1):
            index = rem % oshape[d]
            rem //= oshape[d]
            ib += index * istride[d]
            ob += index * ostride[d]
        for j0 in range(0, dl, tile):
            j1 = min(dl, j0 + tile)
            if item == 1:
                for i in range(i0, i1):
                    for j in range(j0, j1):
                        dst[ob + i * oq + j] = src[ib + i + j * sl]
            else:
                for i in range(i0, i1):
                    for j in range(j0, j1):
                        o = (ob + i * oq + j) * item
                        n = (ib + i + j * sl) * item
                        for e in range(item):
                            dst[o + e] = src[n + e]


def _strides(shape) -> list:
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return out[::-1]


def transpose(a: np.ndarray, perm: tuple) -> np.ndarray:
    if a.dtype.hasobject or a.dtype.itemsize not in (1, 2, 4, 8):
        return numpy_backend.transpose(a, perm)
    a = _readonly(np.ascontiguousarray(a))
    out = np.empty(tuple(a.shape[p] for p in perm), a.dtype)
    shape, rperm = reduce_transpose(a.shape, perm)
    if a.size == 0 or rperm == tuple(range(len(rperm))):
        np.copyto(out, a.reshape(out.shape))  # the same order of items
        return out
    items = np.dtype(f"u{a.dtype.itemsize}")
    src, dst = a.reshape(-1).view(items), out.reshape(-1).view(items)
    item = 1
    if rperm[-1] == len(rperm) - 1:
        # The input's last axis stays last: its rows move whole, as items of
        # a transpose of the other axes (which reduce_transpose left unmerged).
        item = shape[-1]
        shape, rperm = shape[:-1], rperm[:-1]
    n = len(shape)
    istride = _strides(shape)
    oshape = [shape[p] for p in rperm]
    ostride = _strides(oshape)
    istride_of_out = [istride[p] for p in rperm]
    q = rperm.index(n - 1)  # the output axis that reads contiguous input
    others = [d for d in range(n) if d not in (q, n - 1)]
    _transpose_tiles(src, dst, np.array([oshape[d] for d in others], np.int64),
                     np.array([istride_of_out[d] for d in others], np.int64),
                     np.array([ostride[d] for d in others], np.int64),
                     oshape[q], ostride[q], oshape[-1], istride_of_out[-1], item, _TILE)
    return out


# ---- cast


@njit(parallel=True, cache=True)
def _cast(a, out):
    for i in prange(a.shape[0]):
        out[i] = a[i]


@njit(parallel=True, cache=True)
def _cast_to_bool(a, out):
    for i in prange(a.shape[0]):
        out[i] = a[i] != 0


@njit(parallel=True, cache=True)
def _cast_from_half(a, values, out):
    for i in prange(a.shape[0]):
        out[i] = values[a[i]]


@njit(parallel=True, cache=True)
def _cast_to_half(a, bf16, out):
    for i in prange(a.shape[0]):
        out[i] = half_bits(a[i], bf16)


_NATIVE = frozenset("?bhilqBHILQfd")  # bool, integers, float32, float64


def cast(a: np.ndarray, dtype: np.dtype) -> np.ndarray:
    src, dst = a.dtype, np.dtype(dtype)
    half_src, half_dst = src.name in ("float16", "bfloat16"), dst.name in ("float16", "bfloat16")
    native_src, native_dst = src.char in _NATIVE and src.isnative, dst.char in _NATIVE and dst.isnative
    if not ((native_src or half_src) and (native_dst or half_dst)) or (half_src and half_dst) \
            or (half_dst and src != np.float32):
        return numpy_backend.cast(a, dst)  # numba cannot do it, or not with one rounding
    a = _readonly(np.ascontiguousarray(a))
    out = np.empty(a.shape, dst)
    flat_in, flat_out = a.reshape(-1), out.reshape(-1)
    if a.size == 0:
        return out
    if half_src:
        _cast_from_half(_bits(flat_in), _table(src), flat_out)
    elif half_dst:
        _cast_to_half(flat_in, dst.name == "bfloat16", _bits(flat_out))
    elif dst == np.bool_:
        _cast_to_bool(flat_in, flat_out)
    else:
        _cast(flat_in, flat_out)
    return out


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return numpy_backend.matmul(a, b)
