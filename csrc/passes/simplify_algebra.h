// simplify_algebra: arithmetic that changes nothing, or that one node does.
// The rule families live in passes/simplify_algebra/, one file each.
//
// Identities: the node goes, its readers read x (identities.cpp).
//   y = Add(x, 0)  Add(0, x)  Sub(x, 0)  Mul(x, 1)  Mul(1, x)  Div(x, 1)  Pow(x, 1)
//   y = And(x, true)  Or(x, false)  Xor(x, false)   (either side)
//   y = BitwiseAnd(x, ~0)  BitwiseOr(x, 0)  BitwiseXor(x, 0)   (either side)
//   y = Where(c, a, b), c a constant all true (-> a) or all false (-> b)
//     ->  readers of y read x
// The constant may have any shape whose every element is the identity
// (a zero of either sign counts as 0), as long as broadcasting it leaves x's
// shape as it is: no more axes than x, each dim 1 or x's own.
//
// Unary chains (unary_chains.cpp):
//   Neg(Neg(x)), Not(Not(x)), BitwiseNot(BitwiseNot(x))  ->  x
//   f(f(x)) -> f(x) for f in Relu, Abs, Floor, Ceil, Round, Sign (idempotent)
//   r(g(x)) -> g(x), r in Floor, Ceil, Round and g in Floor, Ceil, Round, Sign
//   Relu(Abs(x)) -> Abs(x) (floating types);  Abs(Neg(x)) -> Abs(x) (when the Neg goes)
//
// Bounds (clip_bounds.cpp), from opset 11:
//   Max(x, lo) -> Clip(x, lo)    Min(x, hi) -> Clip(x, , hi)   (lo, hi one element)
//   Min(Max(x, l1), h2), Max(Min(x, h1), l2), Clip(Clip(x, l1, h1), l2, h2), ...
//     ->  Clip(x, max(l1, l2), min(h1, h2))
// Floating Clips get both bounds: one left out means the largest finite
// value (Clip(inf, 0) is FLT_MAX), where Max and Min leave infinities alone,
// so a missing Max/Min side is written as ±inf and a missing Clip side as
// ±FLT_MAX.
//
// Constants merged (merge_constants.cpp), the first node goes:
//   y = Add(Add(x, a), b)   ->   y = Add(x, a + b)      (a + b computed now)
//   (x - a) + b -> x + (b - a)    (x - a) - b -> x - (a + b)    (a - x) + b -> (a + b) - x
//   b - (x + a) -> (b - a) - x    (x * a) * b -> x * (a * b)
//   integers: (x / a) / b -> x / (a * b)   (no divisor 0, no overflow)
// x * a + b stays (Mul then Add do not merge), and so does a floating Div.
//
// Concat taken apart again (concat_readers.cpp):
//   c = Concat<axis=1>(a: [N,2], b: [N,3])
//   s = Slice(c, starts=[2], ends=[5], axes=[1])     ->  readers of s read b
//   p, q = Split<axis=1>(c, split=[2, 3])            ->  readers of p, q read a, b
//   (the Concat goes when nothing else reads it)
//
// Shape slices joined (shape_slices.cpp), from opset 15:
//   Concat(Shape(x, 0, 1), Shape(x, 1, 2), c)  ->  Concat(Shape(x, 0, 2), c)
//   Concat(Shape(x, 0, 1), Shape(x, 1, 2))     ->  Shape(x)   (x 2-d)
//
// Exactness. Integer results are bit for bit (+ - * wrap the same in any
// order). Floating: x * 1, x / 1, Pow(x, 1), x + (-0), x - (+0), the chains
// and the Concat rewrites are bit for bit. x + (+0) and x - (-0) turn -0
// into +0; onnxruntime's Where turns -0 into +0, the branch read directly
// does not; Max/Min -> Clip may give -0 where Max/Min gave +0 (or the
// reverse): equal numbers, different sign bits, accepted. onnxruntime's
// Max, Min, Clip and Relu all keep NaN, so those rewrites keep NaN too.
// Merged constants reassociate: (x + a) + b and x + (a + b) may differ in
// the last bits (compare with a tolerance), and one may overflow where the
// other does not.
//
// Refuses (reported in stats.refused, graph unchanged):
//   1. a constant that broadcasts x to another shape: more axes than x,
//      a dim that is neither 1 nor x's; x's rank unknown and the constant
//      not a scalar; x's dims unknown where the constant's are not 1; for
//      Where, the branch not taken of unknown shape or one that broadcasts;
//   2. input and constant (or Where's branches) of different known types;
//      binary ops before opset 7 (a `broadcast` attribute decided shapes);
//   3. Pow(x, 1) with x int64/uint64, or of unknown type: onnxruntime
//      computes those powers in double, which rounds past 2^53;
//   4. Relu(Abs(x)) with x's type unknown (for integers Abs(INT_MIN) < 0);
//   5. Max/Min/Clip: before opset 11 (Clip's bounds were attributes); a NaN
//      bound (Max/Min then give NaN, Clip does not); a type onnxruntime's
//      Clip has no kernel for (opset 11: only float and float16; from 12
//      also double, int8, uint8, int32, uint32, int64, uint64); two bounds
//      whose intervals do not meet (the result is a constant);
//   6. merging: the middle value read by another node or a graph output
//      (then both nodes stay: nothing is saved); a merged constant larger
//      than the two (broadcasting); one that overflows (or, for a product,
//      underflows) where the two constants did not; before opset 7; a
//      new constant a Constant node cannot hold (function bodies and IR < 4
//      before opset 9: float types only);
//   7. Concat: input sizes along the axis unknown; a Slice or Split whose
//      starts/ends/split are not constants; a Split output that is a graph
//      output;
//   8. a pinned node (excluded from optimization), and whatever bypass.h
//      refuses (a graph output keeps its name: the input's producer must
//      be able to take it).
// Left alone silently: nodes whose operands are all constant (fold_constants'
// work), other domains, Reciprocal(Reciprocal(x)) (not exact: 1/(1/x) != x).
#pragma once

#include "passes/pass.h"

namespace pyonnxopt::passes {

class SimplifyAlgebra : public Pass {
 public:
  const char* name() const override { return "simplify_algebra"; }
  const char* description() const override {
    return "remove arithmetic identities (x+0, x*1, Neg(Neg(x)), Relu(Relu(x)), ...), turn Max/Min bounds into one "
           "Clip, merge constant Add/Mul chains, and let Slices/Splits of a Concat read its inputs";
  }
  PassStats run(ir::Model& model, const PassOptions& options) const override;
};

}  // namespace pyonnxopt::passes
