#include "passes/eliminate_nop.h"

#include <algorithm>

#include "fold/array.h"
#include "passes/bypass.h"
#include "passes/cast_exactness.h"
#include "passes/known_values.h"

namespace pyonnxopt::passes {

using namespace ir;

namespace {

// Past any dimension a tensor can have: a slice ending here ends at the end.
constexpr int64_t kUnboundedEnd = int64_t{1} << 62;

int live_outputs(const Node& n) {
  int k = 0;
  for (const Value* v : n.outputs) k += v != nullptr;
  return k;
}

int64_t int_attribute(const Node& n, const char* name, int64_t otherwise) {
  const Attribute* a = n.attribute(name);
  return a ? a->i.value : otherwise;
}

// Reasons that name a value are built here; `why` holds the text until the
// next node is judged (bypass_where copies it at once).
const char* not_constant(std::string& why, const char* what, const Node& n, size_t input, const char* reason) {
  why = std::string(what) + " '" + n.inputs[input]->name + "' " + reason;
  return why.c_str();
}

bool all_equal(const std::vector<int64_t>& v, int64_t x) {
  return std::all_of(v.begin(), v.end(), [x](int64_t e) { return e == x; });
}

const char* attribute_nop(const Node& n) {
  const std::string& op = n.op_type.value;
  if (op == "Concat" || op == "Sum" || op == "Mean" || op == "Max" || op == "Min")
    return n.inputs.size() == 1 ? nullptr : kNotMine;
  if (op == "Split") {
    // One output and no split sizes to check: the whole input.
    return n.outputs.size() == 1 && n.inputs.size() == 1 && !n.attribute("split") ? nullptr : kNotMine;
  }
  if (op == "Flatten") {  // of a rank-2 input at axis 1: [d0, d1] as it was
    auto shape = known_shape(n.inputs[0]);
    const int64_t axis = int_attribute(n, "axis", 1);
    if (axis != 1 && axis != -1) return kNotMine;
    if (!shape) return "input rank unknown";
    return shape->size() == 2 ? nullptr : kNotMine;
  }
  if (op == "Transpose") {
    const Attribute* perm = n.attribute("perm");
    if (!perm) return "Transpose without perm: a no-op only at rank <= 1";
    for (size_t i = 0; i < perm->ints.size(); ++i)
      if (perm->ints[i] != static_cast<int64_t>(i)) return kNotMine;
    return nullptr;
  }
  if (op == "Cast" || op == "CastLike") {
    int32_t from = known_elem_type(n.inputs[0]);
    int32_t to = 0;
    if (op == "Cast") to = static_cast<int32_t>(int_attribute(n, "to", 0));
    else if (n.inputs.size() > 1) to = known_elem_type(n.inputs[1]);
    if (!from || !to) return "input or target type unknown";
    return from == to ? nullptr : kNotMine;
  }
  return kNotMine;
}

// Reshape to the shape the input has: each target entry is the input's dim,
// a 0 that copies it (unless allowzero=1), or the one -1, which takes what
// the other dims leave (the input's dim when they multiply to nonzero).
// Beside the -1, a dim a 0 copies may be unknown: it cancels out of the
// count, and where it is 0 at run time the Reshape itself fails (-1 beside
// an empty dim), so only a failing run is changed.
const char* reshape_nop(const Model& m, const Graph& g, const Node& n, std::string& why) {
  IntList target = int_list(m, g, n, "shape", 1, 5);
  if (!target.present) return kNotMine;
  if (target.why) return not_constant(why, "target shape", n, 1, target.why);
  auto shape = known_shape(n.inputs[0]);
  if (!shape) return "input rank unknown";
  const std::vector<int64_t>& x = *shape;
  const std::vector<int64_t>& t = target.values;
  if (t.size() != x.size()) return kNotMine;
  const bool allowzero = int_attribute(n, "allowzero", 0) != 0;
  int64_t inferred = -1;
  bool unknown = false;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == -1) {
      if (inferred >= 0) return kNotMine;
      inferred = static_cast<int64_t>(i);
    } else if (t[i] == 0 && !allowzero) {
      continue;
    } else if (x[i] == kUnknownDim) {
      unknown = true;
    } else if (t[i] != x[i]) {
      return kNotMine;
    }
  }
  if (unknown) return "input dims unknown where the target shape gives a size";
  for (size_t i = 0; inferred >= 0 && i < x.size(); ++i) {
    if (static_cast<int64_t>(i) == inferred) continue;
    if (x[i] == kUnknownDim && t[i] == 0 && !allowzero) continue;
    if (x[i] == kUnknownDim) return "input dims unknown beside the target shape's -1";
    if (x[i] == 0) return kNotMine;  // -1 beside an empty dim is ill-defined
  }
  return nullptr;
}

// Expand to a shape that broadcasts to the input's own: no more axes, and
// each given size is 1 or the input's.
const char* expand_nop(const Node& n, std::string& why) {
  if (n.inputs.size() < 2 || !n.inputs[1]) return kNotMine;
  const char* bad = nullptr;
  auto target = constant_ints(n.inputs[1], &bad);
  if (!target) return not_constant(why, "shape", n, 1, bad);
  auto shape = known_shape(n.inputs[0]);
  if (!shape) return "input rank unknown";
  if (target->size() > shape->size()) return kNotMine;
  const size_t offset = shape->size() - target->size();
  bool unknown = false;
  for (size_t i = 0; i < target->size(); ++i) {
    const int64_t s = (*target)[i], d = (*shape)[offset + i];
    if (s == 1) continue;
    if (d == kUnknownDim) unknown = true;
    else if (s != d) return kNotMine;
  }
  return unknown ? "input dims unknown where the shape is not 1" : nullptr;
}

// Slice whose every range is the whole axis with step 1 (clamped as ONNX
// does); an axis of unknown size is whole only from 0 to an unbounded end.
const char* slice_nop(const Model& m, const Graph& g, const Node& n, std::string& why) {
  IntList starts = int_list(m, g, n, "starts", 1, 10), ends = int_list(m, g, n, "ends", 2, 10);
  IntList axes = int_list(m, g, n, "axes", 3, 10), steps = int_list(m, g, n, "steps", 4, 10);
  if (!starts.present || !ends.present) return kNotMine;
  const char* names[] = {"starts", "ends", "axes", "steps"};
  const IntList* lists[] = {&starts, &ends, &axes, &steps};
  for (size_t k = 0; k < 4; ++k)
    if (lists[k]->why) return not_constant(why, names[k], n, k + 1, lists[k]->why);
  const size_t count = starts.values.size();
  if (ends.values.size() != count || (axes.present && axes.values.size() != count) ||
      (steps.present && steps.values.size() != count))
    return kNotMine;
  auto shape = known_shape(n.inputs[0]);
  const int64_t rank = shape ? static_cast<int64_t>(shape->size()) : -1;
  std::vector<int64_t> seen;
  bool unknown = false;
  for (size_t k = 0; k < count; ++k) {
    if (steps.present && steps.values[k] != 1) return kNotMine;
    int64_t axis = axes.present ? axes.values[k] : static_cast<int64_t>(k);
    int64_t dim = kUnknownDim;
    if (shape) {
      if (axis < -rank || axis >= rank) return kNotMine;
      if (axis < 0) axis += rank;
      if (std::count(seen.begin(), seen.end(), axis)) return kNotMine;
      seen.push_back(axis);
      dim = (*shape)[axis];
    }
    const int64_t start = starts.values[k], end = ends.values[k];
    if (dim == kUnknownDim) {
      unknown = unknown || start != 0 || end < kUnboundedEnd;
      continue;
    }
    auto clamp = [dim](int64_t i) { return std::clamp(i < 0 ? i + dim : i, int64_t{0}, dim); };
    if (clamp(start) != 0 || clamp(end) != dim) return kNotMine;
  }
  return unknown ? "sliced dims unknown and the range is not 0 to an unbounded end" : nullptr;
}

const char* pad_nop(const Model& m, const Graph& g, const Node& n, std::string& why) {
  IntList pads = int_list(m, g, n, "pads", 1, 11);
  if (!pads.present) pads = int_list(m, g, n, "paddings", 1, 2);  // Pad-1
  if (!pads.present) return kNotMine;
  if (pads.why) return not_constant(why, "pads", n, 1, pads.why);
  return all_equal(pads.values, 0) ? nullptr : kNotMine;
}

const char* tile_nop(const Node& n, std::string& why) {
  if (n.inputs.size() < 2 || !n.inputs[1]) return kNotMine;
  const char* bad = nullptr;
  auto repeats = constant_ints(n.inputs[1], &bad);  // Tile-1's `tiles` too: one count
  if (!repeats) return not_constant(why, "repeats", n, 1, bad);
  return all_equal(*repeats, 1) ? nullptr : kNotMine;
}

// A Resize (or Upsample) to the input's own size: every output position
// maps onto its own input position in each coordinate mode (half_pixel:
// (x + 0.5) / 1 - 0.5 = x), so nearest, linear and cubic all read that
// sample. Not tf_crop_and_resize, which samples the roi.
const char* resize_nop(const Model& m, const Graph& g, const Node& n, std::string& why) {
  const Attribute* mode = n.attribute("coordinate_transformation_mode");
  if (mode && mode->s.value == "tf_crop_and_resize") return kNotMine;
  const bool upsample = n.op_type.value == "Upsample";
  if (const Attribute* scales = n.attribute("scales"))  // Upsample-7
    return upsample && std::all_of(scales->floats.begin(), scales->floats.end(), [](float f) { return f == 1.0f; })
               ? nullptr
               : kNotMine;
  const int64_t opset = default_opset(m, g);
  const size_t scales_slot = upsample || (opset && opset < 11) ? 1 : 2;
  // Reads input `slot` when it is given; `read` says whether it was (an empty one stands for none).
  fold::Array sizes, scales;
  bool read = false;
  auto given = [&](size_t slot, fold::Array& out) -> const char* {
    const Value* v = slot < n.inputs.size() ? n.inputs[slot] : nullptr;
    read = false;
    if (!v) return nullptr;
    const Tensor* t = known_constant(v);
    if (!t) return not_constant(why, slot == 3 ? "sizes" : "scales", n, slot, "is not a constant");
    std::string unread;
    if (!fold::to_array(*t, out, unread)) return kNotMine;
    read = out.numel() > 0;
    return nullptr;
  };
  if (const char* r = (scales_slot == 2 ? given(3, sizes) : nullptr)) return r;
  if (read) {
    auto dims = known_shape(n.inputs[0]);
    if (sizes.dtype != fold::kInt64) return kNotMine;
    if (!dims) return "input rank unknown";
    std::vector<int64_t> axes;
    if (const Attribute* listed = n.attribute("axes")) axes = listed->ints;  // Resize-18
    else
      for (size_t i = 0; i < dims->size(); ++i) axes.push_back(int64_t(i));
    const std::vector<int64_t> wanted = sizes.as_int64();
    if (wanted.size() != axes.size()) return kNotMine;
    bool unknown = false;
    for (size_t i = 0; i < axes.size(); ++i) {
      const int64_t r = int64_t(dims->size()), axis = axes[i] < 0 ? axes[i] + r : axes[i];
      if (axis < 0 || axis >= r) return kNotMine;
      if ((*dims)[size_t(axis)] == kUnknownDim) unknown = true;
      else if ((*dims)[size_t(axis)] != wanted[i]) return kNotMine;
    }
    return unknown ? "input dims unknown where the sizes are given" : nullptr;
  }
  if (const char* r = given(scales_slot, scales)) return r;
  if (!read || scales.dtype != fold::kFloat) return kNotMine;
  for (size_t i = 0; i < size_t(scales.numel()); ++i)
    if (scales.at<float>(i) != 1.0f) return kNotMine;
  return nullptr;
}

// A Reduce that keeps its axes and reduces only axes of size 1: each output
// element is its one input element (Sum adds it to zero, Mean divides it by
// one). With noop_with_empty_axes and no axes it returns its input by
// definition.
const char* reduce_nop(const Model& m, const Graph& g, const Node& n, std::string& why) {
  const int64_t since = n.op_type.value == "ReduceSum" ? 13 : 18;
  IntList axes = int_list(m, g, n, "axes", 1, since);
  if (axes.why) return not_constant(why, "axes", n, 1, axes.why);
  const bool all_axes = axes.values.empty();
  if (all_axes && int_attribute(n, "noop_with_empty_axes", 0) != 0) return nullptr;
  if (int_attribute(n, "keepdims", 1) == 0) return kNotMine;
  auto shape = known_shape(n.inputs[0]);
  if (!shape) return "input rank unknown";
  const int64_t rank = static_cast<int64_t>(shape->size());
  std::vector<int64_t> reduced = axes.values;
  if (all_axes)
    for (int64_t i = 0; i < rank; ++i) reduced.push_back(i);
  bool unknown = false;
  for (int64_t axis : reduced) {
    if (axis < -rank || axis >= rank) return kNotMine;
    const int64_t dim = (*shape)[axis < 0 ? axis + rank : axis];
    if (dim == kUnknownDim) unknown = true;
    else if (dim != 1) return kNotMine;
  }
  return unknown ? "reduced dims unknown" : nullptr;
}

// nullptr when `n` returns its first input unchanged as its first output,
// else why not (kNotMine when it is simply not such a node).
const char* why_not_nop(const Model& m, const Graph& g, const Node& n, std::string& why) {
  if (live_outputs(n) != 1 || !n.inputs[0] || !n.outputs[0]) return kNotMine;
  const std::string& op = n.op_type.value;
  if (op == "Reshape") return reshape_nop(m, g, n, why);
  if (op == "Expand") return expand_nop(n, why);
  if (op == "Slice") return slice_nop(m, g, n, why);
  if (op == "Pad") return pad_nop(m, g, n, why);
  if (op == "Tile") return tile_nop(n, why);
  if (op == "Resize" || op == "Upsample") return resize_nop(m, g, n, why);
  if (op == "ReduceSum" || op == "ReduceMean" || op == "ReduceMax" || op == "ReduceMin" || op == "ReduceProd")
    return reduce_nop(m, g, n, why);
  return attribute_nop(n);
}

// ---- round trips: two nodes that undo each other ----

// The axes of a Squeeze or Unsqueeze; Squeeze without them drops every 1,
// which needs the input's shape. An empty axes input is read that way too:
// runtimes differ on it, and where the input has no 1 both readings agree.
const char* axes_of(const Model& m, const Graph& g, const Node& n, std::vector<int64_t>& axes, std::string& why) {
  IntList list = int_list(m, g, n, "axes", 1, 13);
  if (list.why) return not_constant(why, "axes", n, 1, list.why);
  const bool squeeze = n.op_type.value == "Squeeze";
  if (list.present && !(squeeze && list.values.empty())) {
    axes = list.values;
    return nullptr;
  }
  if (!squeeze) return kNotMine;
  auto shape = known_shape(n.inputs[0]);
  if (!shape || !fully_static(*shape)) return "Squeeze without axes and its input shape not fully known";
  axes.clear();
  for (size_t i = 0; i < shape->size(); ++i)
    if ((*shape)[i] == 1) axes.push_back(static_cast<int64_t>(i));
  return nullptr;
}

// Squeeze then Unsqueeze (or the reverse) over the same axes. Both lists
// index the same rank: the input's for Squeeze first, the middle value's
// for Unsqueeze first.
const char* squeeze_pair(const Model& m, const Graph& g, const Node& first, const Node& second, std::string& why) {
  std::vector<int64_t> a1, a2;
  if (const char* r = axes_of(m, g, first, a1, why)) return r;
  if (const char* r = axes_of(m, g, second, a2, why)) return r;
  auto shape = known_shape(first.inputs[0]);
  int64_t rank = -1;
  if (shape) rank = static_cast<int64_t>(shape->size() + (first.op_type.value == "Unsqueeze" ? a1.size() : 0));
  for (auto* axes : {&a1, &a2}) {
    if (rank >= 0) {
      for (int64_t& a : *axes) {
        if (a < -rank || a >= rank) return kNotMine;
        if (a < 0) a += rank;
      }
    }
    std::sort(axes->begin(), axes->end());
    if (std::adjacent_find(axes->begin(), axes->end()) != axes->end()) return kNotMine;
  }
  if (a1 == a2) return nullptr;
  const bool negative = std::any_of(a1.begin(), a1.end(), [](int64_t a) { return a < 0; }) ||
                        std::any_of(a2.begin(), a2.end(), [](int64_t a) { return a < 0; });
  return rank < 0 && negative ? "axes compare only with the rank, which is unknown" : kNotMine;
}

// Cast to a type and back: exact, or lossy and removed only when allowed.
const char* cast_pair(const Node& first, const Node& second, const PassOptions& options, std::string& why) {
  const int32_t from = known_elem_type(first.inputs[0]);
  const int32_t via = static_cast<int32_t>(int_attribute(first, "to", 0));
  const int32_t back = static_cast<int32_t>(int_attribute(second, "to", 0));
  if (!via || !back) return kNotMine;
  if (!from) return "type of the first Cast's input unknown";
  if (back != from) return kNotMine;
  switch (cast_round_trip(from, via)) {
    case RoundTrip::kExact:
      return nullptr;
    case RoundTrip::kNotPrecision:
      return kNotMine;
    case RoundTrip::kLossy:
      if (options.allow_lossy) return nullptr;
      why = std::string("lossy Cast round trip ") + dtype_name(from) + " -> " + dtype_name(via) + " -> " +
            dtype_name(from) + ": removed only with --allow-lossy";
      return why.c_str();
  }
  return kNotMine;
}

const char* round_trip(const Model& m, const Graph& g, const Node& first, const Node& second,
                       const PassOptions& options, std::string& why) {
  const std::string &a = first.op_type.value, &b = second.op_type.value;
  if ((a == "Squeeze" && b == "Unsqueeze") || (a == "Unsqueeze" && b == "Squeeze"))
    return squeeze_pair(m, g, first, second, why);
  if (a == "Cast" && b == "Cast") return cast_pair(first, second, options, why);
  return kNotMine;
}

// The node whose only output `second` reads as its first input, when both
// are single-output standard nodes of the kinds that pair up.
Node* pair_head(const Node& second) {
  if (second.inputs.empty() || !second.inputs[0] || live_outputs(second) != 1 || !second.outputs[0]) return nullptr;
  Node* first = second.inputs[0]->producer;
  if (!first || first->removed || second.inputs[0]->producer_index != 0) return nullptr;
  if (!is_standard_domain(first->domain.value) || first->inputs.empty() || !first->inputs[0]) return nullptr;
  return live_outputs(*first) == 1 ? first : nullptr;
}

// Readers of the second node read the first's input; the first goes too
// when nothing else reads it. Appends to `stats`.
void remove_round_trips(Model& model, const PassOptions& options, PassStats& stats) {
  std::string why;
  for (Graph* g : model.all_graphs()) {
    std::vector<Node*> candidates;  // removal edits the node list: collect first
    for (Node* n : g->nodes)
      if (is_standard_domain(n->domain.value)) candidates.push_back(n);
    for (Node* second : candidates) {
      Node* first = second->removed ? nullptr : pair_head(*second);
      if (!first) continue;
      const char* reason = round_trip(model, *g, *first, *second, options, why);
      if (reason == kNotMine) continue;
      const std::string label = first->display_name() + " -> " + second->display_name();
      if (!reason && first->pinned) reason = "excluded from optimization";
      if (!reason) reason = bypass(*g, second, first->inputs[0], second->outputs[0]);
      if (reason) {
        stats.refused.push_back(label + ": " + reason);
        continue;
      }
      Rewrite rewrite{"bypassed", {second->name.value}, {}};
      stats.removed.push_back(second->display_name());
      ++stats.nodes_removed;
      const Value* middle = first->outputs[0];
      if (first->graph == g && middle->uses.empty() && !middle->is_graph_output()) {
        rewrite.consumed.insert(rewrite.consumed.begin(), first->name.value);
        stats.removed.push_back(first->display_name());
        ++stats.nodes_removed;
        g->remove_node(first);
      }
      stats.rewrites.push_back(std::move(rewrite));
    }
  }
}

// A Cast of a Cast whose middle type holds every value of the input's
// (bool -> int32 -> int64, float16 -> float32 -> int32): the second Cast
// converts the same value either way, so it reads the input itself. Not
// into string, whose text may spell the value by the type it had.
void merge_exact_cast_chains(Model& model, PassStats& stats) {
  for (Graph* g : model.all_graphs()) {
    std::vector<Node*> casts;
    for (Node* n : g->nodes)
      if (is_standard_domain(n->domain.value) && n->op_type.value == "Cast") casts.push_back(n);
    for (Node* second : casts) {
      Node* first = second->removed ? nullptr : pair_head(*second);
      if (!first || first->op_type.value != "Cast" || first->pinned || second->pinned || first->graph != g ||
          first->outputs[0]->uses.size() != 1 || first->outputs[0]->is_graph_output())
        continue;  // a middle value read elsewhere stays: merging would save nothing
      const int32_t from = known_elem_type(first->inputs[0]);
      const int32_t via = static_cast<int32_t>(int_attribute(*first, "to", 0));
      const int32_t to = static_cast<int32_t>(int_attribute(*second, "to", 0));
      if (!from || !via || !to || to == from || to == 8 || cast_round_trip(from, via) != RoundTrip::kExact) continue;
      g->set_input(second, 0, first->inputs[0]);
      stats.rewrites.push_back(Rewrite{"merged exact casts", {first->name.value}, {second->name.value}});
      stats.removed.push_back(first->display_name());
      ++stats.nodes_removed;
      g->remove_node(first);
    }
  }
}

}  // namespace

PassStats EliminateNop::run(Model& model, const PassOptions& options) const {
  // One removal can settle another (a Squeeze pair gone, the Cast after it
  // sees a typed input): sweep until a sweep changes nothing, and report
  // that sweep's refusals, which are about the graph as it is left.
  PassStats stats;
  std::string why;
  for (;;) {
    PassStats sweep = bypass_where(model, [&why](const Model& m, const Graph& g, const Node& n) {
      return why_not_nop(m, g, n, why);
    });
    remove_round_trips(model, options, sweep);
    merge_exact_cast_chains(model, sweep);
    stats.refused = std::move(sweep.refused);
    if (!sweep.nodes_removed) return stats;
    stats.nodes_removed += sweep.nodes_removed;
    for (auto& r : sweep.removed) stats.removed.push_back(std::move(r));
    for (auto& r : sweep.rewrites) stats.rewrites.push_back(std::move(r));
  }
}

}  // namespace pyonnxopt::passes
