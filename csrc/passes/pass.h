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

// One rewrite, for the report's provenance: the nodes it consumed and the
// nodes or tensors it produced, by name.
struct Rewrite {
  std::string what;  // e.g. "folded", "bypassed", "merged"
  std::vector<std::string> consumed, produced;
};

// How the report names a node: its name, or, for an unnamed one,
// "Op->first output".
inline std::string node_id(const ir::Node& n) {
  if (!n.name.value.empty()) return n.name.value;
  for (const ir::Value* v : n.outputs)
    if (v) return n.op_type.value + "->" + v->name;
  return n.op_type.value;
}

struct PassStats {
  int64_t nodes_removed = 0;
  int64_t nodes_added = 0;
  int64_t initializers_removed = 0;
  int64_t value_info_removed = 0;
  int64_t functions_removed = 0;
  std::vector<std::string> removed;  // names of what went
  std::vector<Rewrite> rewrites;     // provenance, one record per rewrite
  std::vector<std::string> refused;  // "node 'x' (Op): why", where a rewrite did not apply

  bool modified() const {
    return nodes_removed || nodes_added || initializers_removed || value_info_removed || functions_removed;
  }
};

// What the user chose for the whole pipeline; every pass gets the same options.
struct PassOptions {
  uint64_t fold_size_limit = 1 << 20;    // folding may not grow a result past its inputs and this many bytes
  bool allow_lossy = false;              // remove Cast round trips that lose precision (f32->f16->f32)
  bool remove_training_residue = false;  // drop training-mode Dropout and ai.onnx.preview.training ops
};

class Pass {
 public:
  virtual ~Pass() = default;
  virtual const char* name() const = 0;
  virtual const char* description() const = 0;
  virtual PassStats run(ir::Model& model, const PassOptions& options) const = 0;
};

const std::vector<std::unique_ptr<Pass>>& registry();
const Pass* find(std::string_view name);  // nullptr when unknown

// Ops of these domains are pure and known; nodes of other domains are never
// dropped (a custom op may be there for its side effects).
bool is_standard_domain(std::string_view domain);

// The default-domain opset the graph's nodes follow: the model's, or the
// function's when the graph is (inside) a function body; 0 when not imported.
int64_t default_opset(const ir::Model& model, const ir::Graph& graph);

}  // namespace pyonnxopt::passes
