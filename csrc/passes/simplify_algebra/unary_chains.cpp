// Two unary nodes in a row where one suffices or neither does:
//   Neg(Neg(x)), Not(Not(x)), BitwiseNot(BitwiseNot(x))  -> x
//   f(f(x)) -> f(x) for the idempotent f: Relu, Abs, Floor, Ceil, Round, Sign
//   r(g(x)) -> g(x), r rounding (Floor, Ceil, Round), g integral already
//   Relu(Abs(x)) -> Abs(x) (floating types: Abs of INT_MIN is negative)
//   Abs(Neg(x)) -> Abs(x) (when the Neg goes)
#include "passes/known_values.h"
#include "passes/simplify_algebra/rules.h"

namespace pyonnxopt::passes::algebra {

using namespace ir;

namespace {

bool one_of(const std::string& op, std::initializer_list<const char*> ops) {
  for (const char* o : ops)
    if (op == o) return true;
  return false;
}

bool is_involution(const std::string& op) { return one_of(op, {"Neg", "Not", "BitwiseNot"}); }
bool is_idempotent(const std::string& op) { return one_of(op, {"Relu", "Abs", "Floor", "Ceil", "Round", "Sign"}); }
bool is_rounding(const std::string& op) { return one_of(op, {"Floor", "Ceil", "Round"}); }
// Outputs only integers (and ±0, ±inf, NaN), which rounding keeps.
bool is_integral(const std::string& op) { return is_rounding(op) || op == "Sign"; }

// Whether outer(inner(x)) is inner(x) for every x of type `type` (0: unknown).
const char* outer_adds_nothing(const std::string& outer, const std::string& inner, int32_t type) {
  if (outer == inner && is_idempotent(outer)) return nullptr;
  if (is_rounding(outer) && is_integral(inner)) return nullptr;
  if (outer == "Relu" && inner == "Abs") {
    // Abs keeps NaN and onnxruntime's Relu does too; for integers Abs(INT_MIN) < 0.
    if (!type) return "element type unknown (Relu(Abs(x)) is Abs(x) for floating types only)";
    return is_floating(type) ? nullptr : kNotMine;
  }
  return kNotMine;
}

}  // namespace

const char* shorten_unary_chain(Context& ctx, Graph& g, Node& outer) {
  const std::string& op = outer.op_type.value;
  if (!is_involution(op) && !is_idempotent(op)) return kNotMine;
  if (!single_output(outer) || outer.inputs.size() != 1 || !outer.inputs[0]) return kNotMine;
  Node* inner = producer_in(g, outer.inputs[0]);
  if (!inner || inner->inputs.size() != 1 || !inner->inputs[0]) return kNotMine;
  Value* m = inner->outputs[0];
  Value* x = inner->inputs[0];
  const std::string& inner_op = inner->op_type.value;
  const std::string inner_id = node_id(*inner);

  if (is_involution(op) && inner_op == op) {
    if (inner->pinned) return "excluded from optimization";
    if (const char* why = ctx.bypass_node(g, outer, x)) return why;
    if (ctx.remove_if_unread(g, inner)) {
      auto& consumed = ctx.stats->rewrites.back().consumed;
      consumed.insert(consumed.begin(), inner_id);
    }
    return nullptr;
  }
  if (op == "Abs" && inner_op == "Neg") {
    // Only worth it when the Neg goes: otherwise both still run.
    if (!read_once(m)) return kNotMine;
    if (outer.pinned || inner->pinned) return "excluded from optimization";
    g.set_input(&outer, 0, x);
    ctx.remove_if_unread(g, inner);
    ctx.stats->rewrites.push_back({"bypassed", {inner_id}, {}});
    return nullptr;
  }
  const int32_t type = known_elem_type(m) ? known_elem_type(m) : known_elem_type(x);
  if (const char* why = outer_adds_nothing(op, inner_op, type)) return why;
  return ctx.bypass_node(g, outer, m);
}

}  // namespace pyonnxopt::passes::algebra
