// The load steps after parsing: names -> Values (use-def), external data,
// and the checks on tensors that need dims and data types together.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ir/model.h"

namespace pyonnxopt::proto {

// Node input/output names as parsed, before they are resolved to Values.
// Views into the input bytes, which outlive linking; indexed by the node's
// order_index, which the parser assigns.
class PendingNames {
 public:
  struct IO {
    std::vector<std::string_view> inputs, outputs;
  };
  IO& add(ir::Node* n) {
    n->order_index = ios_.size();
    return ios_.emplace_back();
  }
  IO& of(const ir::Node* n) { return ios_[n->order_index]; }

 private:
  std::vector<IO> ios_;
};

// Builds every graph's values and use-def lists. Throws ir::ModelError on a
// duplicate definition, a reference to an undefined value or a cycle.
void link_model(ir::Model& model, PendingNames& names);

// Maps each external tensor to its file (lazily) after checking the location
// stays inside model.base_dir and the byte range lies inside the file.
void resolve_external_data(ir::Model& model, const std::vector<ir::Tensor*>& tensors, bool allow_outside);

// Dims are non-negative and the stored bytes or elements match them.
void check_tensors(const std::vector<ir::Tensor*>& tensors);

}  // namespace pyonnxopt::proto
