// eliminate_nop: nodes that return their input unchanged go.
//
//   y = Transpose<perm=[0,1,2]>(x)    y = Concat(x)    y = Cast<to=FLOAT>(x: float)
//   y = Sum(x) / Mean(x) / Max(x) / Min(x)            y = Split(x) (one output)
//     ->  readers of y read x
//
// Decided from attributes and known element types only (a value's type comes
// from its value_info, input/output entry, or initializer). Refuses:
//   1. a Cast or CastLike whose input type is not known, or differs;
//   2. a Transpose without perm (it reverses dims; whether that is a no-op
//      depends on the rank);
//   3. whatever bypass.h refuses (graph-output names are kept).
#pragma once

#include "passes/pass.h"

namespace pyonnxopt::passes {

class EliminateNop : public Pass {
 public:
  const char* name() const override { return "eliminate_nop"; }
  const char* description() const override {
    return "remove nodes that return their input unchanged (identity Transpose, one-input Concat/Sum, same-type Cast, ...)";
  }
  PassStats run(ir::Model& model, const PassOptions& options) const override;
};

// The element type of a tensor value when the model states it, else 0.
int32_t known_elem_type(const ir::Value* v);

}  // namespace pyonnxopt::passes
