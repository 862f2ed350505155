// Adjacent slices of one tensor's shape in a Concat are one slice:
//   Concat(Shape(x, 0, 1), Shape(x, 1, 2), c)  ->  Concat(Shape(x, 0, 2), c)
// and a Concat left with one input is that slice: Concat(Shape(x, 0, 1),
// Shape(x, 1, 2)) of a 2-d x is Shape(x). unsqueeze_into_gather turns the
// TorchScript exporter's per-dim reads, Unsqueeze(Gather(Shape(x), i), 0),
// into such slices (from opset 15, where Shape has start and end); the
// dynamo exporter writes them itself. x's rank must be known, to place
// negative and missing bounds. A slice read elsewhere too stays for that
// reader.
#include <algorithm>
#include <optional>

#include "passes/known_values.h"
#include "passes/new_values.h"
#include "passes/simplify_algebra/rules.h"

namespace pyonnxopt::passes::algebra {

using namespace ir;

namespace {

struct ShapeSlice {
  Value* x = nullptr;
  int64_t start = 0, end = 0, rank = 0;
};

// The slice of x's shape `v` is, bounds clamped into [0, rank] as Shape does.
std::optional<ShapeSlice> shape_slice(const Graph& g, const Value* v) {
  Node* p = producer_in(g, v);
  if (!p || p->op_type.value != "Shape" || p->pinned || p->inputs.size() != 1 || !p->inputs[0]) return std::nullopt;
  auto dims = known_shape(p->inputs[0]);
  if (!dims) return std::nullopt;
  ShapeSlice s{p->inputs[0], 0, static_cast<int64_t>(dims->size()), static_cast<int64_t>(dims->size())};
  auto place = [&s](int64_t i) { return std::clamp(i < 0 ? i + s.rank : i, int64_t{0}, s.rank); };
  if (const Attribute* a = p->attribute("start")) s.start = place(a->i.value);
  if (const Attribute* a = p->attribute("end")) s.end = place(a->i.value);
  if (s.end < s.start) s.end = s.start;
  return s;
}

Node* new_shape(Graph& g, const ShapeSlice& s) {
  Node* n = g.new_node();
  n->op_type.set("Shape");
  n->inputs.push_back(s.x);
  if (s.start != 0) n->attributes.push_back(int_attribute("start", s.start));
  if (s.end != s.rank) n->attributes.push_back(int_attribute("end", s.end));
  return n;
}

// Inputs [first, end) of a Concat that are adjacent slices of one shape.
struct Run {
  size_t first = 0, end = 0;
  ShapeSlice joined;
};

std::vector<Run> runs_of(const Graph& g, const Node& concat) {
  std::vector<Run> runs;
  const auto& in = concat.inputs;
  for (size_t i = 0; i < in.size();) {
    auto s = in[i] ? shape_slice(g, in[i]) : std::nullopt;
    size_t j = i + 1;
    for (; s && j < in.size(); ++j) {
      auto next = in[j] ? shape_slice(g, in[j]) : std::nullopt;
      if (!next || next->x != s->x || next->start != s->end) break;
      s->end = next->end;
    }
    if (j - i >= 2) runs.push_back({i, j, *s});
    i = j;
  }
  return runs;
}

}  // namespace

const char* join_shape_slices(Context& ctx, Graph& g, Node& n) {
  if (n.op_type.value != "Concat" || !single_output(n) || n.inputs.size() < 2) return kNotMine;
  const Attribute* axis = n.attribute("axis");
  if (!axis || (axis->i.value != 0 && axis->i.value != -1) || ctx.opset(g) < 15) return kNotMine;
  const std::vector<Run> runs = runs_of(g, n);
  if (runs.empty()) return kNotMine;
  if (n.pinned) return "excluded from optimization";

  Rewrite record{"joined shape slices", {node_id(n)}, {}};
  std::vector<Node*> sources;
  for (const Run& r : runs)
    for (size_t k = r.first; k < r.end; ++k) sources.push_back(n.inputs[k]->producer);
  Node* replacement = nullptr;
  if (runs.size() == 1 && runs[0].first == 0 && runs[0].end == n.inputs.size()) {
    replacement = new_shape(g, runs[0].joined);  // the whole Concat: the slice takes its output
  } else {
    std::vector<Value*> inputs;
    size_t at = 0;
    for (const Run& r : runs) {
      inputs.insert(inputs.end(), n.inputs.begin() + at, n.inputs.begin() + r.first);
      Node* joined = new_shape(g, r.joined);
      joined->outputs.push_back(g.create_value(ctx.fresh_name(single_output(n)->name + "_dims")));
      g.add_node(joined, &n);
      ++ctx.stats->nodes_added;
      record.produced.push_back(node_id(*joined));
      inputs.push_back(joined->outputs[0]);
      at = r.end;
    }
    inputs.insert(inputs.end(), n.inputs.begin() + at, n.inputs.end());
    replacement = g.new_node();
    replacement->op_type.set("Concat");
    replacement->domain = n.domain;
    replacement->inputs = std::move(inputs);
    replacement->attributes.push_back(int_attribute("axis", axis->i.value));
  }
  if (n.name.has) replacement->name = n.name;
  ctx.count_removed(n);
  g.replace_node(&n, replacement);
  ++ctx.stats->nodes_added;
  record.produced.push_back(node_id(*replacement));
  for (Node* p : sources) {
    const std::string id = node_id(*p);
    if (ctx.remove_if_unread(g, p)) record.consumed.push_back(id);
  }
  ctx.stats->rewrites.push_back(std::move(record));
  return nullptr;
}

}  // namespace pyonnxopt::passes::algebra
