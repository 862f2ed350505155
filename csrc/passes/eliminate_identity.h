// eliminate_identity: Identity nodes go; their readers read the input.
//
//   a = Relu(x); b = Identity(a); y = Abs(b)   ->   a = Relu(x); y = Abs(a)
//   a = Relu(x); y = Identity(a)  (y a graph output)   ->   y = Relu(x)
//
// In every graph, subgraphs and function bodies included. Refuses when:
//   1. the output is a graph output and the input is a graph input, an
//      initializer or an outer-scope value, is read elsewhere too, or is a
//      graph output itself (output names and order are kept);
//   2. the output is an output of a subgraph;
//   3. a subgraph reading the output defines a value with the input's name.
#pragma once

#include "passes/pass.h"

namespace pyonnxopt::passes {

class EliminateIdentity : public Pass {
 public:
  const char* name() const override { return "eliminate_identity"; }
  const char* description() const override { return "remove Identity nodes, readers read the input instead"; }
  PassStats run(ir::Model& model, const PassOptions& options) const override;
};

}  // namespace pyonnxopt::passes
