// Kernels for the shape arithmetic exporters emit: Shape, Size, Reshape,
// Flatten, Squeeze, Unsqueeze, ConstantOfShape, Range, Identity. The ones
// that move data (index_kernels.cpp) and Cast (cast_kernels.cpp) are the
// other two files of the family.
//
// Ops that only relabel dims (Reshape, Flatten, Squeeze, Unsqueeze,
// Identity) share the input's bytes; they work on any element type.
#include <cmath>
#include <limits>

#include "fold/shape_util.h"

namespace pyonnxopt::fold {

namespace {

using Inputs = std::vector<const Array*>;
using Outputs = std::vector<Array>;
constexpr ir::AttrType Int = ir::AttrType::kInt, Ints = ir::AttrType::kInts, Tensor = ir::AttrType::kTensor;

Array with_dims(const Array& a, std::vector<int64_t> dims) {
  Array out = a;
  out.dims = std::move(dims);
  return out;
}

Status identity(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  if (in.size() != 1 || !in[0] || !attributes_are(ctx.node, {})) return unsupported(why, "Identity takes one input");
  out.push_back(*in[0]);
  return Status::kDone;
}

Status shape(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  if (in.size() != 1 || !in[0]) return unsupported(why, "Shape takes one input");
  if (!attributes_are(ctx.node, ctx.opset >= 15 ? std::vector<AttrSpec>{{"start", Int}, {"end", Int}} : std::vector<AttrSpec>{}))
    return unsupported(why, "attributes Shape does not have at this opset");
  const std::vector<int64_t>& dims = in[0]->dims;
  int64_t begin, end;
  shape_range(ctx, static_cast<int64_t>(dims.size()), begin, end);
  std::vector<int64_t> v(dims.begin() + begin, dims.begin() + end);
  out.push_back(Array::of(kInt64, {static_cast<int64_t>(v.size())}, v));
  return Status::kDone;
}

Status size(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  if (in.size() != 1 || !in[0] || !attributes_are(ctx.node, {})) return unsupported(why, "Size takes one input");
  out.push_back(Array::of<int64_t>(kInt64, {}, {static_cast<int64_t>(in[0]->numel())}));
  return Status::kDone;
}

// Reshape: shape input from opset 5, the `shape` attribute before.
Status reshape(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  if (in.empty() || !in[0]) return unsupported(why, "no data");
  const std::vector<AttrSpec> specs = ctx.opset < 5    ? std::vector<AttrSpec>{{"shape", Ints}, {"consumed_inputs", Ints}}
                                      : ctx.opset >= 14 ? std::vector<AttrSpec>{{"allowzero", Int}}
                                                        : std::vector<AttrSpec>{};
  if (!attributes_are(ctx.node, specs)) return unsupported(why, "attributes Reshape does not have at this opset");
  std::vector<int64_t> target;
  if (ctx.opset >= 5) {
    if (in.size() != 2 || !in[1] || in[1]->dtype != kInt64 || !int_list(in[1], target))
      return unsupported(why, "shape is not a 1-D int64 tensor");
  } else {
    const ir::Attribute* a = ctx.node.attribute("shape");
    if (in.size() != 1 || !a) return unsupported(why, "Reshape-1 without a shape attribute");
    target = a->ints;
  }
  const bool allow_zero = ctx.opset >= 14 && int_attribute(ctx.node, "allowzero", 0) != 0;
  const Array& x = *in[0];
  int64_t inferred = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == 0 && !allow_zero) {
      if (i >= x.dims.size()) return unsupported(why, "0 in shape past the input's rank");
      target[i] = x.dims[i];
    } else if (target[i] == -1) {
      if (inferred >= 0) return unsupported(why, "more than one -1 in shape");
      inferred = static_cast<int64_t>(i);
    } else if (target[i] < -1) {
      return unsupported(why, "negative dim in shape");
    }
  }
  std::vector<int64_t> known = target;
  if (inferred >= 0) known[static_cast<size_t>(inferred)] = 1;
  uint64_t product;
  if (!count_of(known, product)) return unsupported(why, "shape's element count overflows");
  const uint64_t n = x.numel();
  if (inferred >= 0) {
    if (product == 0 || n % product) return unsupported(why, "-1 in shape cannot be inferred");
    target[static_cast<size_t>(inferred)] = static_cast<int64_t>(n / product);
  } else if (product != n) {
    return unsupported(why, "shape does not hold the input's element count");
  }
  out.push_back(with_dims(x, std::move(target)));
  return Status::kDone;
}

Status flatten(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  if (in.size() != 1 || !in[0] || !attributes_are(ctx.node, {{"axis", Int}}))
    return unsupported(why, "Flatten takes one input and an axis");
  const Array& x = *in[0];
  const int64_t rank = static_cast<int64_t>(x.dims.size());
  int64_t axis = int_attribute(ctx.node, "axis", 1);
  if (axis < 0 && !negative_axes_ok(ctx)) return unsupported(why, "negative axis before opset 11");
  if (axis < 0) axis += rank;
  if (axis < 0 || axis > rank) return unsupported(why, "axis out of range");
  uint64_t outer, inner;
  const uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (!count_of({x.dims.begin(), x.dims.begin() + axis}, outer) || !count_of({x.dims.begin() + axis, x.dims.end()}, inner) ||
      outer > kMax || inner > kMax)
    return unsupported(why, "a side of the result does not fit in int64");  // only with a 0 dim on the other side
  out.push_back(with_dims(x, {static_cast<int64_t>(outer), static_cast<int64_t>(inner)}));
  return Status::kDone;
}

// Squeeze/Unsqueeze axes: the attribute before opset 13, the second input
// from 13. `given` is false when there are none.
bool axes_of(const KernelContext& ctx, const Inputs& in, std::vector<int64_t>& axes, bool& given) {
  const ir::Attribute* a = ctx.node.attribute("axes");
  if (ctx.opset < 13) {
    if (in.size() > 1 || !attributes_are(ctx.node, {{"axes", Ints}})) return false;
    given = a != nullptr;
    if (a) axes = a->ints;
    return negative_axes_ok(ctx) || !any_negative(axes);
  }
  if (a || in.size() > 2 || !attributes_are(ctx.node, {})) return false;
  given = in.size() == 2 && in[1];
  return !given || (in[1]->dtype == kInt64 && int_list(in[1], axes));
}

Status squeeze(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  std::vector<int64_t> axes;
  bool given;
  if (in.empty() || !in[0] || !axes_of(ctx, in, axes, given)) return unsupported(why, "malformed Squeeze");
  const Array& x = *in[0];
  const int64_t rank = static_cast<int64_t>(x.dims.size());
  std::vector<bool> drop(x.dims.size(), false);
  if (given) {
    // An empty list: the attribute's reference squeezes every 1, opset 13's
    // squeezes nothing; runtimes differ, so leave it.
    if (axes.empty()) return unsupported(why, "empty axes");
    std::vector<int64_t> norm;
    if (!normalize_axes(axes, rank, norm)) return unsupported(why, "axes out of range or repeated");
    for (int64_t a : norm) {
      if (x.dims[static_cast<size_t>(a)] != 1) return unsupported(why, "squeezed axis is not of size 1");
      drop[static_cast<size_t>(a)] = true;
    }
  } else {
    for (size_t i = 0; i < x.dims.size(); ++i) drop[i] = x.dims[i] == 1;
  }
  std::vector<int64_t> dims;
  for (size_t i = 0; i < x.dims.size(); ++i)
    if (!drop[i]) dims.push_back(x.dims[i]);
  out.push_back(with_dims(x, std::move(dims)));
  return Status::kDone;
}

Status unsqueeze(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  std::vector<int64_t> axes, norm;
  bool given;
  if (in.empty() || !in[0] || !axes_of(ctx, in, axes, given) || !given)
    return unsupported(why, "malformed Unsqueeze");
  const Array& x = *in[0];
  const int64_t rank = static_cast<int64_t>(x.dims.size() + axes.size());
  if (!normalize_axes(axes, rank, norm)) return unsupported(why, "axes out of range or repeated");
  std::vector<bool> added(static_cast<size_t>(rank), false);
  for (int64_t a : norm) added[static_cast<size_t>(a)] = true;
  std::vector<int64_t> dims;
  size_t next = 0;
  for (int64_t i = 0; i < rank; ++i) dims.push_back(added[static_cast<size_t>(i)] ? 1 : x.dims[next++]);
  out.push_back(with_dims(x, std::move(dims)));
  return Status::kDone;
}

Status constant_of_shape(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  std::vector<int64_t> dims;
  if (ctx.opset < 9 || !attributes_are(ctx.node, {{"value", Tensor}}))
    return unsupported(why, "no ConstantOfShape at this opset, or other attributes");
  if (in.size() != 1 || !in[0] || in[0]->dtype != kInt64 || !int_list(in[0], dims))
    return unsupported(why, "shape is not a 1-D int64 tensor");
  for (int64_t d : dims)
    if (d < 0) return unsupported(why, "negative dim in shape");
  Array value = Array::of<float>(kFloat, {}, {0.0f});
  if (const ir::Attribute* a = ctx.node.attribute("value")) {
    std::string bad;
    if (!a->t || !to_array(*a->t, value, bad) || value.numel() != 1)
      return unsupported(why, "value is not a one-element tensor of a fixed-size type");
  }
  uint64_t count;
  if (too_big_or_overflow(ctx, value.dtype, dims, count, why)) return Status::kTooBig;
  const size_t n = element_size(value.dtype);
  std::string bytes(count * n, '\0');
  for (uint64_t i = 0; i < count; ++i) std::memcpy(bytes.data() + i * n, value.bytes.data(), n);
  out.push_back(Array::of_bytes(value.dtype, std::move(dims), std::move(bytes)));
  return Status::kDone;
}

// Range on integers: the element count exactly, in unsigned arithmetic so
// that limit - start cannot overflow; values start + i * delta (mod 2^64,
// exact since each lies between start and limit).
template <class T>
Status range_int(const KernelContext& ctx, int32_t dtype, int64_t start, int64_t limit, int64_t delta, Outputs& out,
                 std::string& why) {
  if (delta == 0) return unsupported(why, "delta is 0");
  const uint64_t step = delta > 0 ? static_cast<uint64_t>(delta) : 0 - static_cast<uint64_t>(delta);
  uint64_t count = 0;
  if (delta > 0 && limit > start) count = (static_cast<uint64_t>(limit) - static_cast<uint64_t>(start) - 1) / step + 1;
  if (delta < 0 && start > limit) count = (static_cast<uint64_t>(start) - static_cast<uint64_t>(limit) - 1) / step + 1;
  // onnxruntime counts in double: where that differs (huge values), the
  // runtime and the spec disagree, so leave the node as it is.
  const double approx = std::ceil((static_cast<double>(limit) - static_cast<double>(start)) / static_cast<double>(delta));
  if (static_cast<double>(count) != std::max(approx, 0.0)) return unsupported(why, "count not exact in double");
  if (too_big(ctx, dtype, count, why)) return Status::kTooBig;
  std::vector<T> v(count);
  for (uint64_t i = 0; i < count; ++i)
    v[i] = static_cast<T>(static_cast<int64_t>(static_cast<uint64_t>(start) + i * static_cast<uint64_t>(delta)));
  out.push_back(Array::of(dtype, {static_cast<int64_t>(count)}, v));
  return Status::kDone;
}

// Range on floats, as onnxruntime computes it (and the spec's function
// body): the count from (limit - start) / delta in double, the values by
// adding delta again and again in T.
template <class T>
Status range_float(const KernelContext& ctx, int32_t dtype, T start, T limit, T delta, Outputs& out, std::string& why) {
  if (delta == 0) return unsupported(why, "delta is 0");
  const double n = std::ceil(static_cast<double>(static_cast<T>(limit - start)) / static_cast<double>(delta));
  if (std::isnan(n)) return unsupported(why, "count is NaN");
  if (n >= 9.0e18) {
    why = "result of about " + std::to_string(n) + " elements passes the fold size limit";
    return Status::kTooBig;
  }
  const uint64_t count = n > 0 ? static_cast<uint64_t>(n) : 0;
  if (too_big(ctx, dtype, count, why)) return Status::kTooBig;
  std::vector<T> v(count);
  T x = start;
  for (uint64_t i = 0; i < count; ++i, x += delta) v[i] = x;
  out.push_back(Array::of(dtype, {static_cast<int64_t>(count)}, v));
  return Status::kDone;
}

Status range(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  if (ctx.opset < 11 || !attributes_are(ctx.node, ctx.opset >= 27 ? std::vector<AttrSpec>{{"stash_type", Int}} : std::vector<AttrSpec>{}))
    return unsupported(why, "no Range at this opset, or other attributes");
  if (in.size() != 3 || !is_scalar_like(in[0]) || !is_scalar_like(in[1]) || !is_scalar_like(in[2]))
    return unsupported(why, "Range takes three scalars");
  const int32_t t = in[0]->dtype;
  if (in[1]->dtype != t || in[2]->dtype != t) return unsupported(why, "Range inputs of different types");
  switch (t) {
    case kFloat: return range_float<float>(ctx, t, in[0]->at<float>(0), in[1]->at<float>(0), in[2]->at<float>(0), out, why);
    case kDouble:
      return range_float<double>(ctx, t, in[0]->at<double>(0), in[1]->at<double>(0), in[2]->at<double>(0), out, why);
    case kInt16: case kInt32: case kInt64: {
      const int64_t s = in[0]->as_int64()[0], l = in[1]->as_int64()[0], d = in[2]->as_int64()[0];
      if (t == kInt16) return range_int<int16_t>(ctx, t, s, l, d, out, why);
      if (t == kInt32) return range_int<int32_t>(ctx, t, s, l, d, out, why);
      return range_int<int64_t>(ctx, t, s, l, d, out, why);
    }
    default: return unsupported(why, std::string("Range of ") + ir::dtype_name(t));
  }
}

}  // namespace

void add_shape_kernels(KernelTable& t) {
  t["Identity"] = identity;
  t["Shape"] = shape;
  t["Size"] = size;
  t["Reshape"] = reshape;
  t["Flatten"] = flatten;
  t["Squeeze"] = squeeze;
  t["Unsqueeze"] = unsqueeze;
  t["ConstantOfShape"] = constant_of_shape;
  t["Range"] = range;
  add_index_kernels(t);
  add_cast_kernels(t);
}

}  // namespace pyonnxopt::fold
