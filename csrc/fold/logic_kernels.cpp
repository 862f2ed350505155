// Kernels for comparisons, logic, bitwise ops and Where.
//
//   Equal Less Greater LessOrEqual GreaterOrEqual  -> bool (numbers, float16; Equal also bool)
//   And Or Xor Not                                  (bool)
//   BitwiseAnd BitwiseOr BitwiseXor BitwiseNot      (integers)
//   BitShift                                        (unsigned; signed from opset 28)
//   Where                                           (any fixed-size type: bytes are copied)
//
// Comparisons follow IEEE (NaN compares unequal, -0 == +0), as onnxruntime
// does. Refuses (kUnsupported): other element types, inputs of different
// types, shapes that do not broadcast, an omitted input, a BitShift without
// direction LEFT or RIGHT, BitShift on signed integers before opset 28.
#include "fold/elementwise.h"

namespace pyonnxopt::fold {

namespace {

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
  const ir::Attribute* d = ctx.node.attribute("direction");
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

void add_logic_kernels(KernelTable& t) {
  t["Equal"] = equal;
  t["Less"] = less;
  t["Greater"] = greater;
  t["LessOrEqual"] = less_or_equal;
  t["GreaterOrEqual"] = greater_or_equal;
  t["And"] = logical_and;
  t["Or"] = logical_or;
  t["Xor"] = logical_xor;
  t["Not"] = logical_not;
  t["BitwiseAnd"] = bitwise_and;
  t["BitwiseOr"] = bitwise_or;
  t["BitwiseXor"] = bitwise_xor;
  t["BitwiseNot"] = bitwise_not;
  t["BitShift"] = bit_shift;
  t["Where"] = where;
}

}  // namespace pyonnxopt::fold
