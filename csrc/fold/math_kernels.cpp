// Kernels for small elementwise math, comparisons, logic and bitwise ops;
// the reductions are in reduce_kernels.cpp.
//
//   Add Sub Mul Div Mod Pow Min Max Sum Mean       (broadcasting; Min ... Mean variadic)
//   Neg Abs Sign Sqrt Reciprocal Floor Ceil IsNaN IsInf
//   Equal Less Greater LessOrEqual GreaterOrEqual  -> bool
//   And Or Xor Not                                  (bool)
//   BitwiseAnd BitwiseOr BitwiseXor BitwiseNot BitShift
//   Where
//
// Each result is what onnxruntime's CPU kernel computes for the same inputs,
// bit for bit (a NaN's payload aside): floating ops are one IEEE operation
// in the input's own type (float16 through float, which rounds the same);
// integer + - * wrap in two's complement; integer division truncates toward
// zero; Mod with fmod=0 takes the divisor's sign; Min/Max return a NaN
// operand, the first one; Sum adds left to right; Mean multiplies the sum by
// 1/n (not divides: onnxruntime's order). Refuses (kUnsupported), leaving
// the node to the fallback:
//   1. an element type the op does not take here (listed per op below);
//   2. malformed input: wrong input count, an omitted input, inputs of
//      different types, shapes that do not broadcast;
//   3. integer division or Mod by zero, and INT_MIN / -1, INT_MIN % -1;
//   4. Min/Max of +0 and -0 (onnxruntime answers either, by vector path);
//   5. Mod with fmod=0 on floats before opset 28 (undefined there);
//      BitShift on signed integers before opset 28;
//   6. Pow with a non-integer exponent, or a result that is not exact (an
//      integer past 2^53, a float that needs rounding or is not normal):
//      onnxruntime's several pow paths agree only on exact results.
// A result past the size limit is kTooBig before anything is computed.
#include <algorithm>
#include <cmath>

#include "fold/broadcast.h"

namespace pyonnxopt::fold {

void add_reduce_kernels(KernelTable& table);  // reduce_kernels.cpp

namespace {

using Inputs = std::vector<const Array*>;
using Outputs = std::vector<Array>;

Status refuse(std::string& why, std::string reason) {
  why = std::move(reason);
  return Status::kUnsupported;
}

Status wrong_type(std::string& why, const Array& a) {
  return refuse(why, std::string("no native kernel for ") + ir::dtype_name(a.dtype) + " inputs");
}

template <class T>
constexpr bool kInteger = std::is_integral_v<T> && !std::is_same_v<T, bool>;

// out = f(a, b) over the broadcast of a and b, elements read as A and B and
// written as Out. f(x, y, r) sets r and returns nullptr, or returns why not
// (the whole node is then refused).
template <class A, class B, class Out, class F>
Status binary(const KernelContext& ctx, const Array& a, const Array& b, int32_t out_dtype, F&& f,
              Outputs& out, std::string& why) {
  Broadcast bc;
  if (Status s = Broadcast::make(ctx, {&a, &b}, out_dtype, bc, why); s != Status::kDone) return s;
  std::string bytes(bc.count() * Out::kSize, '\0');
  const uint8_t *pa = a.bytes.data(), *pb = b.bytes.data();
  uint8_t* po = reinterpret_cast<uint8_t*>(bytes.data());
  const char* refused = nullptr;
  bc.for_each([&](uint64_t i, const uint64_t* at) {
    typename Out::T r{};
    refused = f(A::load(pa + at[0] * A::kSize), B::load(pb + at[1] * B::kSize), r);
    Out::store(po + i * Out::kSize, r);
    return refused == nullptr;
  });
  if (refused) return refuse(why, refused);
  out.push_back(Array::of_bytes(out_dtype, bc.dims(), std::move(bytes)));
  return Status::kDone;
}

// Two inputs of one type among `kinds`; the result is of that type, or bool
// when kToBool.
template <unsigned kKinds, bool kToBool = false, class F>
Status same_type_binary(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why, F&& f) {
  if (!well_formed(in, 2, why)) return Status::kUnsupported;
  if (in[0]->dtype != in[1]->dtype) return refuse(why, "inputs of different types");
  Status s = Status::kUnsupported;
  const bool known = visit<kKinds>(in[0]->dtype, [&](auto e) {
    using E = decltype(e);
    if constexpr (kToBool)
      s = binary<E, E, Bool>(ctx, *in[0], *in[1], kBool, f, out, why);
    else
      s = binary<E, E, E>(ctx, *in[0], *in[1], in[0]->dtype, f, out, why);
  });
  return known ? s : wrong_type(why, *in[0]);
}

// out = f(a) elementwise; f as in binary().
template <class In, class Out, class F>
Status unary(const KernelContext& ctx, const Array& a, int32_t out_dtype, F&& f, Outputs& out, std::string& why) {
  const uint64_t n = a.numel();  // well_formed checked it
  if (too_big(ctx, out_dtype, n, why)) return Status::kTooBig;
  std::string bytes(n * Out::kSize, '\0');
  const uint8_t* pa = a.bytes.data();
  uint8_t* po = reinterpret_cast<uint8_t*>(bytes.data());
  for (uint64_t i = 0; i < n; ++i) {
    typename Out::T r{};
    if (const char* refused = f(In::load(pa + i * In::kSize), r)) return refuse(why, refused);
    Out::store(po + i * Out::kSize, r);
  }
  out.push_back(Array::of_bytes(out_dtype, a.dims, std::move(bytes)));
  return Status::kDone;
}

template <unsigned kKinds, bool kToBool = false, class F>
Status same_type_unary(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why, F&& f) {
  if (!well_formed(in, 1, why)) return Status::kUnsupported;
  Status s = Status::kUnsupported;
  const bool known = visit<kKinds>(in[0]->dtype, [&](auto e) {
    using E = decltype(e);
    if constexpr (kToBool)
      s = unary<E, Bool>(ctx, *in[0], kBool, f, out, why);
    else
      s = unary<E, E>(ctx, *in[0], in[0]->dtype, f, out, why);
  });
  return known ? s : wrong_type(why, *in[0]);
}

// ---- arithmetic ----------------------------------------------------------

Status add(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  return same_type_binary<kNumbers | kHalfs>(ctx, in, out, why, [](auto a, auto b, auto& r) -> const char* {
    r = wrapping_add(a, b);
    return nullptr;
  });
}

Status sub(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  return same_type_binary<kNumbers | kHalfs>(ctx, in, out, why, [](auto a, auto b, auto& r) -> const char* {
    r = wrapping_sub(a, b);
    return nullptr;
  });
}

Status mul(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  return same_type_binary<kNumbers | kHalfs>(ctx, in, out, why, [](auto a, auto b, auto& r) -> const char* {
    r = wrapping_mul(a, b);
    return nullptr;
  });
}

// Integer a / b and a % b: the cases C++ leaves undefined (and x86 traps on).
template <class T>
const char* division_fault(T a, T b) {
  if (b == 0) return "integer division by zero";
  if constexpr (std::is_signed_v<T>)
    if (a == std::numeric_limits<T>::min() && b == T(-1)) return "integer division overflows (INT_MIN / -1)";
  return nullptr;
}

Status div(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  return same_type_binary<kNumbers | kHalfs>(ctx, in, out, why, [](auto a, auto b, auto& r) -> const char* {
    using T = decltype(a);
    if constexpr (kInteger<T>)
      if (const char* fault = division_fault(a, b)) return fault;
    r = static_cast<T>(a / b);  // integers: truncates toward zero
    return nullptr;
  });
}

Status mod(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  const int64_t fmod = int_attribute(ctx.node, "fmod", 0);
  if (fmod != 0 && fmod != 1) return refuse(why, "fmod is neither 0 nor 1");
  if (fmod == 0 && ctx.opset < 28 && !in.empty() && in[0] && is_kind<kFloats | kHalfs>(in[0]->dtype))
    return refuse(why, "Mod with fmod=0 on floats is undefined before opset 28");
  return same_type_binary<kNumbers | kHalfs>(ctx, in, out, why, [fmod](auto a, auto b, auto& r) -> const char* {
    using T = decltype(a);
    if constexpr (kInteger<T>) {
      if (const char* fault = division_fault(a, b)) return fault;
      T m = static_cast<T>(a % b);
      if constexpr (std::is_signed_v<T>)
        if (!fmod && m != 0 && ((m < 0) != (b < 0))) m = static_cast<T>(m + b);  // |m| < |b|: no overflow
      r = m;
    } else {
      T m = std::fmod(a, b);  // exact
      if (!fmod) {
        if (m == 0) m = std::copysign(T(0), b);
        else if ((b < 0) != (m < 0)) m += b;  // the one rounding of a - floor(a/b)*b; NaN stays NaN
      }
      r = m;
    }
    return nullptr;
  });
}

// Pow is folded only where the result is exact: onnxruntime computes it
// with std::pow (through double for integer bases, then truncated), x*x for
// a scalar exponent 2, and so on; all of these are exact when the exact
// result is representable, and differ from each other otherwise.

// Integer a^b, exactly; false past 2^53, where doubles stop being exact.
bool exact_power(int64_t base, int64_t exponent, int64_t& result) {
  constexpr int64_t kExact = int64_t(1) << 53;
  if (exponent < 0) {  // |result| < 1 truncates to 0, except for the bases +-1
    if (base == 0) return false;  // inf, cast to an integer: undefined
    result = base == 1 ? 1 : base == -1 ? (exponent % 2 ? -1 : 1) : 0;
    return true;
  }
  if (exponent == 0 || base == 0 || base == 1) {
    result = exponent == 0 ? 1 : base;
    return true;
  }
  if (base == -1) {
    result = exponent % 2 ? -1 : 1;
    return true;
  }
  if (base < -kExact || base > kExact) return false;
  result = 1;
  for (int64_t i = 0; i < exponent; ++i) {  // |base| >= 2: at most 53 rounds
    if (std::abs(result) > kExact / std::abs(base)) return false;
    result *= base;
  }
  return true;
}

// Significant bits of a finite non-zero double, from its highest set bit to
// its lowest.
int odd_bits(double v) {
  int ex = 0;
  uint64_t m = static_cast<uint64_t>(std::ldexp(std::fabs(std::frexp(v, &ex)), 53));
  m >>= __builtin_ctzll(m);
  return 64 - __builtin_clzll(m);
}

// Floating x^n for an integer n, exactly, in T; false when the result is
// not a normal number of T, or not exact.
template <class T>
bool exact_power(double x, int64_t n, T& result) {
  if (!std::isfinite(x)) return false;
  if (n == 0) {
    result = 1;
    return true;
  }
  if (x == 0) {  // +-0: a sign only for -0 to an odd power; 1/0 is left alone
    if (n < 0) return false;
    result = static_cast<T>(n % 2 ? x : 0.0);
    return true;
  }
  const uint64_t m = n < 0 ? uint64_t(0) - static_cast<uint64_t>(n) : static_cast<uint64_t>(n);
  double p = 1;
  if (std::fabs(x) == 1) {
    p = (x < 0 && m % 2) ? -1.0 : 1.0;
  } else {
    const int bits = odd_bits(x);
    for (uint64_t i = 0; i < m; ++i) {  // |p| moves away from 1 each round: ends within ~2100
      if (odd_bits(p) + bits > 53) return false;
      p *= x;  // exact: the odd parts fit, and the range is checked next
      if (!std::isfinite(p) || std::fabs(p) < std::numeric_limits<double>::min()) return false;
    }
  }
  if (n < 0) {
    int ex = 0;
    if (std::fabs(std::frexp(p, &ex)) != 0.5) return false;  // 1/p exact only for powers of two
    p = 1 / p;
  }
  const T r = static_cast<T>(p);
  if (static_cast<double>(r) != p || !std::isfinite(r) || std::fabs(r) < std::numeric_limits<T>::min()) return false;
  result = r;
  return true;
}

// Exponents as int64: integers (a uint64 past 2^63 refused), or floats that
// hold integers.
bool integer_exponents(const Array& y, Array& out, std::string& why) {
  std::vector<int64_t> n(y.numel());
  if (is_kind<kIntegers>(y.dtype)) {
    if (y.dtype == kUint64)
      for (uint64_t i = 0; i < n.size(); ++i)
        if (y.at<uint64_t>(i) > uint64_t(std::numeric_limits<int64_t>::max())) {
          why = "exponent past 2^63";
          return false;
        }
    n = y.as_int64();
  } else if (y.dtype == kFloat || y.dtype == kDouble) {
    for (uint64_t i = 0; i < n.size(); ++i) {
      const double v = y.dtype == kFloat ? double(y.at<float>(i)) : y.at<double>(i);
      if (!(std::fabs(v) <= 0x1p62) || v != std::trunc(v)) {
        why = "Pow folds integer exponents only";
        return false;
      }
      n[i] = static_cast<int64_t>(v);
    }
  } else {
    why = std::string("no native Pow for ") + ir::dtype_name(y.dtype) + " exponents";
    return false;
  }
  out = Array::of(kInt64, y.dims, n);
  return true;
}

Status pow(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  if (!well_formed(in, 2, why)) return Status::kUnsupported;
  const Array& x = *in[0];
  if (x.dtype != kInt32 && x.dtype != kInt64 && x.dtype != kFloat && x.dtype != kDouble) return wrong_type(why, x);
  Array exponent;
  if (!integer_exponents(*in[1], exponent, why)) return Status::kUnsupported;
  Status s = Status::kUnsupported;
  const bool known = visit<kSigned | kFloats>(x.dtype, [&](auto e) {
    using E = decltype(e);
    using T = typename E::T;
    s = binary<E, Plain<int64_t>, E>(ctx, x, exponent, x.dtype, [](T a, int64_t b, T& r) -> const char* {
      if constexpr (std::is_floating_point_v<T>) {
        return exact_power(double(a), b, r) ? nullptr : "Pow result not exact";
      } else {
        int64_t p = 0;
        if (!exact_power(int64_t(a), b, p) || p < std::numeric_limits<T>::min() ||
            p > std::numeric_limits<T>::max())
          return "Pow result not exact in double, or past the integer type";
        r = static_cast<T>(p);
        return nullptr;
      }
    }, out, why);
  });
  return known ? s : wrong_type(why, x);
}

// ---- variadic: Min Max Sum Mean -------------------------------------------

// f folded over the inputs left to right, broadcasting at each step.
template <unsigned kKinds, class F>
Status variadic(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why, F&& f) {
  if (in.empty()) return refuse(why, "no inputs");
  if (!well_formed(in, in.size(), why)) return Status::kUnsupported;
  for (const Array* a : in)
    if (a->dtype != in[0]->dtype) return refuse(why, "inputs of different types");
  Broadcast all;  // the final shape: broadcasting and size checked before any work
  if (Status s = Broadcast::make(ctx, in, in[0]->dtype, all, why); s != Status::kDone) return s;
  Status s = Status::kDone;
  const bool known = visit<kKinds>(in[0]->dtype, [&](auto e) {
    using E = decltype(e);
    Array acc = *in[0];
    for (size_t k = 1; k < in.size() && s == Status::kDone; ++k) {
      Outputs step;
      s = binary<E, E, E>(ctx, acc, *in[k], acc.dtype, f, step, why);
      if (s == Status::kDone) acc = std::move(step[0]);
    }
    if (s == Status::kDone) out.push_back(std::move(acc));
  });
  return known ? s : wrong_type(why, *in[0]);
}

// Min or Max of two: a NaN operand wins (the first), as in onnxruntime.
template <bool kMax>
struct Extremum {
  template <class T>
  const char* operator()(T a, T b, T& r) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(a) || std::isnan(b)) {
        r = std::isnan(a) ? a : b;
        return nullptr;
      }
      if (a == 0 && b == 0 && std::signbit(a) != std::signbit(b))
        return "Min/Max of +0 and -0 (onnxruntime's answer depends on its vector path)";
    }
    r = kMax ? (b > a ? b : a) : (b < a ? b : a);
    return nullptr;
  }
};

Status min(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  return variadic<kNumbers | kHalfs>(ctx, in, out, why, Extremum<false>{});
}

Status max(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  return variadic<kNumbers | kHalfs>(ctx, in, out, why, Extremum<true>{});
}

const auto kPlus = [](auto a, auto b, auto& r) -> const char* {
  r = a + b;
  return nullptr;
};

Status sum(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  return variadic<kFloats>(ctx, in, out, why, kPlus);
}

Status mean(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  if (Status s = variadic<kFloats>(ctx, in, out, why, kPlus); s != Status::kDone) return s;
  Array& m = out.back();
  visit<kFloats>(m.dtype, [&](auto e) {
    using T = typename decltype(e)::T;
    const T scale = T(1) / static_cast<T>(in.size());
    std::vector<T> v = m.values<T>();
    for (T& x : v) x *= scale;
    m = Array::of(m.dtype, m.dims, v);
  });
  return Status::kDone;
}

// ---- unary ---------------------------------------------------------------

Status neg(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  return same_type_unary<kSigned | kFloats | kHalfs>(ctx, in, out, why, [](auto a, auto& r) -> const char* {
    using T = decltype(a);
    if constexpr (kInteger<T>) r = wrapping_sub(T(0), a);  // INT_MIN stays INT_MIN
    else r = -a;
    return nullptr;
  });
}

Status abs(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  return same_type_unary<kNumbers | kHalfs>(ctx, in, out, why, [](auto a, auto& r) -> const char* {
    using T = decltype(a);
    if constexpr (std::is_floating_point_v<T>) r = std::fabs(a);
    else if constexpr (std::is_signed_v<T>) r = a < 0 ? wrapping_sub(T(0), a) : a;
    else r = a;
    return nullptr;
  });
}

Status sign(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  return same_type_unary<kNumbers | kHalfs>(ctx, in, out, why, [](auto a, auto& r) -> const char* {
    using T = decltype(a);
    r = a > 0 ? T(1) : a < 0 ? T(-1) : a == 0 ? T(0) : a;  // -0 gives +0, NaN stays NaN
    return nullptr;
  });
}

template <class F>
Status floating_unary(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why, F&& f) {
  return same_type_unary<kFloats | kHalfs>(ctx, in, out, why, [&f](auto a, auto& r) -> const char* {
    r = f(a);
    return nullptr;
  });
}

Status sqrt(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  return floating_unary(ctx, in, out, why, [](auto a) { return std::sqrt(a); });
}

Status reciprocal(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  return floating_unary(ctx, in, out, why, [](auto a) { return decltype(a)(1) / a; });
}

Status floor(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  return floating_unary(ctx, in, out, why, [](auto a) { return std::floor(a); });
}

Status ceil(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  return floating_unary(ctx, in, out, why, [](auto a) { return std::ceil(a); });
}

Status is_nan(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  return same_type_unary<kFloats | kHalfs, true>(ctx, in, out, why, [](auto a, bool& r) -> const char* {
    r = std::isnan(a);
    return nullptr;
  });
}

Status is_inf(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  const bool negative = int_attribute(ctx.node, "detect_negative", 1) != 0;
  const bool positive = int_attribute(ctx.node, "detect_positive", 1) != 0;
  return same_type_unary<kFloats | kHalfs, true>(ctx, in, out, why, [=](auto a, bool& r) -> const char* {
    r = std::isinf(a) && (a > 0 ? positive : negative);
    return nullptr;
  });
}

Status logical_not(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  return same_type_unary<kBools>(ctx, in, out, why, [](bool a, bool& r) -> const char* {
    r = !a;
    return nullptr;
  });
}

Status bitwise_not(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  return same_type_unary<kIntegers>(ctx, in, out, why, [](auto a, auto& r) -> const char* {
    r = static_cast<decltype(a)>(~a);
    return nullptr;
  });
}

// ---- comparison, logic, bits ---------------------------------------------

template <class F>
Status compare(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why, F&& f) {
  return same_type_binary<kNumbers | kHalfs, true>(ctx, in, out, why, [&f](auto a, auto b, bool& r) -> const char* {
    r = f(a, b);
    return nullptr;
  });
}

Status equal(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  return same_type_binary<kNumbers | kHalfs | kBools, true>(ctx, in, out, why,
                                                           [](auto a, auto b, bool& r) -> const char* {
    r = a == b;
    return nullptr;
  });
}

Status less(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  return compare(ctx, in, out, why, [](auto a, auto b) { return a < b; });
}

Status greater(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  return compare(ctx, in, out, why, [](auto a, auto b) { return a > b; });
}

Status less_or_equal(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  return compare(ctx, in, out, why, [](auto a, auto b) { return a <= b; });
}

Status greater_or_equal(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  return compare(ctx, in, out, why, [](auto a, auto b) { return a >= b; });
}

template <unsigned kKinds, class F>
Status bits(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why, F&& f) {
  return same_type_binary<kKinds>(ctx, in, out, why, [&f](auto a, auto b, auto& r) -> const char* {
    r = static_cast<decltype(a)>(f(a, b));
    return nullptr;
  });
}

Status logical_and(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  return bits<kBools>(ctx, in, out, why, [](auto a, auto b) { return a && b; });
}

Status logical_or(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  return bits<kBools>(ctx, in, out, why, [](auto a, auto b) { return a || b; });
}

Status logical_xor(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  return bits<kBools>(ctx, in, out, why, [](auto a, auto b) { return a != b; });
}

Status bitwise_and(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  return bits<kIntegers>(ctx, in, out, why, [](auto a, auto b) { return a & b; });
}

Status bitwise_or(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  return bits<kIntegers>(ctx, in, out, why, [](auto a, auto b) { return a | b; });
}

Status bitwise_xor(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  return bits<kIntegers>(ctx, in, out, why, [](auto a, auto b) { return a ^ b; });
}

// Shifts by a negative amount or by the width or more give the sign fill
// alone (-1 for a negative value shifted right, else 0): the opset 28 rule,
// and what onnxruntime does for the unsigned types before it.
Status bit_shift(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  const ir::Attribute* d = attribute(ctx.node, "direction");
  if (!d || !d->s.has || (d->s.value != "LEFT" && d->s.value != "RIGHT"))
    return refuse(why, "direction is neither LEFT nor RIGHT");
  if (ctx.opset < 28 && !in.empty() && in[0] && is_kind<kSigned>(in[0]->dtype))
    return refuse(why, "BitShift on signed integers needs opset 28");
  const bool left = d->s.value == "LEFT";
  return same_type_binary<kIntegers>(ctx, in, out, why, [left](auto a, auto b, auto& r) -> const char* {
    using T = decltype(a);
    using U = std::make_unsigned_t<T>;
    constexpr uint64_t kBits = sizeof(T) * 8;
    const bool negative = std::is_signed_v<T> && a < T(0);
    if (static_cast<uint64_t>(b) >= kBits)  // a negative b too
      r = (!left && negative) ? T(~T(0)) : T(0);
    else if (left)
      r = static_cast<T>(static_cast<U>(static_cast<Wide<T>>(static_cast<U>(a)) << b));
    else if (negative)
      r = static_cast<T>(~(~a >> b));  // arithmetic shift, on the non-negative ~a
    else
      r = static_cast<T>(a >> b);
    return nullptr;
  });
}

// ---- selection -----------------------------------------------------------

// Element bytes are copied, so Where takes every fixed-size type.
Status where(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  if (!well_formed(in, 3, why)) return Status::kUnsupported;
  if (in[0]->dtype != kBool) return refuse(why, "condition is not bool");
  if (in[1]->dtype != in[2]->dtype) return refuse(why, "inputs of different types");
  const int32_t dtype = in[1]->dtype;
  const size_t size = element_size(dtype);
  Broadcast bc;
  if (Status s = Broadcast::make(ctx, in, dtype, bc, why); s != Status::kDone) return s;
  std::string bytes(bc.count() * size, '\0');
  const uint8_t *c = in[0]->bytes.data(), *x = in[1]->bytes.data(), *y = in[2]->bytes.data();
  bc.for_each([&](uint64_t i, const uint64_t* at) {
    const uint8_t* from = c[at[0]] ? x + at[1] * size : y + at[2] * size;
    std::memcpy(bytes.data() + i * size, from, size);
    return true;
  });
  out.push_back(Array::of_bytes(dtype, bc.dims(), std::move(bytes)));
  return Status::kDone;
}

}  // namespace

void add_math_kernels(KernelTable& t) {
  t["Add"] = add;
  t["Sub"] = sub;
  t["Mul"] = mul;
  t["Div"] = div;
  t["Mod"] = mod;
  t["Pow"] = pow;
  t["Min"] = min;
  t["Max"] = max;
  t["Sum"] = sum;
  t["Mean"] = mean;
  t["Neg"] = neg;
  t["Abs"] = abs;
  t["Sign"] = sign;
  t["Sqrt"] = sqrt;
  t["Reciprocal"] = reciprocal;
  t["Floor"] = floor;
  t["Ceil"] = ceil;
  t["IsNaN"] = is_nan;
  t["IsInf"] = is_inf;
  t["Not"] = logical_not;
  t["BitwiseNot"] = bitwise_not;
  t["Equal"] = equal;
  t["Less"] = less;
  t["Greater"] = greater;
  t["LessOrEqual"] = less_or_equal;
  t["GreaterOrEqual"] = greater_or_equal;
  t["And"] = logical_and;
  t["Or"] = logical_or;
  t["Xor"] = logical_xor;
  t["BitwiseAnd"] = bitwise_and;
  t["BitwiseOr"] = bitwise_or;
  t["BitwiseXor"] = bitwise_xor;
  t["BitShift"] = bit_shift;
  t["Where"] = where;
  add_reduce_kernels(t);
}

}  // namespace pyonnxopt::fold
