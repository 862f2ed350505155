// Max and Min with a one-element constant are Clip; two bounds in a row
// (Max, Min or Clip with constant bounds) are one Clip:
//   Max(x, lo) -> Clip(x, lo);  Min(x, hi) -> Clip(x, , hi)
//   Min(Max(x, l1), h2) -> Clip(x, l1, h2);  Clip(Clip(x, l1, h1), l2, h2) -> Clip(x, max(l1, l2), min(h1, h2))
// Clamping to [l1, h1] then to [l2, h2] is clamping to their intersection
// when it is not empty; when it is, the result is a constant and stays.
#include <cmath>
#include <limits>

#include "passes/known_values.h"
#include "passes/simplify_algebra/rules.h"

namespace pyonnxopt::passes::algebra {

using namespace ir;

namespace {

// A node read as y = clamp(x, lo, hi), either bound optional.
struct Clamp {
  Value* x = nullptr;
  Value* lo_source = nullptr;  // the constants the bounds came from
  Value* hi_source = nullptr;
  std::optional<fold::Array> lo, hi;
  std::vector<int64_t> broadcast_dims;  // a Max/Min constant's dims: they may broadcast x
  int32_t dtype = 0;
};

// One-element constant.
bool read_bound(const Value* v, fold::Array& out) { return read_constant(v, out) && out.numel() == 1; }

// The far end of a floating type as a scalar: ±infinity, or the largest
// finite value (a Clip's default bound).
fold::Array extreme(int32_t dtype, bool negative, bool infinite) {
  std::string bytes;
  auto put = [&bytes](auto v) { bytes.assign(reinterpret_cast<const char*>(&v), sizeof v); };
  const double d = infinite ? HUGE_VAL : std::numeric_limits<double>::max();
  const float f = infinite ? HUGE_VALF : std::numeric_limits<float>::max();
  if (dtype == fold::kFloat16) put(uint16_t((negative ? 0x8000 : 0) | (infinite ? 0x7C00 : 0x7BFF)));
  else if (dtype == fold::kDouble) put(negative ? -d : d);
  else put(negative ? -f : f);
  return fold::Array::of_bytes(dtype, {}, std::move(bytes));
}

bool as_clamp(const Node& n, int64_t opset, Clamp& out) {
  const std::string& op = n.op_type.value;
  if (!single_output(n)) return false;
  if (op == "Max" || op == "Min") {
    if (n.inputs.size() != 2 || !n.inputs[0] || !n.inputs[1]) return false;
    fold::Array c;
    const size_t at = read_bound(n.inputs[1], c) ? 1 : read_bound(n.inputs[0], c) ? 0 : 2;
    if (at == 2 || known_constant(n.inputs[1 - at])) return false;  // all constant: fold_constants' work
    out.x = n.inputs[1 - at];
    out.broadcast_dims = c.dims;
    out.dtype = c.dtype;
    (op == "Max" ? out.lo_source : out.hi_source) = n.inputs[at];
    (op == "Max" ? out.lo : out.hi) = std::move(c);
    return true;
  }
  if (op != "Clip" || opset < 11 || n.inputs.empty() || !n.inputs[0] || n.inputs.size() > 3) return false;
  out.x = n.inputs[0];
  for (size_t i = 1; i < n.inputs.size(); ++i) {
    if (!n.inputs[i]) continue;
    fold::Array c;
    if (!read_bound(n.inputs[i], c)) return false;
    out.dtype = c.dtype;
    (i == 1 ? out.lo_source : out.hi_source) = n.inputs[i];
    (i == 1 ? out.lo : out.hi) = std::move(c);
  }
  if (!out.lo && !out.hi) return false;
  // A floating Clip's missing bound is the largest finite value, not infinity:
  // Clip(inf, 0) is FLT_MAX.
  if (is_floating(out.dtype) && !out.lo) out.lo = extreme(out.dtype, true, false);
  if (is_floating(out.dtype) && !out.hi) out.hi = extreme(out.dtype, false, false);
  return true;
}

// -1, 0, 1 as a < b, a == b, a > b; 2 when unordered (NaN) or not a number type.
int compare(const fold::Array& a, const fold::Array& b) {
  int r = 2;
  fold::visit<fold::kNumbers | fold::kHalfs>(a.dtype, [&](auto e) {
    using E = decltype(e);
    const auto x = E::load(a.bytes.data()), y = E::load(b.bytes.data());
    r = x < y ? -1 : y < x ? 1 : x == y ? 0 : 2;
  });
  return r;
}

// The element types onnxruntime's Clip runs for (the schema allows more:
// Clip-11 double, int16, uint16, bfloat16 have no CPU kernel there).
const char* clip_takes(Context& ctx, int32_t dtype, int64_t opset) {
  const bool floats = dtype == fold::kFloat || dtype == fold::kFloat16;
  const bool from_12 = dtype == fold::kDouble || dtype == fold::kInt8 || dtype == fold::kUint8 ||
                       dtype == fold::kInt32 || dtype == fold::kUint32 || dtype == fold::kInt64 ||
                       dtype == fold::kUint64;
  if (floats || (from_12 && opset >= 12)) return nullptr;
  return ctx.say(std::string("onnxruntime has no Clip-") + (opset >= 12 ? "12+" : "11") + " kernel for " +
                 dtype_name(dtype));
}

// Checks one clamp's bounds and shape; nullptr when it may become a Clip.
const char* usable(Context& ctx, const Clamp& c) {
  for (const auto* b : {&c.lo, &c.hi})
    if (*b && compare(**b, **b) == 2) return "a bound is NaN (Max and Min then give NaN, Clip does not)";
  const int32_t type = known_elem_type(c.x);
  if (type && type != c.dtype) return "input and bound types differ";
  return keeps_shape(ctx, c.broadcast_dims, c.x, "the bound");
}

// inner then outer as one clamp of inner.x; false when the intervals do not meet.
bool combine(const Clamp& inner, const Clamp& outer, Clamp& out) {
  out = inner;
  if (outer.lo && (!out.lo || compare(*outer.lo, *out.lo) > 0)) {
    out.lo = outer.lo;
    out.lo_source = outer.lo_source;
  }
  if (outer.hi && (!out.hi || compare(*outer.hi, *out.hi) < 0)) {
    out.hi = outer.hi;
    out.hi_source = outer.hi_source;
  }
  return !(out.lo && out.hi && compare(*out.lo, *out.hi) > 0);
}

// The bound as a Clip input: its own constant when that is a scalar, else a new scalar.
Value* scalar(Context& ctx, Graph& g, Node& before, const fold::Array& bound, Value* source, const char* suffix) {
  if (source && bound.dims.empty()) return source;
  fold::Array s = fold::Array::of_bytes(bound.dtype, {}, std::string(reinterpret_cast<const char*>(bound.bytes.data()),
                                                                     fold::element_size(bound.dtype)));
  return ctx.add_constant(g, &before, single_output(before)->name + suffix, s);
}

const char* emit_clip(Context& ctx, Graph& g, Node& outer, Node* inner, Clamp c) {
  // Max and Min leave infinities alone; a floating Clip without a bound
  // would clamp them to the largest finite value: write the infinity.
  if (is_floating(c.dtype)) {
    if (!c.lo) c.lo = extreme(c.dtype, true, true);
    if (!c.hi) c.hi = extreme(c.dtype, false, true);
  }
  Value* lo = c.lo ? scalar(ctx, g, outer, *c.lo, c.lo_source, "_min") : nullptr;
  Value* hi = c.hi ? scalar(ctx, g, outer, *c.hi, c.hi_source, "_max") : nullptr;
  if ((c.lo && !lo) || (c.hi && !hi)) return ctx.reason();
  Node* clip = g.new_node();
  clip->op_type.set("Clip");
  if (outer.name.has) clip->name = outer.name;
  clip->domain = outer.domain;
  clip->inputs = {c.x, lo};
  if (hi) clip->inputs.push_back(hi);
  Rewrite record{"replaced", {}, {}};
  if (inner) record.consumed.push_back(node_id(*inner));
  record.consumed.push_back(node_id(outer));
  ctx.count_removed(outer);
  g.replace_node(&outer, clip);
  ++ctx.stats->nodes_added;
  if (inner) ctx.remove_if_unread(g, inner);
  record.produced.push_back(node_id(*clip));
  ctx.stats->rewrites.push_back(std::move(record));
  return nullptr;
}

}  // namespace

const char* bound_with_clip(Context& ctx, Graph& g, Node& n) {
  const int64_t opset = ctx.opset(g);
  Clamp outer;
  if (!as_clamp(n, opset, outer)) return kNotMine;
  const bool is_clip = n.op_type.value == "Clip";
  if (opset < 11) return "Clip takes its bounds as inputs from opset 11";
  if (n.pinned) return "excluded from optimization";
  if (const char* why = clip_takes(ctx, outer.dtype, opset)) return why;
  if (const char* why = usable(ctx, outer)) return why;

  // Two in a row: the first one goes when only the second reads it.
  Node* inner = producer_in(g, outer.x);
  Clamp first, both;
  const char* merge_refused = kNotMine;
  if (inner && as_clamp(*inner, opset, first) && first.dtype == outer.dtype && read_once(outer.x)) {
    merge_refused = inner->pinned ? "excluded from optimization" : usable(ctx, first);
    if (!merge_refused && !combine(first, outer, both))
      merge_refused = "the bounds of the two do not overlap (the result is constant)";
    if (!merge_refused) return emit_clip(ctx, g, n, inner, both);
  }
  if (is_clip) return merge_refused;  // a lone Clip is what we want already
  return emit_clip(ctx, g, n, nullptr, outer);
}

}  // namespace pyonnxopt::passes::algebra
