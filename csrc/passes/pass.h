// A native pass: a stateless, named rewrite of the IR that reports what it
// changed. The registry (registry.cpp) is one explicit list.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ir/model.h"

namespace pyonnxopt::passes {

struct PassStats {
  int64_t nodes_removed = 0;
  int64_t nodes_added = 0;
  int64_t initializers_removed = 0;
  int64_t value_info_removed = 0;
  int64_t functions_removed = 0;
  std::vector<std::string> removed;  // names of what went, for the report's provenance
  std::vector<std::string> refused;  // "node 'x' (Op): why", where a rewrite did not apply

  bool modified() const {
    return nodes_removed || nodes_added || initializers_removed || value_info_removed || functions_removed;
  }
};

class Pass {
 public:
  virtual ~Pass() = default;
  virtual const char* name() const = 0;
  virtual const char* description() const = 0;
  virtual PassStats run(ir::Model& model) const = 0;
};

const std::vector<std::unique_ptr<Pass>>& registry();
const Pass* find(std::string_view name);  // nullptr when unknown

// Ops of these domains are pure and known; nodes of other domains are never
// dropped (a custom op may be there for its side effects).
bool is_standard_domain(std::string_view domain);

}  // namespace pyonnxopt::passes
