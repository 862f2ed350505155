// What a pass adds to a graph: values under names nothing else has, and
// new constants.
#pragma once

#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "ir/model.h"

namespace pyonnxopt::passes {

// Names no value of the model has. Unique over the whole model, not one
// graph: a subgraph value named like an outer one hides it from the
// subgraph's readers, and the checker wants one name per value anyway.
class FreshNames {
 public:
  explicit FreshNames(const ir::Model& model);
  // `base` when free, else `base_1`, `base_2`, ...; taken from then on.
  std::string make(const std::string& base);

 private:
  std::unordered_set<std::string> taken_;
};

// Attributes for a new node: an int, and a list of ints.
ir::Attribute int_attribute(const char* name, int64_t value);
ir::Attribute ints_attribute(const char* name, std::vector<int64_t> values);

// A 1-D tensor of int64 (dtype 7) or int32 (dtype 6) values.
std::unique_ptr<ir::Tensor> int_tensor(const std::vector<int64_t>& values, int32_t dtype);

// A new value of `g` named `name` holding `t`: an initializer, or, where the
// graph cannot own one (function bodies; IR < 4, where initializers are
// graph inputs), a Constant node placed before `before`. Returns the value;
// `added_node` says whether a node was added.
ir::Value* add_constant(const ir::Model& model, ir::Graph& g, std::unique_ptr<ir::Tensor> t, const std::string& name,
                        ir::Node* before, bool& added_node);

}  // namespace pyonnxopt::passes
