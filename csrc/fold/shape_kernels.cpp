// Kernels for the shape and index arithmetic exporters emit.
#include "fold/kernels.h"

namespace pyonnxopt::fold {

namespace {

Status identity(const KernelContext&, const std::vector<const Array*>& in, std::vector<Array>& out, std::string& why) {
  if (in.empty() || !in[0]) {
    why = "no input";
    return Status::kUnsupported;
  }
  out.push_back(*in[0]);
  return Status::kDone;
}

}  // namespace

void add_shape_kernels(KernelTable& t) {
  t["Identity"] = identity;
}

}  // namespace pyonnxopt::fold
