#include "fold/broadcast.h"

#include <algorithm>

namespace pyonnxopt::fold {

bool checked_numel(const std::vector<int64_t>& dims, uint64_t& count) {
  constexpr uint64_t kMax = uint64_t(1) << 62;
  count = 1;
  bool empty = false;
  uint64_t product = 1;
  for (int64_t d : dims) {
    if (d < 0) return false;
    if (d == 0) empty = true;
    else if (product > kMax / static_cast<uint64_t>(d)) return false;  // even an empty tensor may not name such dims
    else product *= static_cast<uint64_t>(d);
  }
  count = empty ? 0 : product;
  return true;
}

bool well_formed(const std::vector<const Array*>& in, size_t count, std::string& why) {
  if (in.size() != count) {
    why = "expected " + std::to_string(count) + " inputs, got " + std::to_string(in.size());
    return false;
  }
  for (const Array* a : in) {
    uint64_t n = 0;
    if (!a) {
      why = "an input is omitted";
      return false;
    }
    const size_t size = element_size(a->dtype);
    if (!size || !checked_numel(a->dims, n) || a->nbytes() != n * size) {
      why = "an input's data does not match its shape";
      return false;
    }
  }
  return true;
}

Status Broadcast::make(const KernelContext& ctx, const std::vector<const Array*>& in, int32_t out_dtype,
                       Broadcast& out, std::string& why) {
  size_t rank = 0;
  for (const Array* a : in) rank = std::max(rank, a->dims.size());
  out.dims_.assign(rank, 1);
  for (const Array* a : in) {
    const size_t offset = rank - a->dims.size();
    for (size_t i = 0; i < a->dims.size(); ++i) {
      int64_t& d = out.dims_[offset + i];
      const int64_t s = a->dims[i];
      if (s == d || s == 1) continue;
      if (d != 1) {
        why = "shapes do not broadcast";
        return Status::kUnsupported;
      }
      d = s;
    }
  }
  if (!checked_numel(out.dims_, out.count_)) {
    why = "broadcast result has too many elements";
    return Status::kTooBig;
  }
  if (too_big(ctx, out_dtype, out.count_, why)) return Status::kTooBig;
  out.strides_.clear();
  for (const Array* a : in) {
    std::vector<uint64_t> strides(rank, 0);
    uint64_t step = 1;
    const size_t offset = rank - a->dims.size();
    for (size_t i = a->dims.size(); i-- > 0;) {
      const uint64_t d = static_cast<uint64_t>(a->dims[i]);
      if (d != 1) strides[offset + i] = step;
      step *= d;
    }
    out.strides_.push_back(std::move(strides));
  }
  return Status::kDone;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000 | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else {
    // Zero or subnormal: mantissa * 2^-24, exact in float.
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    std::memcpy(&bits, &magnitude, 4);
    bits |= sign;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t ax = x & 0x7fffffff;
  if (ax > 0x7f800000) return sign | 0x7e00;                          // NaN: the quiet NaN
  if (ax >= 0x477ff000) return sign | 0x7c00;                        // from 65520 up (and inf): inf
  if (ax < 0x38800000) {                                             // below 2^-14: subnormal half or zero
    if (ax < 0x33000000) return sign;                                // up to 2^-25 (a tie, to even): zero
    const uint32_t exponent = ax >> 23, mantissa = (ax & 0x7fffff) | 0x800000;
    const uint32_t shift = 126 - exponent;  // mantissa * 2^(exponent - 150) in units of 2^-24
    uint32_t q = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1), tie = 1u << (shift - 1);
    if (rest > tie || (rest == tie && (q & 1))) ++q;  // may carry into the smallest normal: still the right bits
    return sign | static_cast<uint16_t>(q);
  }
  uint32_t q = (ax >> 13) - (112u << 10);
  const uint32_t rest = ax & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (q & 1))) ++q;  // a carry moves into the exponent, as it should
  return sign | static_cast<uint16_t>(q);
}

}  // namespace pyonnxopt::fold
