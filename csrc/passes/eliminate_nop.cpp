#include "passes/eliminate_nop.h"

#include "passes/bypass.h"
#include "proto/type_info.h"
#include "proto/wire.h"

namespace pyonnxopt::passes {

using namespace ir;

int32_t known_elem_type(const Value* v) {
  if (!v) return 0;
  if (v->initializer && v->initializer->data_type.has) return v->initializer->data_type.value;
  if (!v->info || !v->info->type.has) return 0;
  try {
    proto::TypeDesc t = proto::decode_type(v->info->type.value);
    return t.kind == "tensor" ? t.elem_type : 0;
  } catch (const proto::ParseError&) {
    return 0;
  }
}

namespace {

const Attribute* attribute(const Node& n, const char* name) {
  for (const auto& a : n.attributes)
    if (a.name.value == name) return &a;
  return nullptr;
}

int live_outputs(const Node& n) {
  int k = 0;
  for (const Value* v : n.outputs) k += v != nullptr;
  return k;
}

// nullptr when `n` returns its first input unchanged as its first output,
// else why not (kNotMine when it is simply not such a node).
const char* why_not_nop(const Node& n) {
  const std::string& op = n.op_type.value;
  if (n.inputs.empty() || !n.inputs[0] || n.outputs.empty() || !n.outputs[0]) return kNotMine;
  if (op == "Concat" || op == "Sum" || op == "Mean" || op == "Max" || op == "Min")
    return n.inputs.size() == 1 ? nullptr : kNotMine;
  if (op == "Split") {
    // One output and no split sizes to check: the whole input.
    return n.outputs.size() == 1 && n.inputs.size() == 1 && !attribute(n, "split") ? nullptr : kNotMine;
  }
  if (op == "Transpose") {
    const Attribute* perm = attribute(n, "perm");
    if (!perm) return "Transpose without perm: a no-op only at rank <= 1";
    for (size_t i = 0; i < perm->ints.size(); ++i)
      if (perm->ints[i] != static_cast<int64_t>(i)) return kNotMine;
    return nullptr;
  }
  if (op == "Cast" || op == "CastLike") {
    int32_t from = known_elem_type(n.inputs[0]);
    int32_t to = 0;
    if (op == "Cast") {
      const Attribute* a = attribute(n, "to");
      to = a ? static_cast<int32_t>(a->i.value) : 0;
    } else if (n.inputs.size() > 1) {
      to = known_elem_type(n.inputs[1]);
    }
    if (!from || !to) return "input or target type unknown";
    return from == to ? nullptr : kNotMine;
  }
  return kNotMine;
}

}  // namespace

PassStats EliminateNop::run(Model& model, const PassOptions&) const {
  return bypass_where(model, [](const Model&, const Graph&, const Node& n) -> const char* {
    return live_outputs(n) == 1 ? why_not_nop(n) : kNotMine;
  });
}

}  // namespace pyonnxopt::passes
