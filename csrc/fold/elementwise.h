// The elementwise kernels' frame: read inputs through element traits
// (broadcast.h), apply a per-element function, write the result; refuse the
// node when the function says why not.
#pragma once

#include <string>
#include <type_traits>
#include <vector>

#include "fold/broadcast.h"

namespace pyonnxopt::fold {

using Inputs = std::vector<const Array*>;
using Outputs = std::vector<Array>;

inline Status refuse(std::string& why, std::string reason) {
  why = std::move(reason);
  return Status::kUnsupported;
}

inline Status wrong_type(std::string& why, const Array& a) {
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

}  // namespace pyonnxopt::fold
