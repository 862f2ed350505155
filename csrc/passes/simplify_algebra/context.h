// What the rule families of simplify_algebra share: one run's bookkeeping
// (stats, reasons, fresh names), reading constants, deciding whether a
// broadcast leaves a shape alone, and adding constants to a graph.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "fold/array.h"
#include "fold/broadcast.h"
#include "ir/model.h"
#include "passes/pass.h"

namespace pyonnxopt::passes::algebra {

class Context {
 public:
  explicit Context(ir::Model& model);

  ir::Model& model;
  PassStats* stats = nullptr;  // the current sweep's

  int64_t opset(const ir::Graph& g) const { return default_opset(model, g); }

  // A reason that names things: kept here until the next one is built.
  const char* say(std::string reason);
  const char* reason() const { return why_.c_str(); }  // the last one said
  // A refusal about another node than the one being judged.
  void refuse(const ir::Node& n, const std::string& reason);
  // Counts `n` (about to go) as removed.
  void count_removed(const ir::Node& n);

  // `base`, or `base_2`, `base_3` ...: a value name no graph of the model uses.
  std::string fresh_name(const std::string& base);
  // A new constant holding `a`, for nodes of `g` placed at or after `before`:
  // an initializer, or a Constant node before `before` where initializers
  // may not be (function bodies, IR < 4). nullptr, with a reason from say(),
  // where a Constant cannot hold the type (before opset 9).
  ir::Value* add_constant(ir::Graph& g, ir::Node* before, const std::string& base, const fold::Array& a);

  // bypass.h's bypass of `n` (first output -> `in`), recorded as a rewrite;
  // nullptr when done, else why not.
  const char* bypass_node(ir::Graph& g, ir::Node& n, ir::Value* in);
  // Removes `n` when none of its outputs is read and it is not pinned;
  // counts it. True when it went.
  bool remove_if_unread(ir::Graph& g, ir::Node* n);

 private:
  std::string why_;
  std::unordered_set<std::string> names_;
};

// The value's data when it is a constant (known_constant) the kernels read.
bool read_constant(const ir::Value* v, fold::Array& out);

// The node's only live output, when it has exactly one and it is output 0.
ir::Value* single_output(const ir::Node& n);

// The node that makes `v` as its output 0, when it is a standard-domain node
// of graph `g` with that one output (pinned or not).
ir::Node* producer_in(const ir::Graph& g, const ir::Value* v);

// The shape of `v`: a constant's dims (Constant nodes too), else known_shape.
std::optional<std::vector<int64_t>> dims_of(const ir::Value* v);

// Whether `v` has exactly one reader (one input slot) and is no graph output.
bool read_once(const ir::Value* v);

// nullptr when broadcasting a tensor of shape `dims` (kUnknownDim where not
// known) against `x` gives x's own shape, else why that is not known to hold.
// `what` names the other tensor in the reason ("the constant").
const char* keeps_shape(Context& ctx, const std::vector<int64_t>& dims, const ir::Value* x, const std::string& what);

// True when every element of `a` satisfies pred(element), elements read in
// the kernels' types (float16 as float); false for types the kernels do not
// read. `pred` must accept bool, integers and floating values.
template <class Pred>
bool every_element(const fold::Array& a, Pred pred) {
  bool all = true;
  const bool known = fold::visit<fold::kNumbers | fold::kHalfs | fold::kBools>(a.dtype, [&](auto e) {
    using E = decltype(e);
    const uint64_t n = a.numel();
    for (uint64_t i = 0; all && i < n; ++i) all = pred(E::load(a.bytes.data() + i * E::kSize));
  });
  return known && all;
}

// Floating types: float, double, float16.
bool is_floating(int32_t dtype);

}  // namespace pyonnxopt::passes::algebra
