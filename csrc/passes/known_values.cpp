#include "passes/known_values.h"

#include <algorithm>

#include "passes/pass.h"
#include "proto/type_info.h"
#include "proto/wire.h"

namespace pyonnxopt::passes {

using namespace ir;

namespace {

std::optional<proto::TypeDesc> declared_tensor_type(const Value* v) {
  if (!v || !v->info || !v->info->type.has) return std::nullopt;
  try {
    proto::TypeDesc t = proto::decode_type(v->info->type.value);
    if (t.kind == "tensor") return t;
  } catch (const proto::ParseError&) {
  }
  return std::nullopt;
}

// An initializer whose value the graph cannot replace.
const Tensor* constant_tensor(const Value* v) {
  return v && v->initializer && !v->is_graph_input ? v->initializer : nullptr;
}

uint64_t read_le(const uint8_t* p, int bytes) {
  uint64_t x = 0;
  for (int i = bytes - 1; i >= 0; --i) x = (x << 8) | p[i];
  return x;
}

// Shape constants are small; a larger tensor is not one and is not read.
constexpr uint64_t kMaxConstantInts = 1 << 16;

}  // namespace

int32_t known_elem_type(const Value* v) {
  if (!v) return 0;
  if (v->initializer && v->initializer->data_type.has) return v->initializer->data_type.value;
  if (auto t = declared_tensor_type(v); t && t->elem_type) return t->elem_type;
  const Node* p = v->producer;
  if (p && p->op_type.value == "Cast" && is_standard_domain(p->domain.value) && v->producer_index == 0)
    if (const Attribute* to = p->attribute("to")) return static_cast<int32_t>(to->i.value);
  return 0;
}

const Tensor* known_constant(const Value* v) {
  if (!v) return nullptr;
  if (const Tensor* t = constant_tensor(v)) return t;
  const Node* p = v->producer;
  if (!p || p->op_type.value != "Constant" || !p->domain.value.empty() || p->attributes.size() != 1) return nullptr;
  const Attribute& a = p->attributes[0];
  return a.name.value == "value" ? a.t.get() : nullptr;
}

std::optional<std::vector<int64_t>> known_shape(const Value* v) {
  if (const Tensor* t = constant_tensor(v)) return t->dims;
  auto t = declared_tensor_type(v);
  if (!t || !t->has_shape) return std::nullopt;
  std::vector<int64_t> dims;
  for (const proto::Dim& d : t->dims) dims.push_back(d.has_value && d.value >= 0 ? d.value : kUnknownDim);
  return dims;
}

namespace {

bool unbacked(const std::string& p) {  // torch.export's name for a data-dependent size
  return p.size() > 1 && p[0] == 'u' && std::all_of(p.begin() + 1, p.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool counts_elements(const Node& n) {
  static const std::set<std::string> ops = {"NonZero", "TopK", "NonMaxSuppression", "Compress", "Unique",
                                            "Loop", "Scan", "If"};
  return (n.domain.value.empty() || n.domain.value == "ai.onnx") && ops.count(n.op_type.value) > 0;
}

}  // namespace

std::set<std::string> count_symbols(const Graph& graph) {
  std::set<std::string> seen, counts;
  std::set<const Value*> dependent;  // computed from a count
  auto note = [&](const Value* v) {
    auto t = declared_tensor_type(v);
    if (!t) return;
    for (const proto::Dim& d : t->dims) {
      if (d.has_value || d.param.empty()) continue;
      if (unbacked(d.param) || (seen.insert(d.param).second && dependent.count(v) && d.param.rfind("unk__", 0) == 0))
        counts.insert(d.param);
    }
  };
  for (const Value* v : graph.values())
    if (v->is_graph_input) note(v);
  for (const Node* n : graph.topological_order()) {
    bool from_count = counts_elements(*n);
    for (const Value* in : n->inputs) from_count = from_count || (in && dependent.count(in));
    for (const Value* out : n->outputs) {
      if (!out) continue;
      if (from_count) dependent.insert(out);
      note(out);
    }
  }
  return counts;
}

bool may_be_empty(const Value* v, size_t axis, const std::set<std::string>& counts) {
  if (const Tensor* t = constant_tensor(v)) return axis >= t->dims.size() || t->dims[axis] <= 0;
  auto t = declared_tensor_type(v);
  if (!t || !t->has_shape || axis >= t->dims.size()) return true;
  const proto::Dim& d = t->dims[axis];
  if (d.has_value) return d.value <= 0;
  return d.param.empty() || counts.count(d.param) > 0;  // count_symbols holds the unbacked u0, u1, ... too
}

bool fully_static(const std::vector<int64_t>& shape) {
  for (int64_t d : shape)
    if (d == kUnknownDim) return false;
  return true;
}

std::optional<std::vector<int64_t>> constant_ints(const Value* v, const char** why) {
  auto fail = [&](const char* reason) -> std::optional<std::vector<int64_t>> {
    if (why) *why = reason;
    return std::nullopt;
  };
  if (v && v->initializer && v->is_graph_input) return fail("is a graph input with an initializer, so it can be fed: not a constant");
  const Tensor* t = constant_tensor(v);
  if (!t) return fail("is not a constant (no initializer)");
  const int32_t type = t->data_type.value;
  uint64_t numel = 1;
  for (int64_t d : t->dims) {
    if (d < 0 || (d > 0 && numel > kMaxConstantInts / static_cast<uint64_t>(d))) return fail("is too large for a shape constant");
    numel *= static_cast<uint64_t>(d);
  }
  if (type != 7 && type != 6) return fail("is not an int64 or int32 tensor");
  std::vector<int64_t> out;
  out.reserve(numel);
  if (const Blob* b = t->raw_payload()) {
    const int width = type == 7 ? 8 : 4;
    if (b->length != numel * width) return fail("has data of the wrong size");
    const uint8_t* p = b->data();
    for (uint64_t i = 0; i < numel; ++i) {
      uint64_t x = read_le(p + i * width, width);
      out.push_back(width == 8 ? static_cast<int64_t>(x) : static_cast<int64_t>(static_cast<int32_t>(x)));
    }
    return out;
  }
  if (type == 7 && t->int64_data.size() == numel) return std::vector<int64_t>(t->int64_data.begin(), t->int64_data.end());
  if (type == 6 && t->int32_data.size() == numel) return std::vector<int64_t>(t->int32_data.begin(), t->int32_data.end());
  return fail("has data of the wrong size");
}


IntList int_list(const Model& model, const Graph& graph, const Node& n, const char* attr, size_t input, int64_t since) {
  IntList out;
  const int64_t opset = default_opset(model, graph);
  const Attribute* a = n.attribute(attr);
  if (opset ? opset < since : a != nullptr) {
    if (a) {
      out.present = true;
      out.values = a->ints;
    }
    return out;
  }
  if (input >= n.inputs.size() || !n.inputs[input]) return out;
  out.present = true;
  if (auto v = constant_ints(n.inputs[input], &out.why)) out.values = std::move(*v);
  return out;
}

}  // namespace pyonnxopt::passes
