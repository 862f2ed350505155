#include "fold/kernels.h"

#include <algorithm>

namespace pyonnxopt::fold {

namespace {

const KernelTable& table() {
  static const KernelTable kTable = [] {
    KernelTable t;
    add_shape_kernels(t);
    add_math_kernels(t);
    return t;
  }();
  return kTable;
}

}  // namespace

Kernel find_kernel(std::string_view op_type) {
  auto it = table().find(std::string(op_type));
  return it == table().end() ? nullptr : it->second;
}

std::vector<std::string> kernel_ops() {
  std::vector<std::string> out;
  for (const auto& [name, kernel] : table()) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

int64_t int_attribute(const ir::Node& n, std::string_view name, int64_t fallback) {
  const ir::Attribute* a = n.attribute(name);
  return a && a->i.has ? a->i.value : fallback;
}

bool too_big(const KernelContext& ctx, int32_t dtype, uint64_t count, std::string& why) {
  const size_t size = element_size(dtype);
  if (size && count <= ctx.max_output_bytes / size) return false;
  why = "result of " + std::to_string(count) + " elements passes the fold size limit (" +
        std::to_string(ctx.max_output_bytes) + " bytes, or its inputs' size)";
  return true;
}

}  // namespace pyonnxopt::fold
