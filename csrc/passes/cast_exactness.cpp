#include "passes/cast_exactness.h"

namespace pyonnxopt::passes {
namespace {

// An ONNX element type as a set of values.
struct Range {
  enum Class { kOther, kInteger, kFloat } cls = kOther;
  bool is_signed = false;  // integers
  int bits = 0;            // integers: width (bool: 1)
  int digits = 0;          // floats: mantissa digits, the implicit one included
  int emax = 0, emin = 0;  // floats: largest and smallest normal exponent
  bool inf = false, nan = false, negative_zero = false;
};

Range integer(bool is_signed, int bits) {
  Range r;
  r.cls = Range::kInteger;
  r.is_signed = is_signed;
  r.bits = bits;
  return r;
}

Range floating(int digits, int emax, int emin, bool inf, bool nan, bool negative_zero) {
  Range r;
  r.cls = Range::kFloat;
  r.digits = digits;
  r.emax = emax;
  r.emin = emin;
  r.inf = inf;
  r.nan = nan;
  r.negative_zero = negative_zero;
  return r;
}

Range range_of(int32_t dtype) {
  switch (dtype) {
    case 1: return floating(24, 127, -126, true, true, true);     // float32
    case 2: return integer(false, 8);                            // uint8
    case 3: return integer(true, 8);                             // int8
    case 4: return integer(false, 16);                           // uint16
    case 5: return integer(true, 16);                            // int16
    case 6: return integer(true, 32);                            // int32
    case 7: return integer(true, 64);                            // int64
    case 9: return integer(false, 1);                            // bool
    case 10: return floating(11, 15, -14, true, true, true);     // float16
    case 11: return floating(53, 1023, -1022, true, true, true);  // float64
    case 12: return integer(false, 32);                          // uint32
    case 13: return integer(false, 64);                          // uint64
    case 16: return floating(8, 127, -126, true, true, true);    // bfloat16
    case 17: return floating(4, 8, -6, false, true, true);       // float8e4m3fn
    case 18: return floating(4, 7, -7, false, true, false);      // float8e4m3fnuz
    case 19: return floating(3, 15, -14, true, true, true);      // float8e5m2
    case 20: return floating(3, 15, -15, false, true, false);    // float8e5m2fnuz
    case 21: return integer(false, 4);                           // uint4
    case 22: return integer(true, 4);                            // int4
    case 23: return floating(2, 2, 0, false, false, true);       // float4e2m1
    default: return Range{};                                     // string, complex, the rest
  }
}

bool holds(const Range& from, const Range& via) {
  if (from.cls == Range::kInteger && via.cls == Range::kInteger) {
    if (from.is_signed && !via.is_signed) return false;
    return from.is_signed == via.is_signed ? via.bits >= from.bits : via.bits > from.bits;
  }
  if (from.cls == Range::kInteger && via.cls == Range::kFloat) {
    // Integers up to 2^digits are exact; the largest magnitude is 2^(bits-1)
    // (signed) or 2^bits - 1 (unsigned), with exponent bits - 1.
    const int value_bits = from.is_signed ? from.bits - 1 : from.bits;
    return value_bits <= via.digits && from.bits - 1 <= via.emax;
  }
  if (from.cls == Range::kFloat && via.cls == Range::kFloat) {
    // Subnormals of `from` are multiples of 2^(emin - digits + 1); they fit
    // in `via` when its digits and emin reach as far.
    return via.digits >= from.digits && via.emax >= from.emax && via.emin <= from.emin && (via.inf || !from.inf) &&
           (via.nan || !from.nan) && (via.negative_zero || !from.negative_zero);
  }
  return false;  // float -> integer: fractions go
}

}  // namespace

RoundTrip cast_round_trip(int32_t from, int32_t via) {
  if (from == via) return RoundTrip::kExact;
  const Range f = range_of(from), v = range_of(via);
  if (f.cls == Range::kOther || v.cls == Range::kOther) return RoundTrip::kNotPrecision;
  if (via == 9) return RoundTrip::kNotPrecision;  // x != 0: a comparison, not a rounding
  return holds(f, v) ? RoundTrip::kExact : RoundTrip::kLossy;
}

}  // namespace pyonnxopt::passes
