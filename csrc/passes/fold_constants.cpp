#include "passes/fold_constants.h"

#include <algorithm>
#include <unordered_map>

#include "fold/kernels.h"

namespace pyonnxopt::passes {

using namespace ir;
using fold::Array;

namespace {

// The constants of one graph scope, read once and cached.
class Constants {
 public:
  // The value's data when it is a constant the kernels can read, else nullptr.
  const Array* find(const Value* v) {
    auto it = cache_.find(v);
    if (it != cache_.end()) return it->second.dtype ? &it->second : nullptr;
    Array& a = cache_[v];
    std::string why;
    const Tensor* t = source(v);
    if (!t || !fold::to_array(*t, a, why)) a = Array{};
    return a.dtype ? &a : nullptr;
  }
  void forget(const Value* v) { cache_.erase(v); }

 private:
  static const Tensor* source(const Value* v) {
    if (v->initializer && !v->is_graph_input) return v->initializer;
    const Node* p = v->producer;
    if (!p || p->op_type.value != "Constant" || !p->domain.value.empty() || p->attributes.size() != 1) return nullptr;
    const Attribute& a = p->attributes[0];
    return a.name.value == "value" ? a.t.get() : nullptr;
  }
  std::unordered_map<const Value*, Array> cache_;
};

bool is_read(const Value* v) { return v && (!v->uses.empty() || v->is_graph_output()); }

// Constant node -> initializer (same name), where initializers are allowed.
bool constant_to_initializer(Graph& g, Node* n, Constants& constants) {
  if (n->outputs.size() != 1 || !n->outputs[0] || n->attributes.size() != 1) return false;
  Attribute& a = n->attributes[0];
  if (a.name.value != "value" || !a.t) return false;  // value_float, value_ints, sparse_value: left as they are
  Value* v = n->outputs[0];
  constants.forget(v);
  std::unique_ptr<Tensor> t = std::move(a.t);
  g.set_constant(v, std::move(t), false);
  return true;
}

}  // namespace

PassStats FoldConstants::run(Model& model, const PassOptions& options) const {
  PassStats stats;
  const bool old_ir = model.ir_version.has && model.ir_version.value < 4;
  for (Graph* g : model.all_graphs()) {
    const bool as_nodes = g->is_function_body || old_ir;
    const int64_t opset = default_opset(model, *g);
    Constants constants;
    for (Node* n : g->topological_order()) {
      if (!is_standard_domain(n->domain.value) || n->domain.value == "ai.onnx.ml" || n->has_subgraphs()) continue;
      const std::string& op = n->op_type.value;
      if (!std::any_of(n->outputs.begin(), n->outputs.end(), is_read)) continue;
      if (op == "Constant") {
        const std::string id = node_id(*n), out = n->outputs[0] ? n->outputs[0]->name : "";
        if (!as_nodes && !n->pinned && constant_to_initializer(*g, n, constants)) {
          ++stats.nodes_removed;
          stats.rewrites.push_back({"constant to initializer", {id}, {out}});
        }
        continue;
      }
      fold::Kernel kernel = fold::find_kernel(op);
      if (!kernel) continue;
      std::vector<const Array*> inputs;
      uint64_t input_bytes = 0;
      bool all_constant = true;
      for (const Value* v : n->inputs) {
        const Array* a = v ? constants.find(v) : nullptr;
        if (v && !a) {
          all_constant = false;
          break;
        }
        inputs.push_back(a);
        if (a) input_bytes += a->nbytes();
      }
      if (!all_constant) continue;
      const std::string label = n->display_name();
      if (n->pinned) {
        stats.refused.push_back(label + ": excluded from optimization");
        continue;
      }
      fold::KernelContext ctx{*n, opset, std::max<uint64_t>(options.fold_size_limit, input_bytes)};
      std::vector<Array> outputs;
      std::string why;
      fold::Status status;
      try {
        status = kernel(ctx, inputs, outputs, why);
      } catch (const std::exception&) {  // malformed attributes or data: leave the node to the fallback
        status = fold::Status::kUnsupported;
      }
      if (status == fold::Status::kTooBig) stats.refused.push_back(label + ": not folded: " + why);
      if (status != fold::Status::kDone) continue;
      if (outputs.size() < n->outputs.size())
        throw ModelError("kernel for " + op + " returned " + std::to_string(outputs.size()) + " outputs");
      Rewrite record{"folded", {node_id(*n)}, {}};
      const std::vector<Value*> outs = n->outputs;
      for (size_t i = 0; i < outs.size(); ++i) {
        if (!outs[i]) continue;
        record.produced.push_back(outs[i]->name);
        g->set_constant(outs[i], fold::to_tensor(outputs[i]), as_nodes);
      }
      ++stats.nodes_removed;
      if (as_nodes) stats.nodes_added += static_cast<int64_t>(record.produced.size());
      stats.rewrites.push_back(std::move(record));
    }
  }
  return stats;
}

}  // namespace pyonnxopt::passes
