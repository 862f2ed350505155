// The rule families of simplify_algebra, one file each. A rule looks at one
// node and returns kNotMine (not its kind), nullptr (rewritten, counted in
// ctx.stats) or why it refused (graph unchanged).
#pragma once

#include "ir/model.h"
#include "passes/bypass.h"  // kNotMine
#include "passes/simplify_algebra/context.h"

namespace pyonnxopt::passes::algebra {

using Rule = const char* (*)(Context& ctx, ir::Graph& g, ir::Node& n);

const char* remove_identity(Context& ctx, ir::Graph& g, ir::Node& n);      // identities.cpp
const char* shorten_unary_chain(Context& ctx, ir::Graph& g, ir::Node& n);  // unary_chains.cpp
const char* bound_with_clip(Context& ctx, ir::Graph& g, ir::Node& n);      // clip_bounds.cpp
const char* merge_constants(Context& ctx, ir::Graph& g, ir::Node& n);      // merge_constants.cpp
const char* undo_concat(Context& ctx, ir::Graph& g, ir::Node& n);          // concat_readers.cpp
const char* flatten_concat(Context& ctx, ir::Graph& g, ir::Node& n);       // concat_readers.cpp
const char* reduce_to_squeeze(Context& ctx, ir::Graph& g, ir::Node& n);    // reduce_to_squeeze.cpp
const char* join_shape_slices(Context& ctx, ir::Graph& g, ir::Node& n);    // shape_slices.cpp

}  // namespace pyonnxopt::passes::algebra
