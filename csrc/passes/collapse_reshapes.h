// collapse_reshapes: a chain of Reshape, Flatten, Squeeze and Unsqueeze
// (each value between them read by the next alone) becomes one Reshape.
//
//   a = Flatten<axis=1>(x: [N,3,4])      ([N,12])
//   y = Unsqueeze(a, axes=[1])           ([N,1,12])     ->   y = Reshape(x, [-1, 1, 12])
//
//   a = Reshape(x, s1)
//   y = Reshape(a, [2, -1, 6])                          ->   y = Reshape(x, [2, -1, 6])
//
// The target: the last node's own constant shape when it ends the chain as
// a Reshape whose shape has no 0 (a 0 copies a dim of *its* input, which
// the new Reshape does not have) or allowzero=1 (its 0s mean 0); else the
// chain's output shape worked out from x's known dims, the constant shapes
// and axes along the chain and the output's declared type, with -1 for the
// one dim it leaves unknown. The shape becomes a new constant under a fresh
// name (an attribute before opset 5); the last node's output keeps its name.
//
// Where no Reshape target can say it (two unknown dims that move: DeBERTa's
// [S, T] -> [1, S, T] -> [1, 1, S, T]), a chain of Squeezes and Unsqueezes
// alone becomes one Squeeze of the input axes it drops and one Unsqueeze of
// the output axes it inserts (an Identity when it gives its input back),
// when that is fewer nodes.
//
// Refuses (stats.refused):
//   1. a shape or axes input that is not a constant;
//   2. an output shape with more than one dim unknown, or an unknown rank;
//   3. an output shape with a 0 dim that needs allowzero (before opset 14),
//      or a 0 beside the one unknown dim (-1 would be ill-defined);
//   4. a chain node excluded from optimization (the chain stops there).
// Nodes of other domains, and values read by more than the next node or
// by a graph output, end a chain silently.
#pragma once

#include "passes/pass.h"

namespace pyonnxopt::passes {

class CollapseReshapes : public Pass {
 public:
  const char* name() const override { return "collapse_reshapes"; }
  const char* description() const override {
    return "turn chains of Reshape, Flatten, Squeeze and Unsqueeze into one Reshape";
  }
  PassStats run(ir::Model& model, const PassOptions& options) const override;
};

}  // namespace pyonnxopt::passes
