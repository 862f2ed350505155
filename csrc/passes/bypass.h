// Taking a node that passes its input through (Identity, inference Dropout)
// out of the graph, for the passes that find such nodes.
#pragma once

#include <functional>

#include "ir/model.h"
#include "passes/pass.h"

namespace pyonnxopt::passes {

// Makes every reader of `out` (the node's output) read `in` instead and
// removes `node`. When `out` is an output of its graph, its name is kept:
// `in` takes it, if `in` is made by a node of the same graph for this reader
// alone. Returns nullptr when done, else why it refused (graph unchanged).
const char* bypass(ir::Graph& g, ir::Node* node, ir::Value* in, ir::Value* out);

// What bypass checks about the values alone (not the node): nullptr when
// every reader of `out`, and the graph output naming it, can take `in`.
const char* why_not_reroute(const ir::Graph& g, const ir::Value* in, const ir::Value* out);
// The same at a moment when `in` has `in_readers` readers: for passes that
// decide before they edit.
const char* why_not_reroute(const ir::Graph& g, const ir::Value* in, const ir::Value* out, size_t in_readers);

// A judge's answer for a node that is not of the kind its pass removes.
extern const char* const kNotMine;

// The body of the passes that remove pass-through nodes: over every graph,
// `judge` says of each standard-domain node with a first input and output
// kNotMine, a reason to refuse, or nullptr; then the node is bypassed (first
// input -> first output) and counted, or the refusal recorded. A reason is
// copied before `judge` is called again, so it may point into the judge's
// own buffer.
using Judge = std::function<const char*(const ir::Model&, const ir::Graph&, const ir::Node&)>;
PassStats bypass_where(ir::Model& model, const Judge& judge);

}  // namespace pyonnxopt::passes
