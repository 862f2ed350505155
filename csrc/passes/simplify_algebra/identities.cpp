// Binary nodes with a constant operand that changes nothing (x + 0, x * 1,
// x AND true, ...), and Where with a constant condition: the node goes and
// its readers read x.
#include <type_traits>

#include "passes/known_values.h"
#include "passes/simplify_algebra/rules.h"

namespace pyonnxopt::passes::algebra {

using namespace ir;

namespace {

enum class Neutral { kZero, kOne, kTrue, kFalse, kAllBits };

struct Identity {
  const char* op;
  Neutral neutral;
  bool either_side;  // commutative: the constant may come first
  int64_t since;     // opset with numpy broadcasting (or the op's first)
};

constexpr Identity kIdentities[] = {
    {"Add", Neutral::kZero, true, 7},         {"Sub", Neutral::kZero, false, 7},
    {"Mul", Neutral::kOne, true, 7},          {"Div", Neutral::kOne, false, 7},
    {"Pow", Neutral::kOne, false, 7},         {"And", Neutral::kTrue, true, 7},
    {"Or", Neutral::kFalse, true, 7},         {"Xor", Neutral::kFalse, true, 7},
    {"BitwiseAnd", Neutral::kAllBits, true, 18}, {"BitwiseOr", Neutral::kZero, true, 18},
    {"BitwiseXor", Neutral::kZero, true, 18},
};

const Identity* identity_of(const std::string& op) {
  for (const Identity& i : kIdentities)
    if (op == i.op) return &i;
  return nullptr;
}

// Every element is the neutral value (a zero of either sign counts as 0).
bool all_neutral(const fold::Array& a, Neutral k) {
  return every_element(a, [k](auto v) {
    using T = decltype(v);
    switch (k) {
      case Neutral::kZero: return v == T(0);
      case Neutral::kOne: return v == T(1);
      case Neutral::kTrue: return std::is_same_v<T, bool> && v == T(1);
      case Neutral::kFalse: return std::is_same_v<T, bool> && v == T(0);
      case Neutral::kAllBits:
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) return v == static_cast<T>(~T(0));
        return false;
    }
    return false;
  });
}

bool is_64_bit_integer(int32_t t) { return t == fold::kInt64 || t == fold::kUint64; }

const char* binary_identity(Context& ctx, Graph& g, Node& n, const Identity& form) {
  if (n.inputs.size() != 2 || !n.inputs[0] || !n.inputs[1]) return kNotMine;
  fold::Array c;
  size_t at = 2;  // the constant's slot
  for (size_t p : {size_t{1}, size_t{0}}) {
    if (p == 0 && !form.either_side) break;
    if (read_constant(n.inputs[p], c) && all_neutral(c, form.neutral)) {
      at = p;
      break;
    }
  }
  if (at == 2) return kNotMine;
  Value* x = n.inputs[1 - at];
  if (known_constant(x)) return kNotMine;  // all constant: fold_constants' work
  if (ctx.opset(g) < form.since)  // Bitwise* do not exist before 18; before 7 `broadcast` decides the shape
    return form.since == 7 ? "before opset 7 the broadcast attribute decides the shape" : kNotMine;
  const int32_t type = known_elem_type(x);
  if (form.neutral == Neutral::kOne && n.op_type.value == "Pow") {
    // onnxruntime raises 64-bit integers through double, which rounds past 2^53.
    if (!type) return "base type unknown (onnxruntime's int64 Pow(x, 1) is not x)";
    if (is_64_bit_integer(type)) return "onnxruntime computes 64-bit integer Pow in double: Pow(x, 1) is not x past 2^53";
  } else if (type && type != c.dtype) {
    return "input and constant types differ";
  }
  if (const char* why = keeps_shape(ctx, c.dims, x, "the constant")) return why;
  return ctx.bypass_node(g, n, x);
}

// Where(c, a, b) with c constant and all true (-> a) or all false (-> b).
const char* where_identity(Context& ctx, Graph& g, Node& n) {
  if (n.inputs.size() != 3 || !n.inputs[0] || !n.inputs[1] || !n.inputs[2]) return kNotMine;
  fold::Array cond;
  if (!read_constant(n.inputs[0], cond) || cond.dtype != fold::kBool) return kNotMine;
  size_t chosen = 0;
  if (all_neutral(cond, Neutral::kTrue)) chosen = 1;
  else if (all_neutral(cond, Neutral::kFalse)) chosen = 2;
  else return kNotMine;
  Value* x = n.inputs[chosen];
  const Value* other = n.inputs[3 - chosen];
  if (known_constant(x) && known_constant(other)) return kNotMine;  // fold_constants' work
  const int32_t tx = known_elem_type(x), to = known_elem_type(other);
  if (tx && to && tx != to) return "branch types differ";
  if (const char* why = keeps_shape(ctx, cond.dims, x, "the condition")) return why;
  auto other_dims = dims_of(other);
  if (!other_dims) return "shape of the branch not taken unknown";
  if (const char* why = keeps_shape(ctx, *other_dims, x, "the branch not taken")) return why;
  return ctx.bypass_node(g, n, x);
}

}  // namespace

const char* remove_identity(Context& ctx, Graph& g, Node& n) {
  if (!single_output(n)) return kNotMine;
  if (n.op_type.value == "Where") return where_identity(ctx, g, n);
  const Identity* form = identity_of(n.op_type.value);
  return form ? binary_identity(ctx, g, n, *form) : kNotMine;
}

}  // namespace pyonnxopt::passes::algebra
