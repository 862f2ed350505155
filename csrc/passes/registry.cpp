#include "passes/pass.h"

#include "passes/collapse_reshapes.h"
#include "passes/eliminate_common_subexpressions.h"
#include "passes/eliminate_dead_code.h"
#include "passes/eliminate_dropout.h"
#include "passes/eliminate_identity.h"
#include "passes/eliminate_nop.h"
#include "passes/fold_constants.h"
#include "passes/optimize_transposes.h"
#include "passes/simplify_algebra.h"

namespace pyonnxopt::passes {

const std::vector<std::unique_ptr<Pass>>& registry() {
  static const std::vector<std::unique_ptr<Pass>> kPasses = [] {
    std::vector<std::unique_ptr<Pass>> v;
    v.push_back(std::make_unique<EliminateIdentity>());
    v.push_back(std::make_unique<EliminateDropout>());
    v.push_back(std::make_unique<EliminateNop>());
    v.push_back(std::make_unique<SimplifyAlgebra>());
    v.push_back(std::make_unique<FoldConstants>());
    v.push_back(std::make_unique<OptimizeTransposes>());
    v.push_back(std::make_unique<RegroupTransposes>());
    v.push_back(std::make_unique<CollapseReshapes>());
    v.push_back(std::make_unique<EliminateCommonSubexpressions>());
    v.push_back(std::make_unique<EliminateDeadCode>());
    return v;
  }();
  return kPasses;
}

const Pass* find(std::string_view name) {
  for (const auto& p : registry())
    if (name == p->name()) return p.get();
  return nullptr;
}

bool is_standard_domain(std::string_view d) { return d.empty() || d == "ai.onnx" || d == "ai.onnx.ml"; }

int64_t default_opset(const ir::Model& m, const ir::Graph& g) {
  const ir::Graph* root = &g;
  while (root->parent) root = root->parent;
  const std::vector<ir::OpsetId>* imports = &m.opset_import;
  for (const auto& f : m.functions)
    if (f->body.get() == root) imports = &f->opset_import;
  for (const auto& o : *imports)
    if ((o.domain.value.empty() || o.domain.value == "ai.onnx")) return o.version.value;
  return 0;
}

}  // namespace pyonnxopt::passes
