// A Concat whose readers take it apart again:
//   c = Concat<axis=k>(a, b)
//   s = Slice(c, [size_a], [size_a + size_b], [k])   -> readers of s read b
//   p, q = Split<axis=k>(c, [size_a, size_b])        -> readers of p and q read a and b
// Each Slice and Split that selects exactly the inputs' ranges goes; the
// Concat goes when nothing reads it any more. The inputs' sizes along the
// axis must be known.
#include <algorithm>
#include <optional>

#include "passes/bypass.h"
#include "passes/known_values.h"
#include "passes/new_values.h"
#include "passes/simplify_algebra/rules.h"

namespace pyonnxopt::passes::algebra {

using namespace ir;

namespace {

// Where each Concat input lies along the axis.
struct Parts {
  int64_t axis = 0, rank = 0, total = 0;
  std::vector<int64_t> offsets, sizes;
};

const char* parts_of(const Context& ctx, const Graph& g, const Node& concat, Parts& out) {
  const Attribute* axis = concat.attribute("axis");
  if (!axis && ctx.opset(g) >= 4) return kNotMine;  // required from Concat-4; malformed
  out.axis = axis ? axis->i.value : 1;
  out.rank = -1;
  for (const Value* v : concat.inputs) {
    auto dims = v ? dims_of(v) : std::nullopt;
    if (!dims) return "input shapes unknown";
    if (out.rank >= 0 && static_cast<int64_t>(dims->size()) != out.rank) return kNotMine;
    out.rank = static_cast<int64_t>(dims->size());
    if (out.axis < -out.rank || out.axis >= out.rank) return kNotMine;
    const int64_t size = (*dims)[out.axis < 0 ? out.axis + out.rank : out.axis];
    if (size == kUnknownDim) return "input sizes along the axis unknown";
    out.offsets.push_back(out.total);
    out.sizes.push_back(size);
    out.total += size;
  }
  if (out.axis < 0) out.axis += out.rank;
  return nullptr;
}

// The input whose range `slice` selects (one axis, step 1), as `which`.
const char* sliced_part(Context& ctx, const Node& slice, const Parts& parts, size_t& which) {
  const Graph& sg = *slice.graph;
  IntList starts = int_list(ctx.model, sg, slice, "starts", 1, 10), ends = int_list(ctx.model, sg, slice, "ends", 2, 10);
  IntList axes = int_list(ctx.model, sg, slice, "axes", 3, 10), steps = int_list(ctx.model, sg, slice, "steps", 4, 10);
  const char* names[] = {"starts", "ends", "axes", "steps"};
  const IntList* lists[] = {&starts, &ends, &axes, &steps};
  for (size_t k = 0; k < 4; ++k)
    if (lists[k]->why) return ctx.say(std::string(names[k]) + " " + lists[k]->why);
  for (const IntList* l : lists)
    if (l->present && l->values.size() != 1) return kNotMine;
  if (!starts.present || !ends.present) return kNotMine;
  int64_t axis = axes.present ? axes.values[0] : 0;
  if (axis < 0) axis += parts.rank;
  if (axis != parts.axis || (steps.present && steps.values[0] != 1)) return kNotMine;
  const int64_t total = parts.total;
  auto clamp = [total](int64_t i) { return std::clamp(i < 0 ? i + total : i, int64_t{0}, total); };
  const int64_t start = clamp(starts.values[0]), end = clamp(ends.values[0]);
  for (which = 0; which < parts.sizes.size(); ++which)
    if (parts.offsets[which] == start && parts.offsets[which] + parts.sizes[which] == end) return nullptr;
  return kNotMine;
}

// The sizes a Split cuts its input into: given, or equal parts.
const char* split_sizes(Context& ctx, const Node& split, int64_t total, std::vector<int64_t>& sizes) {
  const Graph& sg = *split.graph;
  IntList given = int_list(ctx.model, sg, split, "split", 1, 13);
  if (given.why) return ctx.say(std::string("split ") + given.why);
  if (given.present) {
    sizes = given.values;
    return nullptr;
  }
  const int64_t n = static_cast<int64_t>(split.outputs.size());
  if (ctx.opset(sg) >= 18) {  // num_outputs: equal parts, the last one smaller
    const int64_t chunk = (total + n - 1) / n;
    for (int64_t i = 0; i < n; ++i) sizes.push_back(std::clamp(total - i * chunk, int64_t{0}, chunk));
    return nullptr;
  }
  if (total % n) return kNotMine;
  sizes.assign(static_cast<size_t>(n), total / n);
  return nullptr;
}

const char* undo_slice(Context& ctx, Node& slice, const Node& concat, const Parts& parts) {
  size_t which = 0;
  if (const char* why = sliced_part(ctx, slice, parts, which)) return why;
  return ctx.bypass_node(*slice.graph, slice, concat.inputs[which]);
}

const char* undo_split(Context& ctx, Node& split, const Node& concat, const Parts& parts) {
  const Attribute* axis_attr = split.attribute("axis");
  int64_t axis = axis_attr ? axis_attr->i.value : 0;
  if (axis < 0) axis += parts.rank;
  if (axis != parts.axis || split.outputs.size() != concat.inputs.size()) return kNotMine;
  std::vector<int64_t> sizes;
  if (const char* why = split_sizes(ctx, split, parts.total, sizes)) return why;
  if (sizes != parts.sizes) return kNotMine;
  if (split.pinned) return "excluded from optimization";
  Graph& sg = *split.graph;
  for (size_t j = 0; j < split.outputs.size(); ++j) {
    const Value* out = split.outputs[j];
    if (!out) continue;
    if (out->is_graph_output()) return ctx.say("output '" + out->name + "' is a graph output");
    if (const char* why = why_not_reroute(sg, concat.inputs[j], out)) return why;
  }
  for (size_t j = 0; j < split.outputs.size(); ++j)
    if (split.outputs[j]) sg.replace_all_uses(split.outputs[j], concat.inputs[j]);
  ctx.stats->rewrites.push_back({"bypassed", {node_id(split)}, {}});
  ctx.count_removed(split);
  sg.remove_node(&split);
  return nullptr;
}

// Concat's axis, made non-negative where the rank is known; nullopt when
// the attribute is missing.
std::optional<int64_t> concat_axis(const Node& n) {
  const Attribute* a = n.attribute("axis");
  if (!a) return std::nullopt;
  int64_t axis = a->i.value;
  if (axis < 0 && !n.outputs.empty() && n.outputs[0])
    if (auto dims = dims_of(n.outputs[0])) axis += static_cast<int64_t>(dims->size());
  return axis;
}

}  // namespace

const char* undo_concat(Context& ctx, Graph& g, Node& concat) {
  if (concat.op_type.value != "Concat" || concat.inputs.empty()) return kNotMine;
  Value* c = single_output(concat);
  if (!c) return kNotMine;
  std::vector<Node*> readers;
  for (const Use& u : c->uses) {
    const std::string& op = u.node->op_type.value;
    if (u.index == 0 && (op == "Slice" || op == "Split") && is_standard_domain(u.node->domain.value) &&
        std::find(readers.begin(), readers.end(), u.node) == readers.end())
      readers.push_back(u.node);
  }
  if (readers.empty()) return kNotMine;
  Parts parts;
  if (const char* why = parts_of(ctx, g, concat, parts)) return why;
  const std::string id = node_id(concat);
  bool changed = false;
  for (Node* r : readers) {
    if (r->outputs.empty()) continue;
    const char* why = r->op_type.value == "Slice" ? undo_slice(ctx, *r, concat, parts) : undo_split(ctx, *r, concat, parts);
    if (!why) changed = true;
    else if (why != kNotMine) ctx.refuse(*r, why);
  }
  if (changed && ctx.remove_if_unread(g, &concat)) ctx.stats->rewrites.back().consumed.push_back(id);
  return changed ? nullptr : kNotMine;
}

// A Concat reading Concats of the same axis, each read only by such Concats,
// takes their inputs in their place:
//   c = Concat<axis=k>(a, Concat<axis=k>(b, d), e)  ->  c = Concat<axis=k>(a, b, d, e)
// (torchvision's Resize sizes: Concat(Slice(Shape(x)), Concat(h, w)); RAFT's
// update block, whose inner Concat two Concats read). The inner one goes
// when its last reader has taken it.
const char* flatten_concat(Context& ctx, Graph& g, Node& outer) {
  if (outer.op_type.value != "Concat" || !single_output(outer)) return kNotMine;
  const std::optional<int64_t> axis = concat_axis(outer);
  if (!axis) return kNotMine;
  auto read_by_such_concats = [&](const Value* v) {
    for (const auto& use : v->uses) {
      const Node& r = *use.node;
      if (r.graph != &g || r.op_type.value != "Concat" || r.domain.value != outer.domain.value ||
          concat_axis(r) != axis || r.pinned)
        return false;
    }
    return !v->is_graph_output();
  };
  std::vector<Value*> inputs;
  std::vector<Node*> merged;
  for (Value* v : outer.inputs) {
    Node* p = v ? v->producer : nullptr;
    const bool inner = p && p->graph == &g && p->op_type.value == "Concat" && p->domain.value == outer.domain.value &&
                       concat_axis(*p) == axis && single_output(*p) == v && read_by_such_concats(v) && !p->pinned;
    if (inner) {
      inputs.insert(inputs.end(), p->inputs.begin(), p->inputs.end());
      merged.push_back(p);
    } else {
      inputs.push_back(v);
    }
  }
  if (merged.empty()) return kNotMine;
  if (outer.pinned) return "excluded from optimization";
  Node* flat = g.new_node();
  flat->op_type.set("Concat");
  if (outer.name.has) flat->name = outer.name;
  flat->domain = outer.domain;
  flat->inputs = std::move(inputs);
  flat->attributes.push_back(int_attribute("axis", outer.attribute("axis")->i.value));
  Rewrite record{"merged concats", {}, {node_id(outer)}};
  std::vector<std::string> merged_ids;
  for (Node* p : merged) merged_ids.push_back(node_id(*p));
  const std::string outer_id = node_id(outer);
  ctx.count_removed(outer);
  g.replace_node(&outer, flat);
  ++ctx.stats->nodes_added;
  for (size_t i = 0; i < merged.size(); ++i)
    if (ctx.remove_if_unread(g, merged[i])) record.consumed.push_back(merged_ids[i]);
  record.consumed.push_back(outer_id);
  ctx.stats->rewrites.push_back(std::move(record));
  return nullptr;
}

}  // namespace pyonnxopt::passes::algebra
