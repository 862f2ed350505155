// Partly known shape values, for fold_constants: the small integer tensors
// that flow from Shape through Gather, Slice, Concat, ... where some
// elements are known and others (a symbolic batch size) are not.
//
//   Shape(x: float[N,3,224,224])     ->  [?, 3, 224, 224]
//   Gather(that, indices=1)          ->  3      (all known: the node folds)
//   Gather(that, indices=0)          ->  ?      (stays)
//   Concat(Slice(that, 1, 4), [-1])  ->  [3, 224, 224, -1]   (folds)
//
// Data-moving ops run their own kernel on stand-ins: each element becomes
// its position in a table of known-or-unknown values, the kernel moves the
// positions, and the result reads the table back. So the partial path
// follows every attribute, opset form and refusal of the real kernel.
#pragma once

#include <optional>

#include "fold/kernels.h"

namespace pyonnxopt::fold {

using PartialDims = std::vector<std::optional<int64_t>>;

// A 0-D or 1-D int64 (or int32, after a Cast) tensor with unknown elements.
struct Partial {
  int32_t dtype = kInt64;
  bool scalar = false;  // 0-D (one element) rather than 1-D
  PartialDims values;

  bool known() const;
  Array to_array() const;  // all elements known
};

// Shape (start/end from opset 15) or Size of a tensor with these dims
// (ctx.node says which); false on attributes the op does not have.
bool shape_or_size(const KernelContext& ctx, const PartialDims& dims, Partial& out);

// One node of Gather, Slice, Concat, Squeeze, Unsqueeze, Identity, Cast (to
// int64 or int32) whose inputs are each partial or constant: partials[i]
// and constants[i] are not both set; both null is an omitted input. The
// indices, starts, axes ... must be constant. False when the result is not
// a partial value (a kernel refusal, rank above 1, another op).
bool propagate(const KernelContext& ctx, const std::vector<const Partial*>& partials,
               const std::vector<const Array*>& constants, Partial& out);

}  // namespace pyonnxopt::fold
