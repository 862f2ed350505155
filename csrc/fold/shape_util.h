// Helpers shared by the shape-family kernels (shape_kernels.cpp,
// index_kernels.cpp, cast_kernels.cpp) and the partial shapes of the fold
// driver (partial.cpp). Every check here answers "is this input well formed?"
// so that a malformed model gives kUnsupported, never undefined behaviour.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fold/kernels.h"

namespace pyonnxopt::fold {

// The other two files of the family; add_shape_kernels calls them.
void add_index_kernels(KernelTable& t);  // Gather, Slice, Concat, Split, Expand, Tile, Transpose
void add_cast_kernels(KernelTable& t);   // Cast, CastLike

// An attribute an op has at the node's opset: its name and type.
struct AttrSpec {
  std::string_view name;
  ir::AttrType type;
};
// True when each of the node's attributes is one of `allowed`, of its type
// and with a value. Anything else is a model that is not valid at its opset
// (Shape's start before opset 15, Reshape's shape after 5), which is left to
// the runtime to reject.
bool attributes_are(const ir::Node& n, const std::vector<AttrSpec>& allowed);

// Cast's attributes at `opset` (CastLike's: without `to`).
std::vector<AttrSpec> cast_attributes(int64_t opset, bool with_to);

inline Status unsupported(std::string& why, std::string what) {
  why = std::move(what);
  return Status::kUnsupported;
}

// Negative axes count from the back from opset 11; before, the specs of
// Concat, Flatten, Slice, Split, Squeeze and Unsqueeze ask for non-negative ones.
inline bool negative_axes_ok(const KernelContext& ctx) { return ctx.opset >= 11; }
inline bool any_negative(const std::vector<int64_t>& v) {
  for (int64_t x : v)
    if (x < 0) return true;
  return false;
}

// `axis` in [-rank, rank) as an index in [0, rank); false outside.
bool normalize_axis(int64_t axis, int64_t rank, int64_t& out);
// Product of `dims`; false on a negative dim or a running product past
// uint64 (dims the model loader would refuse, even with a 0 further on).
bool count_of(const std::vector<int64_t>& dims, uint64_t& count);
// too_big(), also when the element count overflows (dims not negative).
bool too_big_or_overflow(const KernelContext& ctx, int32_t dtype, const std::vector<int64_t>& dims,
                         uint64_t& count, std::string& why);
// An int32 or int64 tensor of rank 1 (or rank 0 too, with `scalar_ok`) as
// int64 values; false for anything else, nullptr included.
bool int_list(const Array* a, std::vector<int64_t>& out, bool scalar_ok = false);
// The one element of a rank-0 or one-element rank-1 tensor (Range's scalars).
bool is_scalar_like(const Array* a);
// Normalized, distinct axes for a tensor of rank `rank`; false on a repeat
// or an axis out of range.
bool normalize_axes(const std::vector<int64_t>& axes, int64_t rank, std::vector<int64_t>& out);
// Row-major strides, in elements.
std::vector<uint64_t> strides_of(const std::vector<int64_t>& dims);

// The part [begin, end) of a rank-`rank` shape that Shape returns (the
// start/end attributes of opset 15, clamped as the spec says).
void shape_range(const KernelContext& ctx, int64_t rank, int64_t& begin, int64_t& end);

// Copies elements of `in` into a new array of dims `dims`, walking the
// output index space `walk` (the same element count as `dims`; Gather walks
// its indices as one axis): output element (i_0, ..., i_k-1) is input
// element offset(0, i_0) + ... + offset(k-1, i_k-1). `count` is the element
// count, already checked against the limit; offset() is asked nothing when
// it is 0, so a zero-sized result with huge other dims costs nothing.
template <class Offset>
Array gather_elements(const Array& in, const std::vector<int64_t>& walk, std::vector<int64_t> dims, uint64_t count,
                      Offset offset) {
  const size_t size = element_size(in.dtype);
  std::string out(count * size, '\0');
  if (count) {
    std::vector<std::vector<uint64_t>> table(walk.size());  // each axis no longer than count
    for (size_t j = 0; j < walk.size(); ++j)
      for (int64_t i = 0; i < walk[j]; ++i) table[j].push_back(offset(j, i));
    const uint8_t* src = in.bytes.data();
    char* dst = out.data();
    std::vector<size_t> idx(walk.size(), 0);
    for (uint64_t e = 0; e < count; ++e, dst += size) {
      uint64_t off = 0;
      for (size_t j = 0; j < table.size(); ++j) off += table[j][idx[j]];
      std::memcpy(dst, src + off * size, size);
      for (size_t j = table.size(); j-- > 0;) {  // odometer, last axis fastest
        if (++idx[j] < table[j].size()) break;
        idx[j] = 0;
      }
    }
  }
  return Array::of_bytes(in.dtype, std::move(dims), std::move(out));
}

}  // namespace pyonnxopt::fold
