// eliminate_common_subexpressions: two nodes that compute the same thing
// from the same values become one; identical initializers become one.
//
//   a = Relu(x); b = Relu(x); y = Add(a, b)   ->   a = Relu(x); y = Add(a, a)
//
// Nodes match on op type, domain, overload, inputs (the same values) and
// attributes (byte for byte); initializers on data type, dims and bytes.
// Graphs are walked in topological order, so chains of copies fold at once.
// Refuses:
//   1. nodes with a random or custom op (Random*, Multinomial, Bernoulli,
//      Dropout, non-standard domains): two calls need not agree;
//   2. nodes holding subgraphs;
//   3. a copy whose output is a graph output (names and order are kept), or
//      an initializer that is a graph input or output;
//   4. a copy read from a subgraph that defines the kept value's name.
#pragma once

#include "passes/pass.h"

namespace pyonnxopt::passes {

class EliminateCommonSubexpressions : public Pass {
 public:
  const char* name() const override { return "eliminate_common_subexpressions"; }
  const char* description() const override {
    return "merge nodes computing the same values from the same inputs, and identical initializers";
  }
  PassStats run(ir::Model& model, const PassOptions& options) const override;
};

}  // namespace pyonnxopt::passes
