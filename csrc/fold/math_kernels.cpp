// Kernels for small elementwise math, comparisons, logic and reductions.
#include "fold/kernels.h"

namespace pyonnxopt::fold {

namespace {

Status logical_not(const KernelContext&, const std::vector<const Array*>& in, std::vector<Array>& out,
                   std::string& why) {
  if (in.size() != 1 || !in[0] || in[0]->dtype != kBool) {
    why = "Not takes one bool tensor";
    return Status::kUnsupported;
  }
  std::vector<uint8_t> v = in[0]->values<uint8_t>();
  for (auto& x : v) x = !x;
  out.push_back(Array::of(kBool, in[0]->dims, v));
  return Status::kDone;
}

}  // namespace

void add_math_kernels(KernelTable& t) {
  t["Not"] = logical_not;
}

}  // namespace pyonnxopt::fold
