#include "passes/eliminate_dropout.h"

#include "passes/bypass.h"

namespace pyonnxopt::passes {
namespace {

using namespace ir;

// The default-domain opset the graph's nodes follow: the model's, or the
// function's when the graph is (inside) a function body.
int64_t default_opset(const Model& m, const Graph& g) {
  const Graph* root = &g;
  while (root->parent) root = root->parent;
  const std::vector<OpsetId>* imports = &m.opset_import;
  for (const auto& f : m.functions)
    if (f->body.get() == root) imports = &f->opset_import;
  for (const auto& o : *imports)
    if (is_standard_domain(o.domain.value) && o.domain.value != "ai.onnx.ml") return o.version.value;
  return 0;
}

bool is_constant_false(const Value* v) {
  const Tensor* t = v ? v->initializer : nullptr;
  if (!t || t->data_type.value != 9 || v->is_graph_input) return false;  // a graph input can be fed
  uint64_t numel = 1;
  for (int64_t d : t->dims) numel *= static_cast<uint64_t>(d);
  if (numel != 1) return false;
  if (const Blob* b = t->raw_payload()) return b->length == 1 && b->data()[0] == 0;
  return t->int32_data.size() == 1 && t->int32_data[0] == 0;
}

const char* training_mode_reason(const Model& m, const Graph& g, const Node& n) {
  const int64_t opset = default_opset(m, g);
  if (opset > 0 && opset < 7) {
    for (const auto& a : n.attributes)
      if (a.name.value == "is_test" && a.i.value != 0) return nullptr;
    return "training mode: is_test is not 1 (training residue)";
  }
  if (n.inputs.size() >= 3 && n.inputs[2] && !is_constant_false(n.inputs[2]))
    return "training_mode is not a constant false (training residue)";
  return nullptr;
}

}  // namespace

PassStats EliminateDropout::run(Model& model) const {
  PassStats stats;
  for (Graph* g : model.all_graphs()) {
    std::vector<Node*> dropouts;
    for (Node* n : g->nodes)
      if (n->op_type.value == "Dropout" && is_standard_domain(n->domain.value) && !n->inputs.empty() &&
          !n->outputs.empty())
        dropouts.push_back(n);
    for (Node* n : dropouts) {
      const std::string label = n->display_name();
      const char* why = training_mode_reason(model, *g, *n);
      if (!why && n->outputs.size() > 1 && n->outputs[1] &&
          (!n->outputs[1]->uses.empty() || n->outputs[1]->is_graph_output()))
        why = "its mask output is read";
      if (!why) why = bypass(*g, n, n->inputs[0], n->outputs[0]);
      if (why) {
        stats.refused.push_back(label + ": " + why);
        continue;
      }
      stats.removed.push_back(label);
      ++stats.nodes_removed;
    }
  }
  return stats;
}

}  // namespace pyonnxopt::passes
