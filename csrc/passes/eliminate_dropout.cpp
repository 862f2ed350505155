#include "passes/eliminate_dropout.h"

#include "passes/bypass.h"

namespace pyonnxopt::passes {
namespace {

using namespace ir;

constexpr const char* kTrainingDomain = "ai.onnx.preview.training";

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
    if (const Attribute* is_test = n.attribute("is_test"); is_test && is_test->i.value != 0) return nullptr;
    return "training mode: is_test is not 1 (training residue: removed with --remove-training-residue)";
  }
  if (n.inputs.size() >= 3 && n.inputs[2] && !is_constant_false(n.inputs[2]))
    return "training_mode is not a constant false (training residue: removed with --remove-training-residue)";
  return nullptr;
}

bool is_read(const Value* v) { return v && (!v->uses.empty() || v->is_graph_output()); }

// Gradient, Momentum, Adagrad, Adam: the optimizer steps of a training
// graph. Nothing at inference reads them; they go when nothing does.
const char* keep_training_op(const Node& n, const PassOptions& options) {
  if (!options.remove_training_residue) return "training residue: removed with --remove-training-residue";
  if (n.pinned) return "excluded from optimization";
  for (const Value* out : n.outputs)
    if (is_read(out)) return "training residue whose outputs are read";
  return nullptr;
}

void remove_training_ops(Model& model, const PassOptions& options, PassStats& stats) {
  for (Graph* g : model.all_graphs()) {
    std::vector<Node*> left;  // removal edits the node list: collect first
    for (Node* n : g->nodes)
      if (n->domain.value == kTrainingDomain) left.push_back(n);
    // Readers first (Adam reads Gradient), until a round removes nothing.
    for (bool changed = true; changed;) {
      changed = false;
      for (auto it = left.rbegin(); it != left.rend(); ++it) {
        Node* n = *it;
        if (!n || keep_training_op(*n, options)) continue;
        stats.removed.push_back(n->display_name());
        stats.rewrites.push_back({"removed", {n->name.value}, {}});
        ++stats.nodes_removed;
        g->remove_node(n);
        *it = nullptr;
        changed = true;
      }
    }
    for (Node* n : left)
      if (n) stats.refused.push_back(n->display_name() + ": " + keep_training_op(*n, options));
  }
}

}  // namespace

PassStats EliminateDropout::run(Model& model, const PassOptions& options) const {
  PassStats stats = bypass_where(model, [&options](const Model& m, const Graph& g, const Node& n) -> const char* {
    if (n.op_type.value != "Dropout") return kNotMine;
    if (!options.remove_training_residue)
      if (const char* why = training_mode_reason(m, g, n)) return why;
    if (n.outputs.size() > 1 && is_read(n.outputs[1])) return "its mask output is read";
    return nullptr;
  });
  remove_training_ops(model, options, stats);
  return stats;
}

}  // namespace pyonnxopt::passes
