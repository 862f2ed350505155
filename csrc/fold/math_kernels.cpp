// Kernels for small elementwise arithmetic. Comparisons, logic, bits and
// Where are in logic_kernels.cpp, the reductions in reduce_kernels.cpp.
//
//   Add Sub Mul Div Mod    integers, float, double, float16 (broadcasting)
//   Pow                    int32, int64, float, double bases; integer(-valued) exponents
//   Min Max                integers, float, double, float16 (variadic, broadcasting)
//   Sum Mean               float, double (variadic, broadcasting)
//   Neg                    signed integers, float, double, float16
//   Abs Sign               integers, float, double, float16
//   Sqrt Reciprocal Floor Ceil IsNaN IsInf    float, double, float16
//
// Each result is what onnxruntime's CPU kernel computes for the same inputs,
// bit for bit (a NaN's payload aside): floating ops are one IEEE operation
// in the input's own type (float16 through float, which rounds the same);
// integer + - * wrap in two's complement; integer division truncates toward
// zero; Mod with fmod=0 takes the divisor's sign; Min/Max return a NaN
// operand, the first one; Sum adds left to right; Mean multiplies the sum by
// 1/n (not divides: onnxruntime's order). Refuses (kUnsupported), leaving
// the node to the fallback:
//   1. an element type not listed above;
//   2. malformed input: wrong input count, an omitted input, inputs of
//      different types, shapes that do not broadcast;
//   3. integer division or Mod by zero, and INT_MIN / -1, INT_MIN % -1;
//   4. Min/Max of +0 and -0 (onnxruntime answers either, by vector path);
//   5. Mod with fmod=0 on floats before opset 28 (undefined there);
//   6. Pow with a non-integer exponent, or a result that is not exact (an
//      integer past 2^53, a float that needs rounding or is not normal):
//      onnxruntime's several pow paths agree only on exact results.
// A result past the size limit is kTooBig before anything is computed.
#include <algorithm>
#include <cmath>

#include "fold/elementwise.h"

namespace pyonnxopt::fold {

// The family's other files.
void add_logic_kernels(KernelTable& table);   // logic_kernels.cpp: comparisons, logic, bits, Where
void add_reduce_kernels(KernelTable& table);  // reduce_kernels.cpp

namespace {

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

// -0 gives +0; NaN stays NaN, but gives +0 for float16 (onnxruntime's).
Status sign(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  const bool half = !in.empty() && in[0] && in[0]->dtype == kFloat16;
  return same_type_unary<kNumbers | kHalfs>(ctx, in, out, why, [half](auto a, auto& r) -> const char* {
    using T = decltype(a);
    r = a > 0 ? T(1) : a < 0 ? T(-1) : (a == 0 || half) ? T(0) : a;
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
  add_logic_kernels(t);
  add_reduce_kernels(t);
}

}  // namespace pyonnxopt::fold
