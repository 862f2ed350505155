// eliminate_dropout: Dropout that is a no-op at inference goes, and, when
// asked, the training residue: training-mode Dropout and the optimizer ops
// of ai.onnx.preview.training.
//
//   a = Relu(x); b = Dropout(a); y = Abs(b)   ->   a = Relu(x); y = Abs(a)
//   g = ai.onnx.preview.training.Adam(r, t, w, dw, v, h)  (nothing reads g)  ->  (gone)
//
// A Dropout is an inference no-op when training_mode (opset >= 12) is absent
// or a constant false, and, before opset 7, when is_test=1. With
// PassOptions.remove_training_residue a training-mode Dropout goes too
// (output -> input: the model becomes its inference form), and so do
// Gradient, Momentum, Adagrad and Adam nodes (domain ai.onnx.preview.training)
// none of whose outputs is read or is a graph output; eliminate_dead_code
// keeps them, as it keeps every non-standard op. Refuses when:
//   1. a Dropout runs in training mode, or training_mode is not a constant
//      (a graph input with an initializer can be fed), without
//      remove_training_residue: training residue, reported, not removed;
//   2. a Dropout's mask output is read or is a graph output;
//   3. bypassing the Dropout is refused (see bypass.h: graph-output names
//      are kept, pinned nodes stay);
//   4. an ai.onnx.preview.training node, without remove_training_residue
//      (reported as training residue), or with it when one of its outputs is
//      read or is a graph output, or when it is pinned.
#pragma once

#include "passes/pass.h"

namespace pyonnxopt::passes {

class EliminateDropout : public Pass {
 public:
  const char* name() const override { return "eliminate_dropout"; }
  const char* description() const override {
    return "remove Dropout that is a no-op at inference; with remove_training_residue also training-mode Dropout and "
           "unread ai.onnx.preview.training ops (Gradient, Momentum, Adagrad, Adam)";
  }
  PassStats run(ir::Model& model, const PassOptions& options) const override;
};

}  // namespace pyonnxopt::passes
