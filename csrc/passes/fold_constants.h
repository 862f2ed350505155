// fold_constants: nodes whose inputs are all constant become constants,
// computed by the native kernels (csrc/fold/). Constant nodes become
// initializers.
//
//   s = Shape(w)   (w: initializer [64, 3])       s: initializer [64, 3]
//   t = Gather(s, 0)                        ->    t: initializer 64
//   y = Mul(x, t)                                 y = Mul(x, t)
//
// A constant is an initializer that is not also a graph input (an input can
// be fed), or a Constant node's output. Results become initializers under
// the folded output's name; in function bodies, and in models older than IR
// 4 (where initializers must be inputs), Constant nodes instead. Refuses,
// saying why in the report:
//   1. a result larger than the limit (PassOptions::fold_size_limit) and
//      larger than the node's inputs together (growth-aware folding);
//   2. a node excluded from optimization (--exclude-node).
// Leaves alone, silently: ops without a native kernel or a case the kernel
// does not handle (the onnxruntime fallback in Python takes those), other
// domains, nodes with subgraphs, nodes whose outputs nothing reads.
#pragma once

#include "passes/pass.h"

namespace pyonnxopt::passes {

class FoldConstants : public Pass {
 public:
  const char* name() const override { return "fold_constants"; }
  const char* description() const override {
    return "compute nodes whose inputs are all constant with native kernels (shape and index arithmetic, small math)";
  }
  PassStats run(ir::Model& model, const PassOptions& options) const override;
};

}  // namespace pyonnxopt::passes
