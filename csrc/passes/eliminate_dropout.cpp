#include "passes/eliminate_dropout.h"

#include "passes/bypass.h"

namespace pyonnxopt::passes {
namespace {

using namespace ir;

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

PassStats EliminateDropout::run(Model& model, const PassOptions&) const {
  return bypass_where(model, [](const Model& m, const Graph& g, const Node& n) -> const char* {
    if (n.op_type.value != "Dropout") return kNotMine;
    if (const char* why = training_mode_reason(m, g, n)) return why;
    const Value* mask = n.outputs.size() > 1 ? n.outputs[1] : nullptr;
    if (mask && (!mask->uses.empty() || mask->is_graph_output())) return "its mask output is read";
    return nullptr;
  });
}

}  // namespace pyonnxopt::passes
