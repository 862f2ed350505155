"""Which precision each weight dtype is computed in, shared by the backends.

float16 and bfloat16 weights are computed in float32 and rounded once into
their own dtype; float32 stays float32 (a float32 product of two float32
numbers is already the correctly rounded one); float64 stays float64.
"""

from __future__ import annotations

import numpy as np

HALF_NAMES = ("float16", "bfloat16")


def is_half(dtype) -> bool:
    return np.dtype(dtype).name in HALF_NAMES


def is_float(dtype) -> bool:
    """IEEE float dtypes the folds compute with (bfloat16 is ml_dtypes', which numpy calls kind 'V')."""
    dtype = np.dtype(dtype)
    return dtype.kind == "f" or dtype.name == "bfloat16"


def compute_dtype(dtype) -> np.dtype:
    """The dtype arithmetic on weights of `dtype` is done in."""
    dtype = np.dtype(dtype)
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)
