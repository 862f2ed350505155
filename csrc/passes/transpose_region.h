// The plans of optimize_transposes: from one Transpose, the region of nodes
// that could compute on the untransposed data, and what moving the
// Transpose through it does to the number of Transposes. Reads the graph
// only; optimize_transposes.cpp carries a plan out.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "ir/model.h"
#include "passes/permutation.h"
#include "passes/transpose_push.h"

namespace pyonnxopt::passes {

constexpr size_t kMaxRegion = 256;  // nodes one plan may move a Transpose through
// What a Transpose weighs in a plan's count: one that moves data, and one
// that moves only axes of size 1 (a Reshape in the end; 0 beside a node that
// only reshapes, which it merges into). A plan that trades one of the first
// for up to three of the second still gains.
constexpr int kWeight = 4;
constexpr int kUnitWeight = 1;

// A default-domain node that only changes its input's shape.
bool reshape_like(const ir::Node* n);

// A node that computes on untransposed data in the plan: it reads values
// transposed by `perm` (and constants), as `push` says.
struct Moved {
  ir::Node* node;
  Perm perm;
  Push push;
  size_t position;  // in topological order
};

// The region a plan changes: the start, the nodes moved; from them, the
// values that stop existing as such (each Transpose<perm>(a twin that the
// plan has)) and the Transposes they come from (the start, and Transposes
// the moved nodes read through).
struct Region {
  ir::Node* root = nullptr;
  Perm root_perm;
  std::vector<Moved> moved;
};

// What a region does to the count, and to whom.
struct Roles {
  std::unordered_map<ir::Value*, Perm> perm_of;                       // the region's values
  std::vector<ir::Node*> sources;                                     // Transposes whose outputs are region values
  std::vector<std::pair<ir::Node*, ir::Value*>> cancelled, composed;  // Transpose readers, and what they read
  int delta = 0;  // weight of the Transposes added minus that of those removed (kWeight, kUnitWeight)
};

// Grows a region from a Transpose through every node that can take it
// (topological order, so a node's inputs are settled before it), then
// prunes the nodes at its lower edge that do not pay for themselves.
class Planner {
 public:
  // `position`: each node of `graph` by its place in a topological order.
  // `regroup`: Reshapes may regroup runs of axes (transpose_push.h).
  Planner(const ir::Model& model, const ir::Graph& graph, const std::unordered_map<const ir::Node*, size_t>& position,
          bool regroup)
      : model_(model), graph_(graph), position_(position), regroup_(regroup) {}

  Region grow(ir::Node* root, const Perm& perm);
  // The region's values, sources, readers and count change, as it stands.
  Roles roles(const Region& region);
  // "node: why" for each node a Transpose could not move through while planning.
  const std::vector<std::string>& refusals() const { return refusals_; }

 private:
  bool unit_moves_only(const Perm& perm, const ir::Value* v) const;
  // The weight of the Transpose by `perm` that makes `v`; `beside_reshape`:
  // the node making its input, or every node reading it, only reshapes.
  int weight(const Perm& perm, const ir::Value* v, bool beside_reshape) const;
  bool split_for_attention(const ir::Node& n, int index, const Perm& perm) const;
  bool is_cache_concat(const ir::Node& n) const;

  const ir::Model& model_;
  const ir::Graph& graph_;
  const std::unordered_map<const ir::Node*, size_t>& position_;
  const bool regroup_;
  std::vector<std::string> refusals_;

  bool cancels(const ir::Node* t, const ir::Value* v, const ir::Value* existing);
  void prune(Region& region);
};

}  // namespace pyonnxopt::passes
