// Taking a node that passes its input through (Identity, inference Dropout)
// out of the graph, for the passes that find such nodes.
#pragma once

#include "ir/model.h"

namespace pyonnxopt::passes {

// Makes every reader of `out` (the node's output) read `in` instead and
// removes `node`. When `out` is an output of its graph, its name is kept:
// `in` takes it, if `in` is made by a node of the same graph for this reader
// alone. Returns nullptr when done, else why it refused (graph unchanged).
const char* bypass(ir::Graph& g, ir::Node* node, ir::Value* in, ir::Value* out);

}  // namespace pyonnxopt::passes
