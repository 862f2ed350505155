// The load steps after parsing: names -> Values (use-def), external data,
// and the checks on tensors that need dims and data types together.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "ir/model.h"

namespace pyonnxopt::proto {

// Node input/output names as parsed, before they are resolved to Values.
class PendingNames {
 public:
  struct IO {
    std::vector<std::string> inputs, outputs;
  };
  IO& of(const ir::Node* n) { return map_[n]; }

 private:
  std::unordered_map<const ir::Node*, IO> map_;
};

// Builds every graph's values and use-def lists. Throws ir::ModelError on a
// duplicate definition, a reference to an undefined value or a cycle.
void link_model(ir::Model& model, PendingNames& names);

// Maps each external tensor to its file (lazily) after checking the location
// stays inside model.base_dir and the byte range lies inside the file.
void resolve_external_data(ir::Model& model, bool allow_outside);

// Dims are non-negative and the stored bytes or elements match them.
void check_tensors(const ir::Model& model);

}  // namespace pyonnxopt::proto
