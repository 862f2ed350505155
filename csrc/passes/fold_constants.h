// fold_constants: nodes whose inputs are all constant become constants,
// computed by the native kernels (csrc/fold/): shape and index arithmetic
// (Shape, Size, Gather, Slice, Concat, Split, Squeeze, Unsqueeze, Reshape,
// Flatten, Expand, Tile, Transpose, Range, ConstantOfShape, Cast, CastLike,
// Identity) and small math (math_kernels.cpp). Constant nodes become
// initializers.
//
//   s = Shape(w)   (w: initializer [64, 3])       s: initializer [64, 3]
//   t = Gather(s, 0)                        ->    t: initializer 64
//   y = Mul(x, t)                                 y = Mul(x, t)
//
// A constant is an initializer that is not also a graph input (an input can
// be fed), or a Constant node's output. Results become initializers under
// the folded output's name; in function bodies, and in models older than IR
// 4 (where initializers must be inputs), Constant nodes instead.
//
// Partial shapes (fold/partial.h). Shape and Size need only the input's
// dims, not its data: those of a constant, else of the value's declared type
// (value_info, graph input or output entry; a dim_param is unknown). Where
// some dims are unknown, Shape's output is tracked as a vector of known and
// unknown elements through Gather, Slice, Concat (with constants), Squeeze,
// Unsqueeze (0-D <-> 1-D), Identity and Cast to int64/int32, with constant
// indices, starts, axes. A node whose tracked output is fully known folds:
//
//   s = Shape(x)   (x: float[N,3,224,224])        s = Shape(x)
//   c = Gather(s, 1)                        ->    c: initializer 3
//   n = Gather(s, 0)                              n = Gather(s, 0)
//   t = Slice(s, [1], [4])                        t: initializer [3, 224, 224]
//
// Refuses, saying why in the report:
//   1. a result larger than the limit (PassOptions::fold_size_limit) and
//      larger than the inputs the fold frees (growth-aware folding; an input
//      something else still reads is not freed, so a transposed copy of a
//      shared weight counts as growth; except a Transpose that only
//      MatMul/Gemm read, the weight layout the product wants, which may be
//      as large as its source up to 200 MB), or
//      whose element count overflows;
//   2. a node excluded from optimization (--exclude-node), also where only
//      partial shapes would know its output (which then is not tracked);
//   3. a result that would have to be a Constant node before opset 9 (IR < 4,
//      function bodies) and is not float16/float/double, which Constant-1
//      cannot hold: the node stays and its value is passed on to its
//      readers, which fold on (what it fed is then dead code).
// Leaves alone, silently: ops without a native kernel, and cases a kernel
// does not handle (the onnxruntime fallback in Python takes those): string
// and 8-bit-float types, malformed attributes or inputs (axes out of range
// or repeated, indices out of range, mismatched dims or types), an op or
// attribute its opset does not have, a float whose integer Cast is out of
// range, Slice with an INT_MAX end and a negative step (onnxruntime and the
// spec disagree); other domains; nodes with subgraphs; nodes whose outputs
// nothing reads; nodes in function bodies with an attribute that refers to
// the function's (ref_attr_name: its value exists only at the call site);
// Shape of a value with no type or an unknown rank; tracked values with an
// unknown element.
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
