#include "passes/simplify_algebra/context.h"

#include "passes/bypass.h"
#include "passes/known_values.h"
#include "passes/new_values.h"

namespace pyonnxopt::passes::algebra {

using namespace ir;

Context::Context(Model& m) : model(m) {
  for (const Graph* g : model.all_graphs())
    for (const Value* v : g->values()) names_.insert(v->name);
}

const char* Context::say(std::string reason) {
  why_ = std::move(reason);
  return why_.c_str();
}

void Context::refuse(const Node& n, const std::string& reason) { stats->refused.push_back(n.display_name() + ": " + reason); }

void Context::count_removed(const Node& n) {
  stats->removed.push_back(n.display_name());
  ++stats->nodes_removed;
}

std::string Context::fresh_name(const std::string& base) {
  std::string name = base;
  for (int k = 2; names_.count(name); ++k) name = base + "_" + std::to_string(k);
  names_.insert(name);
  return name;
}

Value* Context::add_constant(Graph& g, Node* before, const std::string& base, const fold::Array& a) {
  const bool as_node = g.is_function_body || (model.ir_version.has && model.ir_version.value < 4);
  if (as_node && opset(g) < 9 && !is_floating(a.dtype)) {
    say(std::string("a Constant before opset 9 cannot hold ") + dtype_name(a.dtype));
    return nullptr;
  }
  bool added_node = false;
  Value* v = passes::add_constant(model, g, fold::to_tensor(a), fresh_name(base), before, added_node);
  stats->nodes_added += added_node;
  return v;
}

const char* Context::bypass_node(Graph& g, Node& n, Value* in) {
  const std::string label = n.display_name(), id = node_id(n);
  if (const char* why = bypass(g, &n, in, n.outputs[0])) return why;
  stats->removed.push_back(label);
  ++stats->nodes_removed;
  stats->rewrites.push_back({"bypassed", {id}, {}});
  return nullptr;
}

bool Context::remove_if_unread(Graph& g, Node* n) {
  if (n->removed || n->pinned || n->graph != &g) return false;
  for (const Value* o : n->outputs)
    if (o && (!o->uses.empty() || o->is_graph_output())) return false;
  count_removed(*n);
  g.remove_node(n);
  return true;
}

bool read_constant(const Value* v, fold::Array& out) {
  const Tensor* t = known_constant(v);
  std::string why;
  return t && fold::to_array(*t, out, why);
}

Value* single_output(const Node& n) {
  if (n.outputs.empty() || !n.outputs[0]) return nullptr;
  for (size_t i = 1; i < n.outputs.size(); ++i)
    if (n.outputs[i]) return nullptr;
  return n.outputs[0];
}

Node* producer_in(const Graph& g, const Value* v) {
  Node* p = v ? v->producer : nullptr;
  if (!p || p->removed || p->graph != &g || v->producer_index != 0) return nullptr;
  if (!is_standard_domain(p->domain.value) || p->domain.value == "ai.onnx.ml") return nullptr;
  return single_output(*p) == v ? p : nullptr;
}

std::optional<std::vector<int64_t>> dims_of(const Value* v) {
  if (const Tensor* t = known_constant(v)) return t->dims;
  return known_shape(v);
}

bool read_once(const Value* v) { return v->uses.size() == 1 && !v->is_graph_output(); }

const char* keeps_shape(Context& ctx, const std::vector<int64_t>& dims, const Value* x, const std::string& what) {
  auto shape = dims_of(x);
  if (!shape) {
    if (dims.empty()) return nullptr;  // a scalar broadcasts to any shape unchanged
    return ctx.say(what + " has rank " + std::to_string(dims.size()) + " and the input's rank is unknown");
  }
  if (dims.size() > shape->size()) return ctx.say(what + " has more axes than the input: the result would too");
  const size_t offset = shape->size() - dims.size();
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t o = dims[i], d = (*shape)[offset + i];
    if (o == 1) continue;
    if (o == kUnknownDim) {
      // A valid model pairs it with d or 1 there: unchanged unless d may be 1.
      if (d == kUnknownDim || d == 1) return ctx.say(what + "'s dims are unknown where the input's are unknown or 1");
      continue;
    }
    if (d == kUnknownDim) return ctx.say("input dims unknown where " + what + "'s are not 1");
    if (o != d) return ctx.say(what + " broadcasts the input to another shape");
  }
  return nullptr;
}

bool is_floating(int32_t dtype) { return dtype == fold::kFloat || dtype == fold::kDouble || dtype == fold::kFloat16; }

}  // namespace pyonnxopt::passes::algebra
