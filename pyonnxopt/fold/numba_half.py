"""float16 and bfloat16 inside numba kernels, which have neither type.

Halves travel as uint16 bit patterns. Reading one is a lookup in a
65,536-entry float32 table (exact: every half is a float32). Writing one
rounds a float32 to nearest-even from its bits, as numpy (float16) and
ml_dtypes (bfloat16) do: overflow gives infinity, NaN stays NaN (quieted;
its payload is not kept), subnormal halves are produced exactly.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic


def table(dtype) -> np.ndarray:
    """float32 value of every uint16 bit pattern of `dtype` (float16 or bfloat16)."""
    bits = np.arange(1 << 16, dtype=np.uint16)
    if np.dtype(dtype) == np.float16:
        return bits.view(np.float16).astype(np.float32)
    return (bits.astype(np.uint32) << 16).view(np.float32)


@intrinsic
def float32_bits(typingctx, x):
    """The bit pattern of a float32 as a uint32 (an LLVM bitcast)."""
    if x != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.uint32(types.float32), codegen


@njit(cache=True, inline="always")
def float16_bits(x):
    """float32 -> float16 bits, round to nearest even."""
    f = np.int64(float32_bits(np.float32(x)))
    sign = (f >> 16) & 0x8000
    f &= 0x7FFFFFFF
    if f >= 0x47800000:  # >= 2**16: infinity, or NaN
        h = 0x7E00 if f > 0x7F800000 else 0x7C00
    elif f >= 0x38800000:  # >= 2**-14: a normal half
        # Re-bias the exponent and add just under half an ulp, plus one
        # when the kept mantissa is odd: ties go to even; a carry into the
        # exponent is the correct rounding up (to infinity past 65504).
        h = (f - 0x38000000 + 0xFFF + ((f >> 13) & 1)) >> 13
    else:
        e = f >> 23
        if e < 102:  # below 2**-25: rounds to zero
            h = 0
        else:  # a subnormal half: the value in units of 2**-24, rounded
            m = (f & 0x7FFFFF) | 0x800000
            shift = 126 - e
            h = m >> shift
            rest = m & ((1 << shift) - 1)
            halfway = 1 << (shift - 1)
            if rest > halfway or (rest == halfway and (h & 1) == 1):
                h += 1
    return np.uint16(h | sign)


@njit(cache=True, inline="always")
def bfloat16_bits(x):
    """float32 -> bfloat16 bits, round to nearest even."""
    f = np.int64(float32_bits(np.float32(x)))
    if (f & 0x7FFFFFFF) > 0x7F800000:
        return np.uint16((f >> 16) | 0x40)
    return np.uint16((f + 0x7FFF + ((f >> 16) & 1)) >> 16)


@njit(cache=True, inline="always")
def half_bits(x, bf16):
    return bfloat16_bits(x) if bf16 else float16_bits(x)
