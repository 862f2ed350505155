// The load steps after parsing: names -> Values (use-def), external data,
// and the checks on tensors that need dims and data types together.
#pragma once

#include <string>
#include <deque>
#include <string_view>
#include <vector>

#include "ir/model.h"

namespace pyonnxopt::proto {

// Node input/output names as parsed, before they are resolved to Values.
// Views into the input bytes, which outlive linking; indexed by the node's
// pending_index, which the parser assigns.
class PendingNames {
 public:
  // A few names inline, the rest on the heap: most nodes need no allocation.
  class Names {
   public:
    void push_back(std::string_view s) {
      if (count_ < kInline) inline_[count_] = s;
      else more_.push_back(s);
      ++count_;
    }
    size_t size() const { return count_; }
    std::string_view operator[](size_t i) const { return i < kInline ? inline_[i] : more_[i - kInline]; }

   private:
    static constexpr size_t kInline = 3;
    std::string_view inline_[kInline];
    std::vector<std::string_view> more_;
    size_t count_ = 0;
  };
  struct IO {
    Names inputs, outputs;
  };
  IO& add(ir::Node* n) {
    n->pending_index = ios_.size();
    return ios_.emplace_back();
  }
  IO& of(const ir::Node* n) { return ios_[n->pending_index]; }

 private:
  std::deque<IO> ios_;  // a deque: add() never moves earlier entries
};

// Builds every graph's values and use-def lists and returns every tensor of
// the model. Throws ir::ModelError on a duplicate definition, a reference to
// an undefined value or a cycle.
std::vector<ir::Tensor*> link_model(ir::Model& model, PendingNames& names);

// Maps each external tensor to its file (lazily) after checking the location
// stays inside model.base_dir and the byte range lies inside the file.
// `weights_from`: see LoadOptions::weights_from.
void resolve_external_data(ir::Model& model, const std::vector<ir::Tensor*>& tensors, bool allow_outside,
                           const ir::Model* weights_from = nullptr);

// Dims are non-negative and the stored bytes or elements match them.
void check_tensors(const std::vector<ir::Tensor*>& tensors);

}  // namespace pyonnxopt::proto
