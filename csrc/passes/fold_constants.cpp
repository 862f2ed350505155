#include "passes/fold_constants.h"

#include <algorithm>
#include <optional>
#include <unordered_map>

#include "fold/kernels.h"
#include "fold/partial.h"
#include "passes/known_values.h"

namespace pyonnxopt::passes {

using namespace ir;
using fold::Array;

namespace {

// The constants of one graph scope, read once and cached.
class Constants {
 public:
  // The value's data when it is a constant the kernels can read, else nullptr.
  const Array* find(const Value* v) {
    auto it = cache_.find(v);
    if (it != cache_.end()) return it->second.dtype ? &it->second : nullptr;
    Array& a = cache_[v];
    std::string why;
    const Tensor* t = known_constant(v);
    if (!t || !fold::to_array(*t, a, why)) a = Array{};
    return a.dtype ? &a : nullptr;
  }
  void forget(const Value* v) { cache_.erase(v); }
  // A value computed but left in the graph (see can_hold), for its readers.
  void remember(const Value* v, Array a) { cache_[v] = std::move(a); }

 private:
  std::unordered_map<const Value*, Array> cache_;
};

// Partial shape values by the value they describe, for the whole model (a
// subgraph may read one of its parent's).
using Partials = std::unordered_map<const Value*, fold::Partial>;

// The dims of `v` as far as they are known: a constant's, else those of its
// declared type (value_info, graph input or output), a dim_param being
// unknown. nullopt without a type or a rank.
std::optional<fold::PartialDims> known_dims(const Value* v) {
  if (const Tensor* t = known_constant(v)) {
    if (std::any_of(t->dims.begin(), t->dims.end(), [](int64_t d) { return d < 0; })) return std::nullopt;
    return fold::PartialDims(t->dims.begin(), t->dims.end());
  }
  std::optional<std::vector<int64_t>> declared = known_shape(v);  // v is no constant: its declared type
  if (!declared) return std::nullopt;
  fold::PartialDims dims;
  for (int64_t d : *declared) dims.push_back(d == kUnknownDim ? std::nullopt : std::optional<int64_t>(d));
  return dims;
}

// The node's output as a partial shape value: Shape or Size of a value with
// known rank, or Gather, Slice, Concat ... over partial values and constants.
std::optional<fold::Partial> partial_result(const fold::KernelContext& ctx, Constants& constants,
                                            const Partials& partials) {
  const Node& n = ctx.node;
  if (n.outputs.size() != 1) return std::nullopt;
  const std::string& op = n.op_type.value;
  if (op == "Shape" || op == "Size") {
    if (n.inputs.size() != 1 || !n.inputs[0]) return std::nullopt;
    std::optional<fold::PartialDims> dims = known_dims(n.inputs[0]);
    fold::Partial out;
    if (!dims || !fold::shape_or_size(ctx, *dims, out)) return std::nullopt;
    return out;
  }
  std::vector<const fold::Partial*> partial_inputs;
  std::vector<const Array*> constant_inputs;
  for (const Value* v : n.inputs) {
    auto it = v ? partials.find(v) : partials.end();
    partial_inputs.push_back(it == partials.end() ? nullptr : &it->second);
    constant_inputs.push_back(v && !partial_inputs.back() ? constants.find(v) : nullptr);
    if (v && !partial_inputs.back() && !constant_inputs.back()) return std::nullopt;
  }
  fold::Partial out;
  if (!fold::propagate(ctx, partial_inputs, constant_inputs, out)) return std::nullopt;
  return out;
}

// Equal(dims, c) where dims are a partial shape value (read from Shape: none
// is negative) and c a constant: an unknown dim never equals a negative c,
// so where every unknown meets one the result is known. TorchScript's
// Expand guard, Where(Equal(shape, -1), 1, shape), is then all false.
std::optional<Array> equal_to_negative(const fold::KernelContext& ctx, Constants& constants, const Partials& partials,
                                       const fold::Kernel& kernel) {
  const Node& n = ctx.node;
  if (n.op_type.value != "Equal" || n.inputs.size() != 2 || n.outputs.size() != 1 || !n.inputs[0] || !n.inputs[1])
    return std::nullopt;
  for (size_t side = 0; side < 2; ++side) {
    auto it = partials.find(n.inputs[side]);
    const Array* c = constants.find(n.inputs[1 - side]);
    if (it == partials.end() || !c || c->dtype != it->second.dtype || c->dims.size() > 1) continue;
    const fold::Partial& p = it->second;
    const std::vector<int64_t> cs = c->as_int64();
    if (cs.size() != 1 && cs.size() != p.values.size()) return std::nullopt;
    fold::Partial stand_in = p;  // unknown dims as 0: like them, never equal to a negative c
    for (size_t i = 0; i < p.values.size(); ++i) {
      if (p.values[i]) continue;
      if (cs[cs.size() == 1 ? 0 : i] >= 0) return std::nullopt;
      stand_in.values[i] = 0;
    }
    const Array known = stand_in.to_array();
    std::vector<const Array*> inputs = side == 0 ? std::vector<const Array*>{&known, c}
                                                 : std::vector<const Array*>{c, &known};
    std::vector<Array> outputs;
    std::string why;
    try {
      if (kernel(ctx, inputs, outputs, why) != fold::Status::kDone || outputs.size() != 1) return std::nullopt;
    } catch (const std::exception&) {
      return std::nullopt;
    }
    return std::move(outputs[0]);
  }
  return std::nullopt;
}

// Before opset 9, Constant holds only float16, float and double: where a
// result must become a Constant node (function bodies, IR < 4), other types
// stay where they are, their values passed on to the nodes that read them.
bool can_hold(bool as_nodes, int64_t opset, const std::vector<Array>& outputs) {
  if (!as_nodes || opset >= 9) return true;
  for (const Array& a : outputs)
    if (a.dtype != fold::kFloat && a.dtype != fold::kDouble && a.dtype != fold::kFloat16) return false;
  return true;
}

// An attribute that names one of the enclosing function's attributes
// (ref_attr_name) has its value only at each call site.
bool refers_to_function_attributes(const Node& n) {
  for (const Attribute& a : n.attributes)
    if (a.ref_attr_name.has) return true;
  return false;
}

// Whether folding `n` frees its input `i`: only this node reads it (the
// first slot reading it counts it), so the input's bytes leave the model.
// Otherwise a result the size of the input (a transposed copy of a shared
// weight) is growth.
bool frees(const Node& n, size_t i) {
  const Value* v = n.inputs[i];
  if (v->is_graph_output()) return false;
  for (const Use& u : v->uses)
    if (u.node != &n) return false;
  for (size_t j = 0; j < i; ++j)
    if (n.inputs[j] == v) return false;
  return true;
}

bool is_read(const Value* v) { return v && (!v->uses.empty() || v->is_graph_output()); }

// A Transpose of a constant that only MatMul/Gemm read: the transposed copy
// is the weight layout the product wants. Kept, it transposes the whole
// weight on every run (a tied embedding's lm_head: a third of GPT-2's time
// with onnxruntime's optimizations off), so it folds even when the source
// stays (growth); onnxruntime makes the same copy at load when it may.
constexpr uint64_t kWeightLayoutMaxBytes = 200'000'000;

bool is_weight_layout(const Node& n) {
  if (n.op_type.value != "Transpose" || n.outputs.size() != 1 || !n.outputs[0]) return false;
  const Value* out = n.outputs[0];
  if (out->is_graph_output() || out->uses.empty()) return false;
  for (const Use& u : out->uses) {
    const std::string& op = u.node->op_type.value;
    if (!is_standard_domain(u.node->domain.value) || (op != "MatMul" && op != "Gemm")) return false;
  }
  return true;
}

// The tensor a Constant node's one attribute states: `value` itself, or
// value_float(s) / value_int(s) / value_string(s) as a FLOAT / INT64 / STRING
// scalar or vector (torch's dynamo exporter writes value_ints for shapes).
// nullptr for sparse_value and anything malformed.
std::unique_ptr<Tensor> constant_tensor(Attribute& a) {
  const std::string& name = a.name.value;
  if (name == "value") return a.t ? std::move(a.t) : nullptr;
  auto t = std::make_unique<Tensor>();
  auto raw = [&](int32_t dtype, const void* data, size_t bytes, bool scalar, size_t count) {
    t->data_type.set(dtype);
    if (!scalar) t->dims = {int64_t(count)};
    t->set_raw(Blob::owned(std::string(static_cast<const char*>(data), bytes)));
  };
  if (name == "value_float" && a.f.has) {
    raw(1, &a.f.value, sizeof(float), true, 1);
  } else if (name == "value_floats") {
    raw(1, a.floats.data(), a.floats.size() * sizeof(float), false, a.floats.size());
  } else if (name == "value_int" && a.i.has) {
    raw(7, &a.i.value, sizeof(int64_t), true, 1);
  } else if (name == "value_ints") {
    raw(7, a.ints.data(), a.ints.size() * sizeof(int64_t), false, a.ints.size());
  } else if (name == "value_string" && a.s.has) {
    t->data_type.set(8);
    t->string_data = {a.s.value};
  } else if (name == "value_strings") {
    t->data_type.set(8);
    t->dims = {int64_t(a.strings.size())};
    t->string_data = a.strings;
  } else {
    return nullptr;
  }
  return t;
}

// Constant node -> initializer (same name), where initializers are allowed.
bool constant_to_initializer(Graph& g, Node* n, Constants& constants) {
  if (n->outputs.size() != 1 || !n->outputs[0] || n->attributes.size() != 1) return false;
  if (n->attributes[0].ref_attr_name.has) return false;  // a function attribute's value, unknown here
  std::unique_ptr<Tensor> t = constant_tensor(n->attributes[0]);
  if (!t) return false;
  Value* v = n->outputs[0];
  constants.forget(v);
  g.set_constant(v, std::move(t), false);
  return true;
}

}  // namespace

PassStats FoldConstants::run(Model& model, const PassOptions& options) const {
  PassStats stats;
  const bool old_ir = model.ir_version.has && model.ir_version.value < 4;
  Partials partials;
  for (Graph* g : model.all_graphs()) {
    const bool as_nodes = g->is_function_body || old_ir;
    const int64_t opset = default_opset(model, *g);
    Constants constants;
    for (Node* n : g->topological_order()) {
      if (!is_standard_domain(n->domain.value) || n->domain.value == "ai.onnx.ml" || n->has_subgraphs()) continue;
      const std::string& op = n->op_type.value;
      if (!std::any_of(n->outputs.begin(), n->outputs.end(), is_read)) continue;
      if (op == "Constant") {
        const std::string id = node_id(*n), out = n->outputs[0] ? n->outputs[0]->name : "";
        if (!as_nodes && !n->pinned && constant_to_initializer(*g, n, constants)) {
          ++stats.nodes_removed;
          stats.rewrites.push_back({"constant to initializer", {id}, {out}});
        }
        continue;
      }
      fold::Kernel kernel = fold::find_kernel(op);
      if (!kernel || refers_to_function_attributes(*n)) continue;
      std::vector<const Array*> inputs;
      uint64_t input_bytes = 0;
      bool all_constant = true;
      for (size_t i = 0; i < n->inputs.size(); ++i) {
        const Value* v = n->inputs[i];
        const Array* a = v ? constants.find(v) : nullptr;
        all_constant = all_constant && (a || !v);
        inputs.push_back(a);
        if (a && frees(*n, i)) input_bytes += a->nbytes();
      }
      // CastLike reads only its second input's type: a constant cast like a
      // value of known type folds (dynamo's scale, CastLike(c, q)).
      Array type_only;
      if (op == "CastLike" && inputs.size() == 2 && inputs[0] && !inputs[1] && n->inputs[1]) {
        if (const int32_t dtype = known_elem_type(n->inputs[1])) {
          type_only = Array::of_bytes(dtype, {0}, std::string());
          inputs[1] = &type_only;
          all_constant = true;
        }
      }
      const std::string label = n->display_name();
      // A weight-layout copy may be as large as its source, shared or not,
      // up to kWeightLayoutMaxBytes (past that the file and our memory grow
      // by that much, and onnxruntime at its default level or TensorRT make
      // the copy at load anyway; --fold-size-limit still allows it).
      const bool layout = is_weight_layout(*n) && inputs[0];
      if (layout) input_bytes = std::max<uint64_t>(input_bytes, std::min(inputs[0]->nbytes(), kWeightLayoutMaxBytes));
      fold::KernelContext ctx{*n, opset, std::max<uint64_t>(options.fold_size_limit, input_bytes)};
      std::vector<Array> outputs;
      if (all_constant) {
        if (n->pinned) {
          stats.refused.push_back(label + ": excluded from optimization");
          continue;
        }
        std::string why;
        fold::Status status;
        try {
          status = kernel(ctx, inputs, outputs, why);
        } catch (const std::exception&) {  // malformed attributes or data: leave the node to the fallback
          status = fold::Status::kUnsupported;
        }
        if (status == fold::Status::kTooBig) stats.refused.push_back(label + ": not folded: " + why);
        if (status != fold::Status::kDone) continue;
        if (outputs.size() < n->outputs.size())
          throw ModelError("kernel for " + op + " returned " + std::to_string(outputs.size()) + " outputs");
      } else if (std::optional<Array> equal = equal_to_negative(ctx, constants, partials, kernel)) {
        if (n->pinned) {
          stats.refused.push_back(label + ": excluded from optimization");
          continue;
        }
        outputs.push_back(std::move(*equal));
      } else {
        std::optional<fold::Partial> p = partial_result(ctx, constants, partials);
        if (!p) continue;
        if (n->pinned) {  // its output is not ours to know either
          if (p->known()) stats.refused.push_back(label + ": excluded from optimization");
          continue;
        }
        if (!p->known()) {
          partials[n->outputs[0]] = std::move(*p);
          continue;
        }
        outputs.push_back(p->to_array());
      }
      if (!can_hold(as_nodes, opset, outputs)) {
        for (size_t i = 0; i < n->outputs.size(); ++i)
          if (n->outputs[i]) constants.remember(n->outputs[i], outputs[i]);
        stats.refused.push_back(label + ": not folded: a Constant before opset 9 holds only float types "
                                "(its value is passed on to its readers)");
        continue;
      }
      Rewrite record{layout ? "folded (weight layout for MatMul/Gemm)" : "folded", {node_id(*n)}, {}};
      const std::vector<Value*> outs = n->outputs;
      for (size_t i = 0; i < outs.size(); ++i) {
        if (!outs[i]) continue;
        record.produced.push_back(outs[i]->name);
        g->set_constant(outs[i], fold::to_tensor(outputs[i]), as_nodes);
      }
      ++stats.nodes_removed;
      if (as_nodes) stats.nodes_added += static_cast<int64_t>(record.produced.size());
      stats.rewrites.push_back(std::move(record));
    }
  }
  return stats;
}

}  // namespace pyonnxopt::passes
