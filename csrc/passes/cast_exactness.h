// Whether a Cast loses values: x -> Cast<to=via> -> Cast<to=type of x> gives
// x back exactly when `via` holds every value of x's type.
//
//   integer -> integer  exact when the range fits (int8 -> int16, uint8 ->
//                       int16 or uint16, int32 -> int64; bool is uint1)
//   integer -> float    exact when every integer of the range has a float
//                       (n value bits <= mantissa digits): int8/uint8 ->
//                       float16/bfloat16/float32, int16/uint16 -> float32,
//                       int32/uint32 -> float64, never int64 -> float64
//   float -> float      exact when mantissa digits and exponent range both
//                       fit and inf, NaN and -0 survive (float16 -> float32,
//                       bfloat16 -> float32, float32 -> float64, float8 ->
//                       float16 ...)
//   float -> integer    never exact (fractions)
#pragma once

#include <cstdint>

namespace pyonnxopt::passes {

enum class RoundTrip {
  kExact,        // x comes back unchanged for every x
  kLossy,        // precision or range is lost (f32 -> f16 -> f32, int64 -> int32 -> int64, float -> int -> float)
  kNotPrecision  // through bool or string, or a type not modelled: the round trip computes something
};

// What Cast(Cast(x: from, to=via), to=from) does to x.
RoundTrip cast_round_trip(int32_t from, int32_t via);

}  // namespace pyonnxopt::passes
