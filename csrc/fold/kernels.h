// Native constant-folding kernels: evaluate one node on constant inputs.
// Each kernel family lives in its own file and adds itself to the table in
// kernels.cpp; the driver is passes/fold_constants.cpp.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "fold/array.h"

namespace pyonnxopt::fold {

struct KernelContext {
  const ir::Node& node;
  int64_t opset;              // of the default domain, for the node's graph
  uint64_t max_output_bytes;  // a result past this is refused as kTooBig, before it is computed
};

enum class Status {
  kDone,         // outputs filled, one per node output
  kUnsupported,  // not this kernel's case (a dtype, an attribute form): left to the fallback
  kTooBig,       // the result would pass max_output_bytes
};

// Inputs: one per node input, nullptr for an omitted optional input.
// Outputs: filled with one Array per node output on kDone. `why` says why
// not on the other statuses.
using Kernel = Status (*)(const KernelContext& ctx, const std::vector<const Array*>& inputs,
                          std::vector<Array>& outputs, std::string& why);
using KernelTable = std::unordered_map<std::string, Kernel>;

// nullptr: no native kernel for this op (default domain only).
Kernel find_kernel(std::string_view op_type);
// The ops with a native kernel, sorted.
std::vector<std::string> kernel_ops();

// The families, each in its own .cpp.
void add_shape_kernels(KernelTable& table);  // shape and index arithmetic: Shape ... Range, ConstantOfShape
void add_math_kernels(KernelTable& table);   // elementwise, comparison, logic, small reductions

// Helpers shared by the kernels.
int64_t int_attribute(const ir::Node& n, std::string_view name, int64_t fallback);
// kTooBig with a message when `count` elements of `dtype` pass the limit.
bool too_big(const KernelContext& ctx, int32_t dtype, uint64_t count, std::string& why);

}  // namespace pyonnxopt::fold
