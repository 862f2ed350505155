#include "passes/eliminate_identity.h"

#include "passes/bypass.h"

namespace pyonnxopt::passes {

PassStats EliminateIdentity::run(ir::Model& model, const PassOptions&) const {
  return bypass_where(model, [](const ir::Model&, const ir::Graph&, const ir::Node& n) -> const char* {
    bool identity = n.op_type.value == "Identity" && n.inputs.size() == 1 && n.outputs.size() == 1;
    return identity ? nullptr : kNotMine;
  });
}

}  // namespace pyonnxopt::passes
