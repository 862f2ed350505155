// A reduction that drops only axes of size 1 computes nothing:
//   ReduceSum/Mean/Max/Min/Prod(x, axes, keepdims=0) -> Squeeze(x, axes)
// where every reduced axis of x has size 1 (each output element is its one
// input element). hummingbird's tree ensembles sum their trees that way over
// an axis of one tree; collapse_reshapes then merges the Squeeze with the
// Reshape before it. With keepdims=1 the node is a no-op: eliminate_nop.
#include <algorithm>

#include "fold/array.h"
#include "fold/kernels.h"
#include "passes/known_values.h"
#include "passes/simplify_algebra/rules.h"

namespace pyonnxopt::passes::algebra {

using namespace ir;

namespace {

bool is_plain_reduce(const std::string& op) {
  return op == "ReduceSum" || op == "ReduceMean" || op == "ReduceMax" || op == "ReduceMin" || op == "ReduceProd";
}

// The reduced axes, each in [0, rank), when all are known to have size 1;
// else why not.
const char* unit_axes(Context& ctx, const Graph& g, const Node& n, std::vector<int64_t>& axes) {
  const int64_t since = n.op_type.value == "ReduceSum" ? 13 : 18;
  IntList list = int_list(ctx.model, g, n, "axes", 1, since);
  if (list.why) return ctx.say(std::string("axes ") + list.why);
  auto shape = known_shape(n.inputs[0]);
  if (!shape) return kNotMine;  // quietly: a reduction is rarely over axes of 1, a report full of these says nothing
  const int64_t rank = int64_t(shape->size());
  if (list.values.empty()) {
    if (fold::int_attribute(n, "noop_with_empty_axes", 0)) return kNotMine;  // returns its input: eliminate_nop
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  } else {
    for (int64_t a : list.values) {
      if (a < -rank || a >= rank) return kNotMine;
      axes.push_back(a < 0 ? a + rank : a);
    }
  }
  if (axes.empty()) return kNotMine;  // a scalar: nothing to squeeze (and runtimes read empty axes apart)
  std::vector<int64_t> sorted = axes;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) return kNotMine;  // Squeeze takes each once
  for (int64_t a : axes)
    if ((*shape)[size_t(a)] != 1) return kNotMine;  // a longer axis, or one of unknown size
  return nullptr;
}

}  // namespace

const char* reduce_to_squeeze(Context& ctx, Graph& g, Node& n) {
  if (!is_plain_reduce(n.op_type.value) || !single_output(n) || n.inputs.empty() || !n.inputs[0]) return kNotMine;
  if (fold::int_attribute(n, "keepdims", 1) != 0) return kNotMine;
  std::vector<int64_t> axes;
  if (const char* why = unit_axes(ctx, g, n, axes)) return why;
  if (n.pinned) return "excluded from optimization";
  const int64_t opset = ctx.opset(g);
  Value* list = nullptr;  // Squeeze takes its axes as an input from opset 13
  if (opset >= 13) {
    list = ctx.add_constant(g, &n, single_output(n)->name + "_axes",
                            fold::Array::of(fold::kInt64, {int64_t(axes.size())}, axes));
    if (!list) return ctx.reason();
  }
  Node* squeeze = g.new_node();
  squeeze->op_type.set("Squeeze");
  if (n.name.has) squeeze->name = n.name;
  squeeze->domain = n.domain;
  squeeze->inputs = {n.inputs[0]};
  if (list) {
    squeeze->inputs.push_back(list);
  } else {
    Attribute a;
    a.name.set("axes");
    a.type.set(int32_t(AttrType::kInts));
    a.ints = axes;
    squeeze->attributes.push_back(std::move(a));
  }
  Rewrite record{"replaced", {node_id(n)}, {}};
  ctx.count_removed(n);
  g.replace_node(&n, squeeze);
  ++ctx.stats->nodes_added;
  record.produced.push_back(node_id(*squeeze));
  ctx.stats->rewrites.push_back(std::move(record));
  return nullptr;
}

}  // namespace pyonnxopt::passes::algebra
