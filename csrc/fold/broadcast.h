// What the math kernels share: multidirectional (numpy-style) broadcasting,
// element types as C++ types (float16 computed in float), and checked
// element counts.
//
// Broadcasting: shapes are right-aligned; along each axis the sizes must be
// equal or 1, and the result takes the other size (1 against 0 gives 0).
//   [2, 3, 4] with [3, 1]  ->  [2, 3, 4]
//   [5, 1]    with [1, 0]  ->  [5, 0]
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "fold/kernels.h"

namespace pyonnxopt::fold {

// The element count of `dims`; false when it passes 2^62 (a malformed or
// absurd shape), so callers never see a wrapped count.
bool checked_numel(const std::vector<int64_t>& dims, uint64_t& count);

// Every input present, its byte count matching its dims: what the kernels
// assume before reading. False, with `why`, otherwise.
bool well_formed(const std::vector<const Array*>& in, size_t count, std::string& why);

// The output of broadcasting some inputs together, and the walk over it that
// gives, for each output element in row-major order, the element index of
// each input.
class Broadcast {
 public:
  // kUnsupported when the shapes do not broadcast, kTooBig when the result
  // (of `out_dtype`) passes the context's size limit.
  static Status make(const KernelContext& ctx, const std::vector<const Array*>& in, int32_t out_dtype,
                     Broadcast& out, std::string& why);

  const std::vector<int64_t>& dims() const { return dims_; }
  uint64_t count() const { return count_; }

  // f(i, index) for each output element i, index[k] being input k's
  // element, until f returns false. False when f did.
  template <class F>
  bool for_each(F&& f) const {
    const size_t rank = dims_.size(), n = strides_.size();
    std::vector<uint64_t> state(n + rank, 0);
    uint64_t* const index = state.data();
    uint64_t* const counter = index + n;
    for (uint64_t i = 0; i < count_; ++i) {
      if (!f(i, static_cast<const uint64_t*>(index))) return false;
      for (size_t axis = rank; axis-- > 0;) {
        const uint64_t size = static_cast<uint64_t>(dims_[axis]);
        for (size_t k = 0; k < n; ++k) index[k] += strides_[k][axis];
        if (++counter[axis] < size) break;
        for (size_t k = 0; k < n; ++k) index[k] -= strides_[k][axis] * size;
        counter[axis] = 0;
      }
    }
    return true;
  }

 private:
  std::vector<int64_t> dims_;
  uint64_t count_ = 0;
  std::vector<std::vector<uint64_t>> strides_;  // per input, per output axis; 0 where broadcast
};

// IEEE half <-> float. Widening is exact; narrowing rounds to nearest even
// and keeps infinities; every NaN becomes the quiet NaN 0x7e00 with its
// sign (as onnxruntime's conversion does).
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);

// How a kernel reads and writes one element type: `T` is what it computes
// in, `load`/`store` move one element between that and the tensor's bytes.
template <class C>
struct Plain {
  using T = C;
  static constexpr size_t kSize = sizeof(C);
  static T load(const uint8_t* p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static void store(uint8_t* p, T v) { std::memcpy(p, &v, sizeof v); }
};
// float16 computed in float. One rounding to half after one float operation
// gives the correctly rounded half result for + - * / and sqrt (float has
// more than twice half's precision plus two bits), so this is exact IEEE
// half arithmetic, not an approximation of it.
struct Half {
  using T = float;
  static constexpr size_t kSize = 2;
  static T load(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return half_to_float(h);
  }
  static void store(uint8_t* p, T v) {
    const uint16_t h = float_to_half(v);
    std::memcpy(p, &h, 2);
  }
};
// Any non-zero byte reads as true; true is written as 1.
struct Bool {
  using T = bool;
  static constexpr size_t kSize = 1;
  static T load(const uint8_t* p) { return *p != 0; }
  static void store(uint8_t* p, T v) { *p = v ? 1 : 0; }
};

// Which element types an op takes.
enum Kinds : unsigned {
  kSigned = 1,     // int8 ... int64
  kUnsigned = 2,   // uint8 ... uint64
  kFloats = 4,     // float, double
  kHalfs = 8,      // float16
  kBools = 16,     // bool
  kIntegers = kSigned | kUnsigned,
  kNumbers = kIntegers | kFloats,
};

// Calls f(E{}) with the element traits (Plain<...>, Half or Bool) of
// `dtype` when it is one of kKinds; false, without calling, otherwise. Only
// the kinds asked for are instantiated.
template <unsigned kKinds, class F>
bool visit(int32_t dtype, F&& f) {
  switch (dtype) {
    case kInt8: if constexpr (bool(kKinds & kSigned)) { f(Plain<int8_t>{}); return true; } break;
    case kInt16: if constexpr (bool(kKinds & kSigned)) { f(Plain<int16_t>{}); return true; } break;
    case kInt32: if constexpr (bool(kKinds & kSigned)) { f(Plain<int32_t>{}); return true; } break;
    case kInt64: if constexpr (bool(kKinds & kSigned)) { f(Plain<int64_t>{}); return true; } break;
    case kUint8: if constexpr (bool(kKinds & kUnsigned)) { f(Plain<uint8_t>{}); return true; } break;
    case kUint16: if constexpr (bool(kKinds & kUnsigned)) { f(Plain<uint16_t>{}); return true; } break;
    case kUint32: if constexpr (bool(kKinds & kUnsigned)) { f(Plain<uint32_t>{}); return true; } break;
    case kUint64: if constexpr (bool(kKinds & kUnsigned)) { f(Plain<uint64_t>{}); return true; } break;
    case kFloat: if constexpr (bool(kKinds & kFloats)) { f(Plain<float>{}); return true; } break;
    case kDouble: if constexpr (bool(kKinds & kFloats)) { f(Plain<double>{}); return true; } break;
    case kFloat16: if constexpr (bool(kKinds & kHalfs)) { f(Half{}); return true; } break;
    case kBool: if constexpr (bool(kKinds & kBools)) { f(Bool{}); return true; } break;
    default: break;
  }
  return false;
}
// Whether `dtype` is one of kKinds.
template <unsigned kKinds>
bool is_kind(int32_t dtype) {
  return visit<kKinds>(dtype, [](auto) {});
}

// Two's-complement wrapping arithmetic without signed overflow (what
// onnxruntime's integer kernels produce on x86 and ARM); plain arithmetic
// for floating types.
template <class T>
using Wide = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
template <class T>
T wrapping_add(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    return static_cast<T>(static_cast<Wide<T>>(static_cast<Wide<T>>(a) + static_cast<Wide<T>>(b)));
  else
    return a + b;
}
template <class T>
T wrapping_sub(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    return static_cast<T>(static_cast<Wide<T>>(static_cast<Wide<T>>(a) - static_cast<Wide<T>>(b)));
  else
    return a - b;
}
template <class T>
T wrapping_mul(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    return static_cast<T>(static_cast<Wide<T>>(static_cast<Wide<T>>(a) * static_cast<Wide<T>>(b)));
  else
    return a * b;
}

}  // namespace pyonnxopt::fold
