#include "passes/simplify_algebra.h"

#include "passes/bypass.h"
#include "passes/simplify_algebra/rules.h"

namespace pyonnxopt::passes {

using namespace ir;

namespace {

// Tried in this order on each node; the first that rewrites it wins.
constexpr algebra::Rule kRules[] = {
    algebra::remove_identity, algebra::shorten_unary_chain, algebra::bound_with_clip,
    algebra::merge_constants, algebra::undo_concat, algebra::flatten_concat, algebra::reduce_to_squeeze,
    algebra::join_shape_slices,
};

// One pass over every graph; the rules count what they change in `stats`.
void sweep(algebra::Context& ctx) {
  for (Graph* g : ctx.model.all_graphs()) {
    std::vector<Node*> candidates;  // rewrites edit the node list: collect first
    for (Node* n : g->nodes)
      if (is_standard_domain(n->domain.value) && n->domain.value != "ai.onnx.ml") candidates.push_back(n);
    for (Node* n : candidates) {
      if (n->removed) continue;  // an earlier rewrite took it
      const std::string label = n->display_name();
      std::vector<std::string> refused;
      bool rewritten = false;
      for (algebra::Rule rule : kRules) {
        const char* why = rule(ctx, *g, *n);
        if (why == kNotMine) continue;
        if (!why) {
          rewritten = true;
          break;
        }
        refused.push_back(label + ": " + why);
      }
      if (!rewritten)
        for (auto& r : refused) ctx.stats->refused.push_back(std::move(r));
    }
  }
}

}  // namespace

PassStats SimplifyAlgebra::run(Model& model, const PassOptions&) const {
  // One rewrite can enable another (Max -> Clip, then Min(Clip) -> Clip;
  // a merged constant that is all zeros): sweep until a sweep changes
  // nothing, and report that sweep's refusals, which are about the graph
  // as it is left.
  PassStats stats;
  algebra::Context ctx(model);
  for (;;) {
    PassStats one;
    ctx.stats = &one;
    sweep(ctx);
    stats.refused = std::move(one.refused);
    if (!one.modified()) return stats;
    stats.nodes_removed += one.nodes_removed;
    stats.nodes_added += one.nodes_added;
    for (auto& r : one.removed) stats.removed.push_back(std::move(r));
    for (auto& r : one.rewrites) stats.rewrites.push_back(std::move(r));
  }
}

}  // namespace pyonnxopt::passes
