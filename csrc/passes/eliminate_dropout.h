// eliminate_dropout: Dropout that is a no-op at inference goes.
//
//   a = Relu(x); b = Dropout(a); y = Abs(b)   ->   a = Relu(x); y = Abs(a)
//
// A Dropout is an inference no-op when training_mode (opset >= 12) is absent
// or a constant false, and, before opset 7, when is_test=1. Refuses when:
//   1. it runs in training mode, or training_mode is not a constant (this is
//      training residue: reported, not removed);
//   2. its mask output is read or is a graph output;
//   3. bypassing it is refused (see bypass.h: graph-output names are kept).
#pragma once

#include "passes/pass.h"

namespace pyonnxopt::passes {

class EliminateDropout : public Pass {
 public:
  const char* name() const override { return "eliminate_dropout"; }
  const char* description() const override { return "remove Dropout that is a no-op at inference (not training mode)"; }
  PassStats run(ir::Model& model, const PassOptions& options) const override;
};

}  // namespace pyonnxopt::passes
