#include "fold/partial.h"

#include <limits>

#include "fold/shape_util.h"

namespace pyonnxopt::fold {

bool Partial::known() const {
  for (const auto& v : values)
    if (!v) return false;
  return true;
}

Array Partial::to_array() const {
  std::vector<int64_t> dims;
  if (!scalar) dims.push_back(static_cast<int64_t>(values.size()));
  if (dtype == kInt32) {
    std::vector<int32_t> v;
    for (const auto& x : values) v.push_back(static_cast<int32_t>(*x));
    return Array::of(kInt32, dims, v);
  }
  std::vector<int64_t> v;
  for (const auto& x : values) v.push_back(*x);
  return Array::of(kInt64, dims, v);
}

bool shape_or_size(const KernelContext& ctx, const PartialDims& dims, Partial& out) {
  out = Partial{};
  if (ctx.node.op_type.value == "Size") {
    if (!attributes_are(ctx.node, {})) return false;
    out.scalar = true;
    std::vector<int64_t> known;
    for (const auto& d : dims)
      if (d) known.push_back(*d);
    uint64_t n;
    const bool fits = known.size() == dims.size() && count_of(known, n) &&
                      n <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    out.values.push_back(fits ? std::optional<int64_t>(static_cast<int64_t>(n)) : std::nullopt);
    return true;
  }
  if (!attributes_are(ctx.node, ctx.opset >= 15 ? std::vector<AttrSpec>{{"start", ir::AttrType::kInt}, {"end", ir::AttrType::kInt}}
                                                : std::vector<AttrSpec>{}))
    return false;
  int64_t begin, end;
  shape_range(ctx, static_cast<int64_t>(dims.size()), begin, end);
  out.values.assign(dims.begin() + begin, dims.begin() + end);
  return true;
}

namespace {

// Cast keeps the values; to int32 they wrap as the kernel's Cast would.
bool cast(const KernelContext& ctx, const Partial& in, Partial& out) {
  const int64_t to = int_attribute(ctx.node, "to", 0);
  if ((to != kInt64 && to != kInt32) || !attributes_are(ctx.node, cast_attributes(ctx.opset, true))) return false;
  out = in;
  out.dtype = static_cast<int32_t>(to);
  if (to == kInt32)
    for (auto& v : out.values)
      if (v) v = static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(*v)));
  return true;
}

}  // namespace

bool propagate(const KernelContext& ctx, const std::vector<const Partial*>& partials,
               const std::vector<const Array*>& constants, Partial& out) {
  const std::string& op = ctx.node.op_type.value;
  if (partials.size() != constants.size() || partials.empty()) return false;
  if (op == "Cast") return partials.size() == 1 && partials[0] && cast(ctx, *partials[0], out);
  if (op != "Gather" && op != "Slice" && op != "Concat" && op != "Squeeze" && op != "Unsqueeze" && op != "Identity")
    return false;
  const Partial* first = nullptr;
  for (const Partial* p : partials)
    if (p && !first) first = p;
  if (!first) return false;

  // Stand-ins: every element of a data input becomes its position in `table`.
  PartialDims table;
  std::vector<Array> stand_ins(partials.size());
  std::vector<const Array*> inputs(partials.size(), nullptr);
  for (size_t i = 0; i < partials.size(); ++i) {
    const bool data = op == "Concat" || i == 0;
    if (!data) {
      if (partials[i]) return false;  // indices, starts, axes: only constants
      inputs[i] = constants[i];
      continue;
    }
    std::vector<int64_t> positions, dims;
    if (const Partial* p = partials[i]) {
      if (p->dtype != first->dtype) return false;
      for (const auto& v : p->values) {
        positions.push_back(static_cast<int64_t>(table.size()));
        table.push_back(v);
      }
      if (!p->scalar) dims.push_back(static_cast<int64_t>(p->values.size()));
    } else if (const Array* c = constants[i]) {
      if (c->dtype != first->dtype || c->dims.size() > 1) return false;
      for (int64_t v : c->as_int64()) {
        positions.push_back(static_cast<int64_t>(table.size()));
        table.push_back(v);
      }
      dims = c->dims;
    } else {
      return false;
    }
    stand_ins[i] = Array::of(kInt64, dims, positions);
    inputs[i] = &stand_ins[i];
  }
  Kernel kernel = find_kernel(op);
  std::vector<Array> results;
  std::string why;
  try {
    if (!kernel || kernel(ctx, inputs, results, why) != Status::kDone) return false;
  } catch (const std::exception&) {
    return false;
  }
  if (results.size() != 1 || results[0].dtype != kInt64 || results[0].dims.size() > 1) return false;
  out = Partial{};
  out.dtype = first->dtype;
  out.scalar = results[0].dims.empty();
  for (int64_t position : results[0].values<int64_t>()) {
    if (position < 0 || static_cast<uint64_t>(position) >= table.size()) return false;  // not a moved element
    out.values.push_back(table[static_cast<size_t>(position)]);
  }
  return true;
}

}  // namespace pyonnxopt::fold
