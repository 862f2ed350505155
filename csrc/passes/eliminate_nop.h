// eliminate_nop: nodes that return their input unchanged go.
//
//   y = Transpose<perm=[0,1,2]>(x)    y = Concat(x)    y = Cast<to=FLOAT>(x: float)
//   y = Sum(x) / Mean(x) / Max(x) / Min(x)            y = Split(x) (one output)
//   y = Reshape(x: [N,3,4], [0,3,-1])    y = Expand(x: [2,3], [1,3])
//   y = Slice(x: [2,3], starts=[0], ends=[INT64_MAX], axes=[1])
//   y = Pad(x, pads=[0,0,0,0])    y = Tile(x, repeats=[1,1])
//     ->  readers of y read x
//
// And round trips, two nodes that undo each other:
//
//   m = Squeeze(x, axes=[1]);  y = Unsqueeze(m, axes=[1])   (or Unsqueeze then Squeeze)
//   m = Cast<to=DOUBLE>(x: float);  y = Cast<to=FLOAT>(m)
//     ->  readers of y read x; the first node goes too when nothing else reads m
//
// And a Cast of a Cast whose middle type holds every value of the input's:
//
//   m = Cast<to=INT32>(x: bool);  y = Cast<to=INT64>(m)   ->  y = Cast<to=INT64>(x)
//
// Decided from attributes, known element types and shapes, and constant
// inputs only (known_values.h: a shape comes from an initializer's dims or a
// declared type; a constant is an initializer that is not a graph input).
//   Reshape: each target entry is the input's dim, a 0 that copies it (not
//     with allowzero=1), or the one -1 with the other dims known, nonzero.
//   Expand: the shape has no more axes than the input and each entry is 1 or
//     the input's dim.
//   Slice (inputs from opset 10, attributes before): each range is a whole
//     axis with step 1 after ONNX's clamping; on an axis of unknown size
//     only starts 0 with an end >= 2^62 is whole.
//   Pad: all pads 0, whatever the mode (Pad-1's `paddings`, Pad-2's
//     attribute, inputs from opset 11).  Tile: all repeats 1.
//   Squeeze/Unsqueeze: the same axes (attributes before opset 13, input
//     after), negative ones normalised when the rank is known; Squeeze
//     without axes uses its input's static shape.
//   Cast round trip x: T1 -> T2 -> T1: removed when T2 holds every T1 value
//     (cast_exactness.h); lossy ones (f32->f16->f32, int64->int32->int64,
//     float->int->float) only with PassOptions.allow_lossy. Through bool or
//     string it computes something (x != 0, text) and stays.
// Refuses (reported in stats.refused, graph unchanged):
//   1. a Cast or CastLike whose input type is not known, or differs;
//   2. a Transpose without perm (it reverses dims; whether that is a no-op
//      depends on the rank);
//   3. a shape, starts/ends/axes/steps, pads, repeats or axes input that is
//      not a constant: computed, or a graph input with an initializer (it can
//      be fed), or not a readable int64/int32 tensor;
//   4. an input whose rank, or whose dims where they decide, are unknown
//      (Reshape, Expand, Slice; Squeeze without axes); negative axes of a
//      Squeeze/Unsqueeze pair that differ while the rank is unknown;
//   5. a Cast round trip whose input type is unknown, or that is lossy
//      without allow_lossy ("... removed only with --allow-lossy");
//   6. either node of a round trip pinned (excluded from optimization);
//   7. whatever bypass.h refuses (graph-output names are kept, pinned nodes).
#pragma once

#include "passes/pass.h"

namespace pyonnxopt::passes {

class EliminateNop : public Pass {
 public:
  const char* name() const override { return "eliminate_nop"; }
  const char* description() const override {
    return "remove nodes that return their input unchanged (identity Transpose/Reshape/Expand/Slice/Pad/Tile, "
           "one-input Concat/Sum, same-type Cast, Squeeze/Unsqueeze and exact Cast round trips, ...)";
  }
  PassStats run(ir::Model& model, const PassOptions& options) const override;
};

}  // namespace pyonnxopt::passes
