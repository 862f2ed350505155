#include "passes/permutation.h"

namespace pyonnxopt::passes {

bool is_permutation(const Perm& p) {
  std::vector<bool> seen(p.size(), false);
  for (int64_t a : p) {
    if (a < 0 || a >= static_cast<int64_t>(p.size()) || seen[static_cast<size_t>(a)]) return false;
    seen[static_cast<size_t>(a)] = true;
  }
  return true;
}

bool is_identity(const Perm& p) {
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] != static_cast<int64_t>(i)) return false;
  return true;
}

Perm inverse(const Perm& p) {
  Perm inv(p.size());
  for (size_t i = 0; i < p.size(); ++i) inv[static_cast<size_t>(p[i])] = static_cast<int64_t>(i);
  return inv;
}

Perm compose(const Perm& first, const Perm& second) {
  Perm c(second.size());
  for (size_t i = 0; i < second.size(); ++i) c[i] = first[static_cast<size_t>(second[i])];
  return c;
}

bool is_transpose(const ir::Node& n) {
  const std::string& d = n.domain.value;
  return n.op_type.value == "Transpose" && (d.empty() || d == "ai.onnx") && n.inputs.size() == 1 && n.inputs[0] &&
         n.outputs.size() == 1 && n.outputs[0];
}

std::optional<Perm> transpose_perm(const ir::Node& n, int64_t rank) {
  if (const ir::Attribute* a = n.attribute("perm")) {
    if (!is_permutation(a->ints) || (rank >= 0 && static_cast<int64_t>(a->ints.size()) != rank)) return std::nullopt;
    return a->ints;
  }
  if (rank < 0) return std::nullopt;
  Perm reversed;
  for (int64_t i = rank; i-- > 0;) reversed.push_back(i);
  return reversed;
}

}  // namespace pyonnxopt::passes
