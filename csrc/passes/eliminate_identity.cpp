#include "passes/eliminate_identity.h"

#include "passes/bypass.h"

namespace pyonnxopt::passes {

PassStats EliminateIdentity::run(ir::Model& model) const {
  PassStats stats;
  for (ir::Graph* g : model.all_graphs()) {
    std::vector<ir::Node*> identities;
    for (ir::Node* n : g->nodes)
      if (n->op_type.value == "Identity" && is_standard_domain(n->domain.value) && n->inputs.size() == 1 &&
          n->outputs.size() == 1)
        identities.push_back(n);
    for (ir::Node* n : identities) {
      std::string label = n->display_name();
      if (const char* why = bypass(*g, n, n->inputs[0], n->outputs[0])) {
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
