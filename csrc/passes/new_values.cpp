#include "passes/new_values.h"

#include "fold/array.h"

namespace pyonnxopt::passes {

using namespace ir;

FreshNames::FreshNames(const Model& model) {
  // Node names too: passes name new nodes with them, and onnxruntime refuses
  // two nodes of one name (a node keeps its name when its output is renamed).
  for (const Graph* g : model.all_graphs()) {
    for (const Value* v : g->values()) taken_.insert(v->name);
    for (const Node* n : g->nodes)
      if (!n->name.value.empty()) taken_.insert(n->name.value);
  }
}

std::string FreshNames::make(const std::string& base) {
  std::string name = base;
  for (int i = 1; !taken_.insert(name).second; ++i) name = base + "_" + std::to_string(i);
  return name;
}

Attribute int_attribute(const char* name, int64_t value) {
  Attribute a;
  a.name.set(name);
  a.type.set(int32_t(AttrType::kInt));
  a.i.set(value);
  return a;
}

Attribute ints_attribute(const char* name, std::vector<int64_t> values) {
  Attribute a;
  a.name.set(name);
  a.type.set(int32_t(AttrType::kInts));
  a.ints = std::move(values);
  return a;
}

std::unique_ptr<Tensor> int_tensor(const std::vector<int64_t>& values, int32_t dtype) {
  const std::vector<int64_t> dims{static_cast<int64_t>(values.size())};
  if (dtype == fold::kInt32) {
    std::vector<int32_t> narrow(values.begin(), values.end());
    return fold::to_tensor(fold::Array::of(fold::kInt32, dims, narrow));
  }
  return fold::to_tensor(fold::Array::of(fold::kInt64, dims, values));
}

Value* add_constant(const Model& model, Graph& g, std::unique_ptr<Tensor> t, const std::string& name, Node* before,
                    bool& added_node) {
  added_node = g.is_function_body || (model.ir_version.has && model.ir_version.value < 4);
  if (!added_node) return g.add_initializer(name, std::move(t));
  Value* v = g.create_value(name);
  Node* c = g.new_node();
  c->op_type.set("Constant");
  c->name.set(name);
  Attribute& value = c->attributes.emplace_back();
  value.name.set("value");
  value.type.set(int32_t(AttrType::kTensor));
  t->name.clear();
  value.t = std::move(t);
  c->outputs.push_back(v);
  g.add_node(c, before);
  return v;
}

}  // namespace pyonnxopt::passes
