// ReduceSum, ReduceProd, ReduceMin, ReduceMax on constant tensors.
//
//   y = ReduceSum(x [2, 3, 4], axes=[1, -1], keepdims=1)  ->  y [2, 1, 1]
//
// Axes come from the attribute before opset 13 (ReduceSum) or 18 (the
// others), from the optional second input after; negative axes count from
// the end, a repeated axis counts once (as in onnxruntime). No axes means
// every axis, or, with noop_with_empty_axes=1, the input unchanged. An empty
// reduction gives the identity: 0, 1, the type's largest / lowest value
// (+-inf for floats).
//
// onnxruntime sums in an order that depends on its vector paths (and sums
// integers through double, saturating), so a floating or integer sum or
// product is folded only where every order gives the same bits: the exact
// result, each partial result representable (see exact_sum/exact_product).
// Refuses (kUnsupported):
//   1. an element type other than integers, float, double, float16 (and
//      bool for Min/Max);
//   2. an axis out of range, axes of a non-integer type, axes given both
//      ways or the wrong way for the opset;
//   3. a sum or product that is not exact, or has a NaN or an infinity;
//   4. Min/Max over a NaN, or whose result is a zero while both +0 and -0
//      are in the group (onnxruntime returns the first it meets);
//   5. Min/Max of an empty bool group (onnxruntime rejects it).
#include <algorithm>
#include <cmath>

#include "fold/elementwise.h"

namespace pyonnxopt::fold {

namespace {

enum class Reduction { kSum, kProd, kMin, kMax };

// Precision (significand bits) and exponent range of what an element type
// stores: float16 is computed in float but must stay exact in half.
template <class E>
struct Format {
  using T = typename E::T;
  static constexpr int kBits = std::numeric_limits<T>::digits;
  static constexpr int kMaxExp = std::numeric_limits<T>::max_exponent;  // values < 2^kMaxExp
  static constexpr int kMinExp = std::numeric_limits<T>::min_exponent - 1;  // normals >= 2^kMinExp
};
template <>
struct Format<Half> {
  static constexpr int kBits = 11, kMaxExp = 16, kMinExp = -14;
};

// True when adding `v` in any order and grouping gives the exact sum: all
// values are multiples of 2^e and their magnitudes add up to at most
// 2^kBits * 2^e, so every partial sum is such a multiple, representable.
template <class F, class T>
bool exact_sum(const std::vector<T>& v) {
  int e = std::numeric_limits<int>::max();
  for (T x : v) {
    if (!std::isfinite(x)) return false;
    if (x == 0) continue;
    int ex = 0;
    const T f = std::frexp(std::fabs(x), &ex);
    uint64_t m = static_cast<uint64_t>(std::ldexp(f, F::kBits));  // exact: x has at most kBits bits
    const int low = ex - F::kBits + __builtin_ctzll(m);
    e = std::min(e, low);
  }
  if (e == std::numeric_limits<int>::max()) return true;  // all zeros
  if (e + F::kBits >= F::kMaxExp) return false;
  const uint64_t limit = uint64_t(1) << F::kBits;
  uint64_t total = 0;
  for (T x : v) {
    if (x == 0) continue;
    const T units = std::ldexp(std::fabs(x), -e);  // an integer, exact
    if (units > static_cast<T>(limit)) return false;
    total += static_cast<uint64_t>(units);
    if (total > limit) return false;
  }
  return true;
}

// True when multiplying `v` in any order and grouping gives the exact
// product: the odd parts of the significands fit in kBits bits together and
// no partial product leaves the normal range. With a zero in the group the
// result is a signed zero whatever the order, provided nothing overflows.
template <class F, class T>
bool exact_product(const std::vector<T>& v) {
  bool zero = false;
  int bits = 0, high = 0, low = 0;
  for (T x : v) {
    if (!std::isfinite(x)) return false;
    if (x == 0) {
      zero = true;
      continue;
    }
    int ex = 0;
    const T f = std::frexp(std::fabs(x), &ex);  // 2^(ex-1) <= |x| < 2^ex
    uint64_t m = static_cast<uint64_t>(std::ldexp(f, F::kBits));
    m >>= __builtin_ctzll(m);
    bits += 64 - __builtin_clzll(m);
    high += std::max(ex, 0);
    low += std::min(ex - 1, 0);
  }
  if (high >= F::kMaxExp) return false;
  return zero || (bits <= F::kBits && low >= F::kMinExp);
}

// The group's result, or why not.
template <class E>
const char* reduce_floats(Reduction r, const std::vector<typename E::T>& v, typename E::T& out) {
  using T = typename E::T;
  using F = Format<E>;
  switch (r) {
    case Reduction::kSum: {
      if (!exact_sum<F>(v)) return "a floating sum that is not exact (onnxruntime's order decides its rounding)";
      T s = 0;
      bool negative_zero = false;
      for (T x : v) {
        s += x;
        negative_zero |= x == 0 && std::signbit(x);
      }
      if (s == 0 && negative_zero) return "a zero sum with -0 in it (its sign depends on the order)";
      out = s;
      return nullptr;
    }
    case Reduction::kProd: {
      if (!exact_product<F>(v)) return "a floating product that is not exact (onnxruntime's order decides its rounding)";
      T p = 1;
      for (T x : v) p *= x;
      out = p;
      return nullptr;
    }
    case Reduction::kMin:
    case Reduction::kMax: {
      const bool is_max = r == Reduction::kMax;
      T best = is_max ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
      bool plus_zero = false, minus_zero = false;
      for (T x : v) {
        if (std::isnan(x)) return "Min/Max over a NaN (onnxruntime's answer depends on its position)";
        if (x == 0) (std::signbit(x) ? minus_zero : plus_zero) = true;
        if (is_max ? x > best : x < best) best = x;
      }
      if (best == 0 && plus_zero && minus_zero) return "Min/Max over both +0 and -0";
      out = best;
      return nullptr;
    }
  }
  return "unknown reduction";
}

// Magnitudes past this are not exact in the double onnxruntime sums in.
constexpr uint64_t kExactInDouble = uint64_t(1) << 53;

template <class E>
const char* reduce_integers(Reduction r, const std::vector<typename E::T>& v, typename E::T& out) {
  using T = typename E::T;
  const uint64_t limit = std::min<uint64_t>(kExactInDouble, static_cast<uint64_t>(std::numeric_limits<T>::max()));
  auto magnitude = [](T x) -> uint64_t {
    if constexpr (std::is_signed_v<T>) return x < 0 ? uint64_t(0) - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
    else return static_cast<uint64_t>(x);
  };
  switch (r) {
    case Reduction::kSum: {
      uint64_t total = 0;
      int64_t s = 0;
      for (T x : v) {
        total += magnitude(x);
        if (total > limit) return "an integer sum past 2^53 or its type";
        s += static_cast<int64_t>(x);  // bounded by limit: no overflow
      }
      out = static_cast<T>(s);
      return nullptr;
    }
    case Reduction::kProd: {
      // With a zero the product is 0 in any order, unless the others
      // overflow the double to inf (and inf * 0 is NaN).
      bool zero = false, exact = true;
      uint64_t total = 1;
      int64_t p = 1;
      double rough = 1;
      for (T x : v) {
        if (x == 0) {
          zero = true;
          continue;
        }
        const uint64_t m = magnitude(x);
        rough *= static_cast<double>(m);
        if (exact && m <= limit / total) {
          total *= m;
          p *= static_cast<int64_t>(x);
        } else {
          exact = false;
        }
      }
      if (zero && rough < 0x1p1000) {
        out = T(0);
        return nullptr;
      }
      if (zero || !exact) return "an integer product past 2^53 or its type";
      out = static_cast<T>(p);
      return nullptr;
    }
    case Reduction::kMin:
    case Reduction::kMax: {
      const bool is_max = r == Reduction::kMax;
      T best = is_max ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
      for (T x : v)
        if (is_max ? x > best : x < best) best = x;
      out = best;
      return nullptr;
    }
  }
  return "unknown reduction";
}

const char* reduce_bools(Reduction r, const std::vector<bool>& v, bool& out) {
  if (r != Reduction::kMin && r != Reduction::kMax) return "Sum/Prod of bool";
  if (v.empty()) return "Min/Max of an empty bool group (onnxruntime rejects it)";
  const bool is_max = r == Reduction::kMax;
  out = !is_max;
  for (bool x : v)
    if (x == is_max) out = is_max;
  return nullptr;
}

// The axes to reduce, one flag per input axis; `all` when none are named.
Status read_axes(const KernelContext& ctx, const Inputs& in, size_t rank, int64_t since, std::vector<bool>& reduced,
                 bool& none, std::string& why) {
  std::vector<int64_t> axes;
  const ir::Attribute* attr = ctx.node.attribute("axes");
  const Array* given = in.size() > 1 ? in[1] : nullptr;
  if (ctx.opset >= since) {
    if (attr) return refuse(why, "an axes attribute at an opset that takes axes as an input");
    if (given) {
      if (!is_kind<kIntegers>(given->dtype)) return refuse(why, "axes of a non-integer type");
      uint64_t n = 0;
      if (!checked_numel(given->dims, n) || given->nbytes() != n * element_size(given->dtype))
        return refuse(why, "axes data does not match its shape");
      axes = given->as_int64();
    }
  } else {
    if (given) return refuse(why, "an axes input at an opset that takes axes as an attribute");
    if (attr && attr->type.has && attr->type.value != int32_t(ir::AttrType::kInts))
      return refuse(why, "axes attribute is not a list of ints");
    if (attr) axes = attr->ints;
  }
  none = axes.empty();
  reduced.assign(rank, none);
  for (int64_t a : axes) {
    const int64_t r = static_cast<int64_t>(rank);
    if (a < -r || a >= r) return refuse(why, "axis " + std::to_string(a) + " out of range for rank " + std::to_string(r));
    reduced[static_cast<size_t>(a < 0 ? a + r : a)] = true;
  }
  return Status::kDone;
}

template <Reduction kReduction>
Status reduce(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  if (in.empty() || in.size() > 2) return refuse(why, "expected 1 or 2 inputs");
  if (!well_formed({in[0]}, 1, why)) return Status::kUnsupported;
  const Array& x = *in[0];
  const int64_t since = kReduction == Reduction::kSum ? 13 : 18;
  std::vector<bool> reduced;
  bool none = false;
  if (Status s = read_axes(ctx, in, x.dims.size(), since, reduced, none, why); s != Status::kDone) return s;
  if (none && ctx.opset >= since && int_attribute(ctx.node, "noop_with_empty_axes", 0)) {
    out.push_back(x);
    return Status::kDone;
  }
  const bool keepdims = int_attribute(ctx.node, "keepdims", 1) != 0;

  // Output dims; the input strides split into kept and reduced axes.
  std::vector<int64_t> dims, kept_dims, group_dims;
  std::vector<uint64_t> kept_strides, group_strides;
  uint64_t stride = 1;
  std::vector<uint64_t> strides(x.dims.size());
  for (size_t i = x.dims.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= static_cast<uint64_t>(x.dims[i]);
  }
  for (size_t i = 0; i < x.dims.size(); ++i) {
    if (reduced[i]) {
      group_dims.push_back(x.dims[i]);
      group_strides.push_back(strides[i]);
      if (keepdims) dims.push_back(1);
    } else {
      kept_dims.push_back(x.dims[i]);
      kept_strides.push_back(strides[i]);
      dims.push_back(x.dims[i]);
    }
  }
  uint64_t count = 0, group = 0;
  checked_numel(kept_dims, count);  // both within the input's checked count, or one of them is empty
  checked_numel(group_dims, group);
  if (too_big(ctx, x.dtype, count, why)) return Status::kTooBig;
  if (count == 0) group = 0;  // nothing to compute; never size a group of an empty input

  // Element offsets of one group, relative to its first element.
  std::vector<uint64_t> offsets(group, 0);
  {
    std::vector<int64_t> counter(group_dims.size(), 0);
    uint64_t offset = 0;
    for (uint64_t g = 0; g < group; ++g) {
      offsets[g] = offset;
      for (size_t a = group_dims.size(); a-- > 0;) {
        offset += group_strides[a];
        if (++counter[a] < group_dims[a]) break;
        offset -= group_strides[a] * static_cast<uint64_t>(group_dims[a]);
        counter[a] = 0;
      }
    }
  }

  Status s = Status::kDone;
  const bool known = visit<kNumbers | kHalfs | kBools>(x.dtype, [&](auto e) {
    using E = decltype(e);
    using T = typename E::T;
    std::string bytes(count * E::kSize, '\0');
    uint8_t* po = reinterpret_cast<uint8_t*>(bytes.data());
    const uint8_t* px = x.bytes.data();
    std::vector<T> values(group);
    std::vector<int64_t> counter(kept_dims.size(), 0);
    uint64_t base = 0;
    for (uint64_t i = 0; i < count; ++i) {
      for (uint64_t g = 0; g < group; ++g) values[g] = E::load(px + (base + offsets[g]) * E::kSize);
      T result{};
      const char* refused;
      if constexpr (std::is_same_v<E, Bool>)
        refused = reduce_bools(kReduction, values, result);
      else if constexpr (std::is_floating_point_v<T>)
        refused = reduce_floats<E>(kReduction, values, result);
      else
        refused = reduce_integers<E>(kReduction, values, result);
      if (refused) {
        s = refuse(why, refused);
        return;
      }
      E::store(po + i * E::kSize, result);
      for (size_t a = kept_dims.size(); a-- > 0;) {
        base += kept_strides[a];
        if (++counter[a] < kept_dims[a]) break;
        base -= kept_strides[a] * static_cast<uint64_t>(kept_dims[a]);
        counter[a] = 0;
      }
    }
    out.push_back(Array::of_bytes(x.dtype, dims, std::move(bytes)));
  });
  if (!known) return wrong_type(why, x);
  return s;
}

}  // namespace

void add_reduce_kernels(KernelTable& t) {
  t["ReduceSum"] = reduce<Reduction::kSum>;
  t["ReduceProd"] = reduce<Reduction::kProd>;
  t["ReduceMin"] = reduce<Reduction::kMin>;
  t["ReduceMax"] = reduce<Reduction::kMax>;
}

}  // namespace pyonnxopt::fold
