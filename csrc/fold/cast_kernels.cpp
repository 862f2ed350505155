// Cast and CastLike between the integer types, bool, float32, float64,
// float16 and bfloat16:
//   integer -> integer   two's complement wrap-around (C++'s and onnxruntime's
//                        conversion);
//   float -> integer     truncation toward zero; where the truncated value
//                        does not fit the target (NaN, inf, out of range) the
//                        node is left alone (kUnsupported): C++ leaves it
//                        undefined and runtimes differ;
//   x -> bool            nonzero (NaN included) is true;
//   x -> float16, bfloat16, float32
//                        round to nearest, ties to even, from the exact value
//                        (no double rounding through float), overflow to inf,
//                        NaN stays NaN;
//   x -> float64         exact, or nearest-even for int64/uint64.
// Strings, float8 and 4-bit types: kUnsupported. Casting to the input's own
// type returns it byte for byte (NaN payloads kept).
#include <algorithm>
#include <cmath>
#include <limits>

#include "fold/shape_util.h"

namespace pyonnxopt::fold {

namespace {

using Inputs = std::vector<const Array*>;
using Outputs = std::vector<Array>;

// One element on its way from one type to another: exact for every source.
struct Num {
  enum Kind { kSigned, kUnsigned, kReal } kind;
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;
};

double from_half(uint16_t h) {
  const int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v;
  if (exp == 0) v = std::ldexp(mant, -24);
  else if (exp == 31) v = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else v = std::ldexp(mant | 0x400, exp - 25);
  return h & 0x8000 ? -v : v;
}

double from_bfloat16(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

Num read(const Array& a, uint64_t k) {
  Num n{Num::kSigned};
  switch (a.dtype) {
    case kInt8: n.i = a.at<int8_t>(k); break;
    case kInt16: n.i = a.at<int16_t>(k); break;
    case kInt32: n.i = a.at<int32_t>(k); break;
    case kInt64: n.i = a.at<int64_t>(k); break;
    case kUint8: case kBool: n.kind = Num::kUnsigned; n.u = a.at<uint8_t>(k); break;
    case kUint16: n.kind = Num::kUnsigned; n.u = a.at<uint16_t>(k); break;
    case kUint32: n.kind = Num::kUnsigned; n.u = a.at<uint32_t>(k); break;
    case kUint64: n.kind = Num::kUnsigned; n.u = a.at<uint64_t>(k); break;
    case kFloat: n.kind = Num::kReal; n.f = a.at<float>(k); break;
    case kDouble: n.kind = Num::kReal; n.f = a.at<double>(k); break;
    case kFloat16: n.kind = Num::kReal; n.f = from_half(a.at<uint16_t>(k)); break;
    case kBFloat16: n.kind = Num::kReal; n.f = from_bfloat16(a.at<uint16_t>(k)); break;
  }
  return n;
}

// The binary floating-point format with `exp_bits` exponent bits and `p`
// stored mantissa bits nearest to (-1)^neg * m * 2^e, ties to even.
uint32_t round_to_format(bool neg, uint64_t m, int e, int exp_bits, int p) {
  const uint32_t sign = static_cast<uint32_t>(neg) << (exp_bits + p);
  if (m == 0) return sign;
  int length = 0;  // bits in m
  for (uint64_t t = m; t; t >>= 1) ++length;
  const int bias = (1 << (exp_bits - 1)) - 1, emin = 1 - bias, inf_exp = (1 << exp_bits) - 1;
  int exponent = e + length - 1;  // of the leading bit
  const int scale = std::max(exponent, emin) - p;  // the result is q * 2^scale
  const int shift = scale - e;
  uint64_t q;
  if (shift <= 0) {
    q = m << -shift;  // exact: m has at most p + 1 bits here
  } else if (shift > 64) {
    q = 0;  // below a quarter of the smallest step
  } else {
    const uint64_t kept = shift == 64 ? 0 : m >> shift;
    const uint64_t rest = shift == 64 ? m : m & ((uint64_t(1) << shift) - 1);
    const uint64_t half = uint64_t(1) << (shift - 1);
    q = kept + (rest > half || (rest == half && (kept & 1)));
  }
  if (exponent < emin) return sign | static_cast<uint32_t>(q);  // subnormal (q == 2^p: the smallest normal)
  if (q >> (p + 1)) {  // rounded up to the next power of two
    q >>= 1;
    ++exponent;
  }
  if (exponent + bias >= inf_exp) return sign | static_cast<uint32_t>(inf_exp) << p;
  return sign | static_cast<uint32_t>(exponent + bias) << p | static_cast<uint32_t>(q & ((uint64_t(1) << p) - 1));
}

uint32_t to_format(const Num& n, int exp_bits, int p) {
  const uint32_t all_ones = static_cast<uint32_t>((1 << exp_bits) - 1) << p;
  if (n.kind == Num::kSigned)
    return round_to_format(n.i < 0, n.i < 0 ? 0 - static_cast<uint64_t>(n.i) : static_cast<uint64_t>(n.i), 0, exp_bits, p);
  if (n.kind == Num::kUnsigned) return round_to_format(false, n.u, 0, exp_bits, p);
  const uint32_t sign = static_cast<uint32_t>(std::signbit(n.f)) << (exp_bits + p);
  if (std::isnan(n.f)) return sign | all_ones | uint32_t(1) << (p - 1);  // quiet NaN
  if (std::isinf(n.f)) return sign | all_ones;
  if (n.f == 0) return sign;
  int ex;
  const double fraction = std::frexp(std::fabs(n.f), &ex);  // in [0.5, 1)
  const uint64_t m = static_cast<uint64_t>(std::ldexp(fraction, 53));
  return round_to_format(std::signbit(n.f), m, ex - 53, exp_bits, p);
}

// Writes `n` as type `to` at `dst`; false when the value has no defined
// result there (a float whose truncation the integer type cannot hold).
bool write(const Num& n, int32_t to, uint8_t* dst) {
  const size_t size = element_size(to);
  switch (to) {
    case kBool: {
      dst[0] = n.kind == Num::kReal ? n.f != 0 : n.kind == Num::kSigned ? n.i != 0 : n.u != 0;
      return true;
    }
    case kFloat16: case kBFloat16: case kFloat: {
      const uint32_t bits = to == kFloat16 ? to_format(n, 5, 10) : to == kBFloat16 ? to_format(n, 8, 7) : to_format(n, 8, 23);
      std::memcpy(dst, &bits, size);  // little-endian: the low bytes
      return true;
    }
    case kDouble: {
      const double d = n.kind == Num::kReal ? n.f : n.kind == Num::kSigned ? static_cast<double>(n.i) : static_cast<double>(n.u);
      std::memcpy(dst, &d, 8);
      return true;
    }
    default: break;
  }
  const bool is_signed = to == kInt8 || to == kInt16 || to == kInt32 || to == kInt64;
  const int bits = static_cast<int>(size * 8);
  uint64_t value;  // two's complement; the low `bits` bits are the result
  if (n.kind == Num::kReal) {
    const double t = std::trunc(n.f);  // NaN fails both range tests
    if (is_signed ? !(t >= -std::ldexp(1.0, bits - 1) && t < std::ldexp(1.0, bits - 1))
                  : !(t > -1.0 && t < std::ldexp(1.0, bits)))
      return false;
    value = is_signed ? static_cast<uint64_t>(static_cast<int64_t>(t)) : static_cast<uint64_t>(t);
  } else {
    value = n.kind == Num::kSigned ? static_cast<uint64_t>(n.i) : n.u;
  }
  std::memcpy(dst, &value, size);
  return true;
}

Status cast_to(const KernelContext& ctx, const Array& x, int32_t to, Outputs& out, std::string& why) {
  if (!element_size(x.dtype) || !element_size(to))
    return unsupported(why, std::string("Cast from ") + ir::dtype_name(x.dtype) + " to " + ir::dtype_name(to));
  const uint64_t count = x.numel();
  if (too_big(ctx, to, count, why)) return Status::kTooBig;
  if (x.dtype == to) {
    out.push_back(x);
    return Status::kDone;
  }
  const size_t size = element_size(to);
  std::string bytes(count * size, '\0');
  for (uint64_t k = 0; k < count; ++k)
    if (!write(read(x, k), to, reinterpret_cast<uint8_t*>(bytes.data()) + k * size))
      return unsupported(why, "a float that does not fit the integer type");
  out.push_back(Array::of_bytes(to, x.dims, std::move(bytes)));
  return Status::kDone;
}

Status cast(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  const ir::Attribute* to = ctx.node.attribute("to");
  if (in.size() != 1 || !in[0] || !to || !attributes_are(ctx.node, cast_attributes(ctx.opset, true)))
    return unsupported(why, "Cast takes one input and `to`");
  return cast_to(ctx, *in[0], static_cast<int32_t>(to->i.value), out, why);
}

Status cast_like(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  if (in.size() != 2 || !in[0] || !in[1]) return unsupported(why, "CastLike takes two inputs");
  if (ctx.opset < 15 || !attributes_are(ctx.node, cast_attributes(ctx.opset, false)))
    return unsupported(why, "no CastLike at this opset, or other attributes");
  return cast_to(ctx, *in[0], in[1]->dtype, out, why);
}

}  // namespace

// saturate (opset 19) and round_mode (24) apply to float8 targets only,
// which stay unsupported.
std::vector<AttrSpec> cast_attributes(int64_t opset, bool with_to) {
  std::vector<AttrSpec> specs;
  if (with_to) specs.push_back({"to", ir::AttrType::kInt});  // an int from Cast-6; Cast-1's is a string
  if (opset >= 19) specs.push_back({"saturate", ir::AttrType::kInt});
  if (opset >= 24) specs.push_back({"round_mode", ir::AttrType::kString});
  return specs;
}

void add_cast_kernels(KernelTable& t) {
  t["Cast"] = cast;
  t["CastLike"] = cast_like;
}

}  // namespace pyonnxopt::fold
