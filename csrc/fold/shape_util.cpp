#include "fold/shape_util.h"

#include <algorithm>
#include <limits>

namespace pyonnxopt::fold {

bool attributes_are(const ir::Node& n, const std::vector<AttrSpec>& allowed) {
  for (const ir::Attribute& a : n.attributes) {
    const AttrSpec* spec = nullptr;
    for (const AttrSpec& s : allowed)
      if (a.name.value == s.name) spec = &s;
    if (!spec || a.ref_attr_name.has) return false;
    bool ok;
    switch (spec->type) {  // the field that holds the value is set
      case ir::AttrType::kInt: ok = a.i.has; break;
      case ir::AttrType::kTensor: ok = a.t != nullptr; break;
      case ir::AttrType::kString: ok = a.s.has; break;
      default: ok = true; break;  // lists: an empty one has no field set
    }
    if (!ok || (a.type.has && a.type.value != static_cast<int32_t>(spec->type))) return false;
  }
  return true;
}

bool normalize_axis(int64_t axis, int64_t rank, int64_t& out) {
  if (axis < -rank || axis >= rank) return false;
  out = axis < 0 ? axis + rank : axis;
  return true;
}

bool count_of(const std::vector<int64_t>& dims, uint64_t& count) {
  // Left to right, as the loader checks a tensor's dims: a product that
  // overflows before a 0 is refused there too.
  uint64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) return false;
    if (d != 0 && n > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d)) return false;
    n *= static_cast<uint64_t>(d);
  }
  count = n;
  return true;
}

bool too_big_or_overflow(const KernelContext& ctx, int32_t dtype, const std::vector<int64_t>& dims, uint64_t& count,
                         std::string& why) {
  if (!count_of(dims, count)) {
    why = "result's element count overflows";
    return true;
  }
  return too_big(ctx, dtype, count, why);
}

bool int_list(const Array* a, std::vector<int64_t>& out, bool scalar_ok) {
  if (!a || (a->dtype != kInt64 && a->dtype != kInt32)) return false;
  if (a->dims.size() != 1 && !(scalar_ok && a->dims.empty())) return false;
  out = a->as_int64();
  return true;
}

bool is_scalar_like(const Array* a) { return a && a->dims.size() <= 1 && a->numel() == 1; }

bool normalize_axes(const std::vector<int64_t>& axes, int64_t rank, std::vector<int64_t>& out) {
  out.clear();
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t a : axes) {
    int64_t n;
    if (!normalize_axis(a, rank, n) || seen[static_cast<size_t>(n)]) return false;
    seen[static_cast<size_t>(n)] = true;
    out.push_back(n);
  }
  return true;
}

std::vector<uint64_t> strides_of(const std::vector<int64_t>& dims) {
  std::vector<uint64_t> s(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * static_cast<uint64_t>(dims[i]);
  return s;
}

void shape_range(const KernelContext& ctx, int64_t rank, int64_t& begin, int64_t& end) {
  const bool sliced = ctx.opset >= 15;  // start/end do not exist before
  auto clamp = [rank](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
  begin = clamp(sliced ? int_attribute(ctx.node, "start", 0) : 0);
  end = clamp(sliced ? int_attribute(ctx.node, "end", rank) : rank);
  if (end < begin) end = begin;
}

}  // namespace pyonnxopt::fold
