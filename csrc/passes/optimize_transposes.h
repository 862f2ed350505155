// optimize_transposes: Transposes merge, cancel, and move down through the
// ops that do not care about layout until they meet and cancel.
//
//   a = Transpose<perm=[0,2,3,1]>(x)          y = Relu(x)
//   b = Relu(a)                          ->
//   y = Transpose<perm=[0,3,1,2]>(b)
//
//   a = Transpose<perm=p>(x); b = Transpose<perm=p>(z)      s = Add(x, z)
//   s = Add(a, b)                                       ->   t = Transpose<perm=p>(s)
//   t = ...                                                 (Concat, Mul, ... alike)
//
//   b = Transpose<perm=q>(Transpose<perm=p>(x))  ->  b = Transpose<perm=p∘q>(x)   (p∘q[i] = p[q[i]])
//
// Each Transpose T is a start: the plan follows its output down. A
// Transpose reading it composes with it (and goes when the perm becomes
// the identity); the one other node reading it, when transpose_push.h has a
// rule for it, computes on the untransposed data instead, and its outputs
// are followed the same way; wherever else the value is read (other nodes,
// graph outputs, subgraphs) one Transpose stays to make it. A plan is applied
// only when it lowers the Transposes' weight in the graph (one that moves
// only size-1 axes weighs a quarter, or nothing beside a Reshape: see
// transpose_region.h), so the pass ends; among a value's choices the one
// leaving less wins, staying put on a tie. Transposes of constants are left
// to fold_constants.
//
// Separately, a Transpose reading a Transpose that stays for other readers
// reads the first one's input with the composed perm (count unchanged, the
// chain one shorter). And last, in regroup_transposes (after the fusions,
// whose own Transposes may still cancel it) when nothing else changes, a
// Transpose that moves only axes of size 1 (known dims) leaves the data in
// order: it becomes a Reshape, which collapse_reshapes can merge with its
// neighbours:
//
//   y = Transpose<perm=[1,0,2]>(x: [1,197,768])  ->  y = Reshape(x, [197,1,768])
//
// (an unknown dim that stays at its index is 0 in the target, one that
// moves is -1; with two that move, or a 0 dim, it stays a Transpose).
//
// Refuses (stats.refused names the node a Transpose could not move through
// and why; see transpose_push.h for the per-op reasons):
//   1. nodes excluded from optimization: never moved through, merged or
//      removed (a plan that needs one stops there);
//   2. what bypass.h refuses where a pair cancels into a graph output whose
//      name the input cannot take (the Transpose then stays);
//   3. a Transpose without perm whose input's rank is unknown;
//   4. ops of other domains and nodes with subgraphs (never moved through;
//      subgraphs are optimized on their own, and a value a subgraph reads
//      keeps its name and layout).
#pragma once

#include "passes/pass.h"

namespace pyonnxopt::passes {

class OptimizeTransposes : public Pass {
 public:
  const char* name() const override { return "optimize_transposes"; }
  const char* description() const override {
    return "merge and cancel Transposes, moving them through elementwise, Concat, Split, Reduce, Slice, Pad, "
           "Resize and Softmax until layout flips meet";
  }
  PassStats run(ir::Model& model, const PassOptions& options) const override;

 protected:
  virtual bool regroup() const { return false; }
};

// regroup_transposes: the same, where a Reshape may also regroup runs of
// axes (transpose_push.h), and a Transpose between two Reshapes moves below
// the second when it can, so that collapse_reshapes merges the two (count
// unchanged, one node fewer):
//
//   a = Reshape(x, [S, B*h, d])                       a = Reshape(x, [S, B, h, d])
//   b = Transpose<perm=[1,0,2]>(a)              ->    y = Transpose<perm=[1,2,0,3]>(a)
//   y = Reshape(b, [B, h, S, d])
//
// It runs after the fusion rules: fuse_attention reads the head split as
// exporters write it, and these forms hide it.
class RegroupTransposes : public OptimizeTransposes {
 public:
  const char* name() const override { return "regroup_transposes"; }
  const char* description() const override {
    return "optimize_transposes where Reshapes that regroup whole runs of axes let Transposes through, and a "
           "Transpose between two Reshapes moves below the second (after the fusions)";
  }

 protected:
  bool regroup() const override { return true; }
};

}  // namespace pyonnxopt::passes
