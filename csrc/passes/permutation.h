// Transpose perms: composing, inverting, reading them off a node.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "ir/model.h"

namespace pyonnxopt::passes {

// A Transpose's perm: output axis i is input axis perm[i].
using Perm = std::vector<int64_t>;

bool is_permutation(const Perm& p);
bool is_identity(const Perm& p);
Perm inverse(const Perm& p);
// Transpose(Transpose(x, first), second) == Transpose(x, compose(first, second)).
Perm compose(const Perm& first, const Perm& second);

// A default-domain Transpose with one input and one output.
bool is_transpose(const ir::Node& n);

// The perm of Transpose `n` when it reads a value of rank `rank` (-1:
// unknown): its attribute, or without one the reversal ONNX defaults to.
// nullopt when that is not known or the attribute is no permutation of
// `rank` axes.
std::optional<Perm> transpose_perm(const ir::Node& n, int64_t rank);

}  // namespace pyonnxopt::passes
