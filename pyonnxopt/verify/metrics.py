"""How far one tensor is from another: max abs and relative error, cosine
similarity, SNR in dB, an error histogram, and a pass/fail by per-dtype
tolerances.

Records are JSON-safe: a metric that is not a finite number is null
(`snr_db` is null when the error is exactly zero, i.e. infinite SNR;
`max_rel` is taken over elements whose expected value is non-zero and is
0.0 when there are none). Non-finite values count as equal when both
arrays hold the same one (NaN, +inf or -inf) at the same place; the
metrics are taken over the places where both are finite. An intermediate
may be compared in another layout: `reshaped`, the optimized tensor's
shape where it holds the same elements in the same order (a pass ran a
region on rows, [B, S, E] -> [B*S, E]), or `layout`, the permutation of the
original's axes that gives the optimized tensor.
"""

from __future__ import annotations

import itertools
import math
from typing import Optional

import numpy as np

# Per numpy dtype name. Floats compare as |actual - expected| <= atol +
# rtol * |expected| per element (numpy's allclose); integers and booleans
# must be equal. float32's defaults leave room for re-associated sums and
# folded weights (Conv+BatchNorm), float16's for its 11-bit mantissa.
DEFAULT_TOLERANCES = {
    "float64": {"atol": 1e-8, "rtol": 1e-7},
    "float32": {"atol": 1e-4, "rtol": 1e-3},
    "float16": {"atol": 1e-3, "rtol": 1e-2},
    "bfloat16": {"atol": 1e-2, "rtol": 2e-2},
}
EXACT = {"atol": 0.0, "rtol": 0.0}

# |error| buckets, one per decade: [0, 1e-12), [1e-12, 1e-11), ..., [1e-1, 1), [1, inf].
# Fixed, so histograms of several samples add up.
HISTOGRAM_EDGES = [0.0] + [10.0**e for e in range(-12, 1)] + [math.inf]


def tolerance(dtype_name: str, tolerances: Optional[dict] = None) -> dict:
    """The tolerance for a dtype: the override, else the default; exact for
    integers and booleans; float32's for floats without an entry."""
    table = tolerances if tolerances is not None else DEFAULT_TOLERANCES
    if dtype_name in table:
        return table[dtype_name]
    if dtype_name.startswith(("float", "bfloat", "complex")):
        return table.get("float32", DEFAULT_TOLERANCES["float32"])
    return EXACT


def _finite(x: float) -> Optional[float]:
    return float(x) if math.isfinite(x) else None


def _empty_histogram() -> dict:
    return {"edges": HISTOGRAM_EDGES, "counts": [0] * (len(HISTOGRAM_EDGES) - 1)}


def _failed(expected, actual, why: str) -> dict:
    return {"shape": list(np.shape(expected)), "dtype": str(np.asarray(expected).dtype), "max_abs": None,
            "max_rel": None, "cosine": None, "snr_db": None, "ok": False, "histogram": _empty_histogram(),
            "mismatch": why}


MAX_LAYOUTS_TRIED = 24  # permutations giving the new shape; more only with many equal dims


def _in_another_layout(expected, actual, atol: float, rtol: float) -> Optional[dict]:
    """The comparison with expected reshaped to actual's shape, or with its
    axes permuted, for the first permutation that gives actual's shape and
    passes; None when none does."""
    if expected.size != actual.size or expected.dtype != actual.dtype:
        return None
    record = compare_arrays(expected.reshape(actual.shape), actual, atol, rtol)
    if record["ok"]:
        return {**record, "shape": list(expected.shape), "reshaped": list(actual.shape)}
    if expected.ndim != actual.ndim:
        return None
    tried = 0
    for perm in itertools.permutations(range(expected.ndim)):
        if tuple(expected.shape[p] for p in perm) != actual.shape:
            continue
        record = compare_arrays(expected.transpose(perm), actual, atol, rtol)
        if record["ok"]:
            return {**record, "shape": list(expected.shape), "layout": list(perm)}
        tried += 1
        if tried == MAX_LAYOUTS_TRIED:
            break
    return None


def compare_arrays(expected, actual, atol: float, rtol: float, layouts: bool = False) -> dict:
    """Compares `actual` with `expected` (the original's tensor); see the
    module docstring. `layouts`: a tensor of another shape is compared with
    expected's axes permuted to it, when some permutation passes (an
    optimizer moved a Transpose past an intermediate); the record then has
    `layout`, that permutation."""
    expected, actual = np.asarray(expected), np.asarray(actual)
    if expected.shape != actual.shape:
        moved = _in_another_layout(expected, actual, atol, rtol) if layouts else None
        if moved is not None:
            return moved
        return _failed(expected, actual, f"shape {list(expected.shape)} became {list(actual.shape)}")
    if expected.dtype != actual.dtype:
        return _failed(expected, actual, f"dtype {expected.dtype} became {actual.dtype}")
    record = {"shape": list(expected.shape), "dtype": str(expected.dtype)}
    if np.array_equal(expected, actual):  # the common case after exact rewrites: one pass over memory
        counts = [0] * (len(HISTOGRAM_EDGES) - 1)
        counts[0] = int(expected.size)
        return {**record, "max_abs": 0.0, "max_rel": 0.0, "cosine": 1.0, "snr_db": None, "ok": True,
                "histogram": {"edges": HISTOGRAM_EDGES, "counts": counts}, "mismatch": None}
    exact = expected.dtype.kind not in "fc"
    wide = np.float64 if expected.dtype.itemsize >= 8 or exact else np.float32
    e = expected.astype(wide, copy=False).ravel()
    a = actual.astype(wide, copy=False).ravel()
    mismatch, differing = None, 0
    if not exact:
        e, a, differing = _finite_places(e, a)
        if differing:
            mismatch = f"non-finite values differ at {differing} place(s)"
    err = np.abs(a - e)
    magnitude = np.abs(e)
    max_abs = float(err.max()) if err.size else 0.0
    max_rel = float(np.divide(err, magnitude, out=np.zeros_like(err), where=magnitude > 0).max()) if err.size else 0.0
    # products in the tensor's precision, sums in float64
    signal = float(np.add.reduce(e * e, dtype=np.float64))
    noise = float(np.add.reduce(err * err, dtype=np.float64))
    norms = math.sqrt(signal) * math.sqrt(float(np.add.reduce(a * a, dtype=np.float64)))
    if norms > 0:
        cosine = float(np.add.reduce(e * a, dtype=np.float64)) / norms
    else:  # both zero: the same; one zero: orthogonal
        cosine = 1.0 if signal == 0 and noise == 0 else 0.0
    snr_db = 10.0 * math.log10(signal / noise) if noise > 0 and signal > 0 else None
    # a binary search per element (np.histogram would sort the errors first)
    bucket = np.searchsorted(np.asarray(HISTOGRAM_EDGES, err.dtype), err, side="right") - 1
    counts = np.bincount(bucket, minlength=len(HISTOGRAM_EDGES) - 1)
    counts[-1] += differing  # non-finite places that differ: the worst bucket
    if mismatch is None:
        within = max_abs == 0 if exact else bool(np.all(err <= atol + rtol * magnitude))
        if not within:
            mismatch = (f"max abs error {max_abs:.3g}, max rel error {max_rel:.3g} beyond atol {atol:g}, "
                        f"rtol {rtol:g}")
    return {**record, "max_abs": _finite(max_abs), "max_rel": _finite(max_rel), "cosine": _finite(cosine),
            "snr_db": None if snr_db is None else _finite(snr_db), "ok": mismatch is None,
            "histogram": {"edges": HISTOGRAM_EDGES, "counts": [int(c) for c in counts]}, "mismatch": mismatch}


def _finite_places(e: np.ndarray, a: np.ndarray) -> tuple:
    """The values where both are finite, and how many places hold different
    non-finite values (the same NaN or inf in both is equal)."""
    fe, fa = np.isfinite(e), np.isfinite(a)
    if fe.all() and fa.all():
        return e, a, 0
    both = fe & fa
    same = ~fe & ~fa & ((np.isnan(e) & np.isnan(a)) | (e == a))
    return e[both], a[both], int(np.count_nonzero(~both & ~same))


def _worst(x, y, pick):
    if x is None:
        return y
    if y is None:
        return x
    return pick(x, y)


def merge(a: dict, b: dict) -> dict:
    """The worst of two records of the same tensor (several samples or batch
    sizes): the larger errors, the smaller cosine and SNR, ok only when both
    are, the first reason for a mismatch; histogram counts add up. Fields
    other than the metrics (name, order, ...) come from `a`."""
    merged = dict(a)
    merged["max_abs"] = _worst(a["max_abs"], b["max_abs"], max)
    merged["max_rel"] = _worst(a["max_rel"], b["max_rel"], max)
    merged["cosine"] = _worst(a["cosine"], b["cosine"], min)
    # null SNR means "no error" when the record is ok: the other one is worse
    merged["snr_db"] = _worst(a["snr_db"], b["snr_db"], min)
    merged["ok"] = a["ok"] and b["ok"]
    merged["mismatch"] = a["mismatch"] or b["mismatch"]
    if any(not r["ok"] and r["max_abs"] is None for r in (a, b)):  # a shape change has no metrics
        for key in ("max_abs", "max_rel", "cosine", "snr_db"):
            merged[key] = None
    merged["histogram"] = {"edges": a["histogram"]["edges"],
                           "counts": [x + y for x, y in zip(a["histogram"]["counts"], b["histogram"]["counts"])]}
    return merged
