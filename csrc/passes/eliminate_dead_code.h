// eliminate_dead_code: drops what no graph output depends on.
//
//   graph(x) -> (y) { a = Relu(x); b = Neg(x); y = Abs(a) }   // b is dead
//   graph(x) -> (y) { a = Relu(x); y = Abs(a) }
//
// Removes, in every graph (If/Loop/Scan bodies and function bodies too):
// nodes none of whose outputs is read or is a graph output; initializers
// nothing reads (unless also listed as graph inputs); value_info entries for
// values that no longer exist; local functions no graph calls.
// Refuses to remove:
//   1. nodes of non-standard domains that are not local functions (custom ops
//      may have side effects the graph does not show);
//   2. anything named by a graph input or output (names and order are kept).
#pragma once

#include "passes/pass.h"

namespace pyonnxopt::passes {

class EliminateDeadCode : public Pass {
 public:
  const char* name() const override { return "eliminate_dead_code"; }
  const char* description() const override {
    return "remove nodes, initializers, value_info and local functions that no output depends on";
  }
  PassStats run(ir::Model& model, const PassOptions& options) const override;
};

}  // namespace pyonnxopt::passes
