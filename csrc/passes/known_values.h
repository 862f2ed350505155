// What the model states about a value without running it: its element type,
// its shape, and, for a constant, its integers. For passes that decide a
// rewrite from static facts only.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ir/model.h"

namespace pyonnxopt::passes {

// The element type of a tensor value when the model states it (initializer,
// declared type, or the `to` of the Cast that makes it), else 0.
int32_t known_elem_type(const ir::Value* v);

// The tensor a constant value holds: an initializer that is not also a
// graph input (an input can be fed), or a standard Constant node's `value`;
// nullptr otherwise.
const ir::Tensor* known_constant(const ir::Value* v);

// A dimension whose size is not stated (symbolic or missing).
constexpr int64_t kUnknownDim = -1;

// The shape of a tensor value, one entry per axis (kUnknownDim where the size
// is not stated), or nullopt when not even the rank is known. It comes from
// an initializer's dims, else from the value's type (value_info, graph input
// or output). A graph input with an initializer can be fed another tensor,
// so only its declared type counts.
std::optional<std::vector<int64_t>> known_shape(const ir::Value* v);

// The symbols of `graph` that may be 0 on some run, being data-dependent
// counts: onnx's generated unk__N names that first appear on a value computed
// from a NonZero, TopK, NonMaxSuppression, Compress, Unique, Loop, Scan or If
// (a detector's kept boxes), and torch.export's unbacked u0, u1, ... The
// model's inputs' dims and what shape inference derives from them alone are
// not among them: a model is not fed empty inputs.
std::set<std::string> count_symbols(const ir::Graph& graph);

// Whether dim `axis` of `v` may be 0 (see count_symbols): not a positive size
// nor a symbol outside `counts`; an unnamed dim may.
bool may_be_empty(const ir::Value* v, size_t axis, const std::set<std::string>& counts);

// True when every dim of `shape` is known.
bool fully_static(const std::vector<int64_t>& shape);

// A constant integer tensor's values: `v` is an initializer that is not a
// graph input (that one can be fed), of type int64 or int32, with readable
// data. Otherwise nullopt and `why` (when given) says which of these failed.
std::optional<std::vector<int64_t>> constant_ints(const ir::Value* v, const char** why = nullptr);

// An integer list that a node takes as attribute `attr` before default-domain
// opset `since` and as input `input` from then on (Slice's starts, Squeeze's
// axes, ...). When the opset is not imported, an attribute of that name wins.
struct IntList {
  bool present = false;          // false: the optional list was not given
  const char* why = nullptr;     // present but not a known constant: why
  std::vector<int64_t> values;   // present and known
  bool known() const { return present && !why; }
};
IntList int_list(const ir::Model& model, const ir::Graph& graph, const ir::Node& node, const char* attr,
                 size_t input, int64_t since);

}  // namespace pyonnxopt::passes
