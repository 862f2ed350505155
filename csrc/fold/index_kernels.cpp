// Kernels that move elements: Gather, Slice, Concat, Split, Expand, Tile,
// Transpose. They copy element_size() bytes at a time, so they work on every
// fixed-size element type. Most of them are one gather_elements() call: for
// each output axis, the input offset each index along it reads.
#include <algorithm>
#include <limits>

#include "fold/shape_util.h"

namespace pyonnxopt::fold {

namespace {

using Inputs = std::vector<const Array*>;
using Outputs = std::vector<Array>;
constexpr ir::AttrType Int = ir::AttrType::kInt, Ints = ir::AttrType::kInts;

bool movable(const Array* a) { return a && element_size(a->dtype) != 0; }

Status gather(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  if (in.size() != 2 || !movable(in[0]) || !in[1] || (in[1]->dtype != kInt64 && in[1]->dtype != kInt32))
    return unsupported(why, "Gather takes data and int32/int64 indices");
  if (!attributes_are(ctx.node, {{"axis", Int}})) return unsupported(why, "attributes other than axis");
  const Array& x = *in[0];
  const int64_t rank = static_cast<int64_t>(x.dims.size());
  int64_t axis;
  if (!normalize_axis(int_attribute(ctx.node, "axis", 0), rank, axis)) return unsupported(why, "axis out of range");
  const int64_t dim = x.dims[static_cast<size_t>(axis)];
  std::vector<int64_t> indices = in[1]->as_int64();
  for (int64_t& i : indices) {
    if (i < -dim || i >= dim) return unsupported(why, "index out of range");
    if (i < 0) i += dim;
  }
  std::vector<int64_t> dims(x.dims.begin(), x.dims.begin() + axis);
  dims.insert(dims.end(), in[1]->dims.begin(), in[1]->dims.end());
  dims.insert(dims.end(), x.dims.begin() + axis + 1, x.dims.end());
  uint64_t count;
  if (too_big_or_overflow(ctx, x.dtype, dims, count, why)) return Status::kTooBig;
  // Walk the input's axes with the indices as the gathered one.
  const std::vector<uint64_t> stride = strides_of(x.dims);
  std::vector<int64_t> walk = x.dims;
  walk[static_cast<size_t>(axis)] = static_cast<int64_t>(indices.size());
  out.push_back(gather_elements(x, walk, std::move(dims), count, [&](size_t j, int64_t i) {
    const int64_t at = static_cast<int64_t>(j) == axis ? indices[static_cast<size_t>(i)] : i;
    return static_cast<uint64_t>(at) * stride[j];
  }));
  return Status::kDone;
}

// Slice's starts, ends, axes, steps: attributes before opset 10, inputs from 10.
bool slice_arguments(const KernelContext& ctx, const Inputs& in, std::vector<int64_t>& starts,
                     std::vector<int64_t>& ends, std::vector<int64_t>& axes, std::vector<int64_t>& steps, bool& has_axes) {
  if (!attributes_are(ctx.node, ctx.opset < 10 ? std::vector<AttrSpec>{{"starts", Ints}, {"ends", Ints}, {"axes", Ints}}
                                                : std::vector<AttrSpec>{}))
    return false;
  if (ctx.opset < 10) {
    const ir::Attribute* s = ctx.node.attribute("starts");
    const ir::Attribute* e = ctx.node.attribute("ends");
    const ir::Attribute* a = ctx.node.attribute("axes");
    if (in.size() != 1 || !s || !e) return false;
    starts = s->ints;
    ends = e->ints;
    has_axes = a != nullptr;
    if (a) axes = a->ints;
    steps.assign(starts.size(), 1);
    return !any_negative(axes);
  }
  if (in.size() < 3 || in.size() > 5 || !int_list(in[1], starts) || !int_list(in[2], ends)) return false;
  if (in[1]->dtype != in[2]->dtype) return false;
  has_axes = in.size() > 3 && in[3];
  if (has_axes && (!int_list(in[3], axes) || (!negative_axes_ok(ctx) && any_negative(axes)))) return false;
  if (in.size() > 4 && in[4]) return int_list(in[4], steps);
  steps.assign(starts.size(), 1);
  return true;
}

Status slice(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  std::vector<int64_t> starts, ends, axes, steps;
  bool has_axes = false;
  if (in.empty() || !movable(in[0]) || !slice_arguments(ctx, in, starts, ends, axes, steps, has_axes))
    return unsupported(why, "malformed Slice");
  const Array& x = *in[0];
  const int64_t rank = static_cast<int64_t>(x.dims.size());
  if (rank == 0) return unsupported(why, "Slice of a scalar");  // onnxruntime refuses it, even with nothing to slice
  if (!has_axes)
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  std::vector<int64_t> norm;
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size() ||
      !normalize_axes(axes, rank, norm))
    return unsupported(why, "starts, ends, axes, steps do not match the input");
  std::vector<int64_t> first(x.dims.size(), 0), step(x.dims.size(), 1), dims = x.dims;
  for (size_t i = 0; i < norm.size(); ++i) {
    const size_t a = static_cast<size_t>(norm[i]);
    const int64_t dim = x.dims[a], st = steps[i];
    if (st == 0) return unsupported(why, "step 0");
    int64_t s = starts[i] < 0 ? starts[i] + dim : starts[i];
    int64_t e = ends[i] < 0 ? ends[i] + dim : ends[i];
    uint64_t n = 0;
    if (st > 0) {
      s = std::clamp<int64_t>(s, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      if (e > s) n = static_cast<uint64_t>(e - s - 1) / static_cast<uint64_t>(st) + 1;
    } else if (dim > 0) {
      // onnxruntime reads these ends as "to the front" where the spec clamps
      // them to dim - 1 (an empty result): no answer both agree on.
      if (ends[i] == std::numeric_limits<int64_t>::max() || ends[i] == std::numeric_limits<int32_t>::max())
        return unsupported(why, "INT_MAX end with a negative step: onnxruntime and the spec disagree");
      s = std::clamp<int64_t>(s, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      if (s > e) n = static_cast<uint64_t>(s - e - 1) / (0 - static_cast<uint64_t>(st)) + 1;
    }
    first[a] = s;
    step[a] = st;
    dims[a] = static_cast<int64_t>(n);
  }
  uint64_t count;
  if (too_big_or_overflow(ctx, x.dtype, dims, count, why)) return Status::kTooBig;
  const std::vector<uint64_t> stride = strides_of(x.dims);
  out.push_back(gather_elements(x, dims, dims, count, [&](size_t j, int64_t i) {
    return static_cast<uint64_t>(first[j] + i * step[j]) * stride[j];  // i * step stays within the axis
  }));
  return Status::kDone;
}

Status concat(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  const ir::Attribute* axis_attr = ctx.node.attribute("axis");
  if (in.empty() || !axis_attr || !attributes_are(ctx.node, {{"axis", Int}}))
    return unsupported(why, "Concat without inputs or axis");
  for (const Array* a : in)
    if (!movable(a) || a->dtype != in[0]->dtype || a->dims.size() != in[0]->dims.size())
      return unsupported(why, "inputs of different types or ranks");
  const std::vector<int64_t>& first = in[0]->dims;
  int64_t axis;
  if (axis_attr->i.value < 0 && !negative_axes_ok(ctx)) return unsupported(why, "negative axis before opset 11");
  if (!normalize_axis(axis_attr->i.value, static_cast<int64_t>(first.size()), axis))
    return unsupported(why, "axis out of range");
  std::vector<int64_t> dims = first;
  dims[static_cast<size_t>(axis)] = 0;
  for (const Array* a : in) {
    for (size_t j = 0; j < first.size(); ++j)
      if (static_cast<int64_t>(j) != axis && a->dims[j] != first[j]) return unsupported(why, "dims do not match");
    if (a->dims[static_cast<size_t>(axis)] > std::numeric_limits<int64_t>::max() - dims[static_cast<size_t>(axis)])
      return unsupported(why, "concatenated axis overflows");
    dims[static_cast<size_t>(axis)] += a->dims[static_cast<size_t>(axis)];
  }
  uint64_t count;
  if (too_big_or_overflow(ctx, in[0]->dtype, dims, count, why)) return Status::kTooBig;
  const size_t size = element_size(in[0]->dtype);
  uint64_t outer = 1;  // rows before the axis; no overflow with count > 0
  for (int64_t j = 0; j < axis && count; ++j) outer *= static_cast<uint64_t>(first[static_cast<size_t>(j)]);
  std::string bytes(count * size, '\0');
  char* dst = bytes.data();
  for (uint64_t o = 0; o < outer && count; ++o)
    for (const Array* a : in) {
      const uint64_t chunk = outer ? a->nbytes() / outer : 0;  // this input's part of one outer row
      if (chunk) std::memcpy(dst, a->bytes.data() + o * chunk, chunk);
      dst += chunk;
    }
  out.push_back(Array::of_bytes(in[0]->dtype, std::move(dims), std::move(bytes)));
  return Status::kDone;
}

// Split sizes: the `split` attribute before opset 13, the input from 13;
// from opset 18 without them, `num_outputs` parts, the last one smaller.
bool split_sizes(const KernelContext& ctx, const Inputs& in, int64_t dim, size_t parts, std::vector<int64_t>& sizes) {
  const ir::Attribute* split_attr = ctx.node.attribute("split");
  const ir::Attribute* num = ctx.node.attribute("num_outputs");
  const std::vector<AttrSpec> specs = ctx.opset < 13    ? std::vector<AttrSpec>{{"axis", Int}, {"split", Ints}}
                                      : ctx.opset < 18 ? std::vector<AttrSpec>{{"axis", Int}}
                                                       : std::vector<AttrSpec>{{"axis", Int}, {"num_outputs", Int}};
  if (!attributes_are(ctx.node, specs)) return false;
  bool given = false;
  if (ctx.opset < 13) {
    if (in.size() != 1) return false;
    given = split_attr != nullptr;
    if (given) sizes = split_attr->ints;
  } else {
    if (split_attr || in.size() > 2) return false;
    given = in.size() == 2 && in[1];
    if (given && (in[1]->dtype != kInt64 || !int_list(in[1], sizes))) return false;
  }
  if (num && (ctx.opset < 18 || given || !num->i.has || num->i.value != static_cast<int64_t>(parts))) return false;
  if (given) {
    int64_t total = 0;
    if (sizes.size() != parts) return false;
    for (int64_t s : sizes) {
      if (s < 0 || s > dim - total) return false;
      total += s;
    }
    return total == dim;
  }
  const int64_t n = static_cast<int64_t>(parts);
  if (ctx.opset >= 18) {
    if (!num) return false;  // the spec wants split or num_outputs
    const int64_t chunk = dim / n + (dim % n != 0);
    if (n > 1 && chunk > dim / (n - 1)) return false;  // chunk * (n - 1) > dim: no last part left
    sizes.assign(parts, chunk);
    sizes.back() = dim - chunk * (n - 1);
    return true;
  }
  if (dim % n) return false;
  sizes.assign(parts, dim / n);
  return true;
}

Status split(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  if (in.empty() || !movable(in[0]) || ctx.node.outputs.empty()) return unsupported(why, "malformed Split");
  const Array& x = *in[0];
  int64_t axis;
  if (int_attribute(ctx.node, "axis", 0) < 0 && !negative_axes_ok(ctx)) return unsupported(why, "negative axis before opset 11");
  if (!normalize_axis(int_attribute(ctx.node, "axis", 0), static_cast<int64_t>(x.dims.size()), axis))
    return unsupported(why, "axis out of range");
  std::vector<int64_t> sizes;
  if (!split_sizes(ctx, in, x.dims[static_cast<size_t>(axis)], ctx.node.outputs.size(), sizes))
    return unsupported(why, "split sizes do not match the input or the outputs");
  const std::vector<uint64_t> stride = strides_of(x.dims);
  int64_t at = 0;
  for (int64_t size : sizes) {
    std::vector<int64_t> dims = x.dims;
    dims[static_cast<size_t>(axis)] = size;
    uint64_t count;
    if (!count_of(dims, count)) return unsupported(why, "a part's element count overflows");
    out.push_back(gather_elements(x, dims, dims, count, [&](size_t j, int64_t i) {
      return static_cast<uint64_t>((static_cast<int64_t>(j) == axis ? at : 0) + i) * stride[j];
    }));
    at += size;
  }
  return Status::kDone;
}

Status expand(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  std::vector<int64_t> shape;
  if (in.size() != 2 || !movable(in[0]) || !in[1] || in[1]->dtype != kInt64 || !int_list(in[1], shape))
    return unsupported(why, "Expand takes data and a 1-D int64 shape");
  if (ctx.opset < 8 || !attributes_are(ctx.node, {})) return unsupported(why, "no Expand at this opset, or attributes");
  const Array& x = *in[0];
  const size_t rank = std::max(x.dims.size(), shape.size());
  std::vector<int64_t> dims(rank), xdims(rank, 1);  // xdims: the input's dims aligned right
  std::copy(x.dims.begin(), x.dims.end(), xdims.begin() + static_cast<std::ptrdiff_t>(rank - x.dims.size()));
  for (size_t j = 0; j < rank; ++j) {
    const int64_t a = xdims[j];
    const int64_t b = j + shape.size() < rank ? 1 : shape[j + shape.size() - rank];
    if (b < 0) return unsupported(why, "negative dim in shape");
    if (a != b && a != 1 && b != 1) return unsupported(why, "shape does not broadcast with the input");
    dims[j] = a == 1 ? b : a;
  }
  uint64_t count;
  if (too_big_or_overflow(ctx, x.dtype, dims, count, why)) return Status::kTooBig;
  const std::vector<uint64_t> stride = strides_of(xdims);
  out.push_back(gather_elements(x, dims, dims, count, [&](size_t j, int64_t i) {
    return xdims[j] == 1 ? 0 : static_cast<uint64_t>(i) * stride[j];
  }));
  return Status::kDone;
}

Status tile(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  std::vector<int64_t> repeats;
  if (in.size() != 2 || !movable(in[0]) || !in[1] || in[1]->dtype != kInt64 || !int_list(in[1], repeats) ||
      repeats.size() != in[0]->dims.size())
    return unsupported(why, "Tile takes data and one int64 repeat per axis");
  if (ctx.opset < 6 || !attributes_are(ctx.node, {})) return unsupported(why, "Tile-1 (tiles, axis), or attributes");
  const Array& x = *in[0];
  std::vector<int64_t> dims(x.dims.size());
  for (size_t j = 0; j < dims.size(); ++j) {
    if (repeats[j] < 0) return unsupported(why, "negative repeat");
    if (x.dims[j] && repeats[j] > std::numeric_limits<int64_t>::max() / x.dims[j]) {
      why = "result's dims overflow";
      return Status::kTooBig;
    }
    dims[j] = x.dims[j] * repeats[j];
  }
  uint64_t count;
  if (too_big_or_overflow(ctx, x.dtype, dims, count, why)) return Status::kTooBig;
  const std::vector<uint64_t> stride = strides_of(x.dims);
  out.push_back(gather_elements(x, dims, dims, count, [&](size_t j, int64_t i) {
    return static_cast<uint64_t>(i % x.dims[j]) * stride[j];  // x.dims[j] > 0 when count > 0
  }));
  return Status::kDone;
}

Status transpose(const KernelContext& ctx, const Inputs& in, Outputs& out, std::string& why) {
  if (in.size() != 1 || !movable(in[0]) || !attributes_are(ctx.node, {{"perm", Ints}}))
    return unsupported(why, "Transpose takes one input and perm");
  const Array& x = *in[0];
  const int64_t rank = static_cast<int64_t>(x.dims.size());
  std::vector<int64_t> perm;
  if (const ir::Attribute* a = ctx.node.attribute("perm")) {
    if (static_cast<int64_t>(a->ints.size()) != rank) return unsupported(why, "perm does not match the rank");
    for (int64_t p : a->ints)
      if (p < 0) return unsupported(why, "negative axis in perm");  // the spec has no negative perm entries
    if (!normalize_axes(a->ints, rank, perm)) return unsupported(why, "perm is not a permutation");
  } else {
    for (int64_t j = rank; j-- > 0;) perm.push_back(j);
  }
  std::vector<int64_t> dims;
  for (int64_t p : perm) dims.push_back(x.dims[static_cast<size_t>(p)]);
  uint64_t count;
  if (too_big_or_overflow(ctx, x.dtype, dims, count, why)) return Status::kTooBig;
  const std::vector<uint64_t> stride = strides_of(x.dims);
  out.push_back(gather_elements(x, dims, dims, count, [&](size_t j, int64_t i) {
    return static_cast<uint64_t>(i) * stride[static_cast<size_t>(perm[j])];
  }));
  return Status::kDone;
}

}  // namespace

void add_index_kernels(KernelTable& t) {
  t["Gather"] = gather;
  t["Slice"] = slice;
  t["Concat"] = concat;
  t["Split"] = split;
  t["Expand"] = expand;
  t["Tile"] = tile;
  t["Transpose"] = transpose;
}

}  // namespace pyonnxopt::fold
