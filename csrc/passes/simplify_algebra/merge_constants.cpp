// Two constant additions (or two constant products) in a row become one,
// the constants combined by the folding kernels:
//   (x + a) + b -> x + (a + b)     (x - a) + b -> x + (b - a)     (x - a) - b -> x - (a + b)
//   (a - x) + b -> (a + b) - x     b - (x + a) -> (b - a) - x     (x * a) * b -> x * (a * b)
//   integers: (x / a) / b -> x / (a * b)
// Each node is y = ±x ± c; the pair is ±x ± (c1 ± c2), one kernel op on
// the constants. Floating point: the sum is reassociated, so results may
// differ in the last bits (and x + a may overflow where x + (a + b) does
// not, or the reverse); integers wrap the same either way. Integer
// division truncates, and truncating twice is truncating once by the
// product (|x| / |a| / |b| rounded down either way, the sign the same), as
// long as the product neither overflows nor is 0.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "fold/kernels.h"
#include "passes/known_values.h"
#include "passes/simplify_algebra/rules.h"

namespace pyonnxopt::passes::algebra {

using namespace ir;

namespace {

using Operands = std::vector<const fold::Array*>;

// y = (x_negated ? -x : x) (c_negated ? - : +) c, y = x * c, or y = x / c.
struct Step {
  bool additive = false;
  bool divides = false;
  Value* x = nullptr;
  Value* c = nullptr;
  bool x_negated = false, c_negated = false;
};

bool as_step(const Node& n, Step& out) {
  const std::string& op = n.op_type.value;
  if (op != "Add" && op != "Sub" && op != "Mul" && op != "Div") return false;
  if (!single_output(n) || n.inputs.size() != 2 || !n.inputs[0] || !n.inputs[1]) return false;
  const bool c0 = known_constant(n.inputs[0]) != nullptr, c1 = known_constant(n.inputs[1]) != nullptr;
  if (c0 == c1) return false;  // no constant, or all constant (fold_constants' work)
  if (op == "Div" && c0) return false;  // a constant divided by x
  out.additive = op == "Add" || op == "Sub";
  out.divides = op == "Div";
  out.x = n.inputs[c0 ? 1 : 0];
  out.c = n.inputs[c0 ? 0 : 1];
  out.x_negated = op == "Sub" && c0;
  out.c_negated = op == "Sub" && c1;
  return true;
}

// What the pair becomes: sign(x) x + sign(k) k, k = combine(c1, c2).
struct Merged {
  const char* kernel;  // on (first, second)
  bool swap;           // the kernel takes (c2, c1)
  bool x_negated, k_negated;
};

Merged merged(const Step& inner, const Step& outer) {
  if (!outer.additive) return {"Mul", false, false, false};  // a product, or the divisors' product
  const bool t1 = outer.x_negated != inner.c_negated;  // c1's sign in the sum: negative?
  const bool t2 = outer.c_negated;
  const bool x_negated = outer.x_negated != inner.x_negated;
  if (t1 == t2) return {"Add", false, x_negated, t1};
  return {"Sub", t1, x_negated, false};  // c1 - c2, or c2 - c1
}

// Over- or underflow that the two constants did not have.
const char* lost_range(const fold::Array& a, const fold::Array& b, const fold::Array& k, bool product) {
  if (!is_floating(k.dtype)) return nullptr;
  const bool half = k.dtype == fold::kFloat16;
  auto finite = [](auto v) {
    if constexpr (std::is_floating_point_v<decltype(v)>) return bool(std::isfinite(v));
    return true;
  };
  auto normal = [half](auto v) {
    using T = decltype(v);
    if constexpr (std::is_floating_point_v<T>) {
      const T smallest = half ? T(6.103515625e-05) : std::numeric_limits<T>::min();
      return std::isfinite(v) && std::fabs(v) >= smallest;
    }
    return true;
  };
  if (!product && every_element(a, finite) && every_element(b, finite) && !every_element(k, finite))
    return "the merged constant overflows";
  if (product && every_element(a, normal) && every_element(b, normal) && !every_element(k, normal))
    return "the merged constant over- or underflows";
  return nullptr;
}

// Why integer divisors `a` and `b` cannot become one, `a * b`: a zero
// (the original's error must stay), or a product that may overflow.
const char* unsafe_divisors(const fold::Array& a, const fold::Array& b) {
  bool zero = false, known = true;
  auto largest = [&](const fold::Array& c) {
    __int128 most = 0;
    known = known && every_element(c, [&](auto v) {
      using T = decltype(v);
      if constexpr (!std::is_integral_v<T> || std::is_same_v<T, bool>) {
        return false;
      } else {
        const __int128 w = v < 0 ? -__int128(v) : __int128(v);
        zero = zero || w == 0;
        most = std::max(most, w);
        return true;
      }
    });
    return most;
  };
  const __int128 product = largest(a) * largest(b);
  if (!known) return "a constant the kernels cannot read";
  if (zero) return "a divisor is 0";
  const int bits = int(fold::element_size(a.dtype)) * 8;
  if (product > (__int128(1) << (bits - 1)) - 1) return "the divisors' product may overflow";
  return nullptr;
}

}  // namespace

const char* merge_constants(Context& ctx, Graph& g, Node& n) {
  Step outer, inner_step;
  if (!as_step(n, outer)) return kNotMine;
  Node* inner = producer_in(g, outer.x);
  if (!inner || !as_step(*inner, inner_step) || inner_step.additive != outer.additive ||
      inner_step.divides != outer.divides)
    return kNotMine;
  const int64_t opset = ctx.opset(g);
  if (opset < 7) return "before opset 7 the broadcast attribute decides the shape";
  if (!read_once(outer.x)) return ctx.say("'" + outer.x->name + "' is read by another node or is a graph output");
  if (n.pinned || inner->pinned) return "excluded from optimization";
  fold::Array c1, c2;
  if (!read_constant(inner_step.c, c1) || !read_constant(outer.c, c2)) return "a constant the kernels cannot read";
  if (c1.dtype != c2.dtype) return "constants of different types";
  if (outer.divides) {
    if (is_floating(c1.dtype)) return kNotMine;  // x / a / b and x / (a * b) round apart
    if (const char* unsafe = unsafe_divisors(c1, c2)) return unsafe;
  }
  const Merged m = merged(inner_step, outer);
  if (m.x_negated && m.k_negated) return kNotMine;  // -x - k: not one node (and no pair gives it)

  // The merged constant may not outgrow the two (broadcasting can), unless
  // it is small: Longformer's index arithmetic adds [4, 1] and then [5].
  // The output's shape is the same either way, and one op computes it.
  constexpr size_t kSmallElements = 64;
  fold::KernelContext kc{n, opset, std::max(c1.nbytes() + c2.nbytes(), kSmallElements * fold::element_size(c1.dtype))};
  std::vector<fold::Array> out;
  std::string why;
  fold::Status status;
  try {
    status = fold::find_kernel(m.kernel)(kc, m.swap ? Operands{&c2, &c1} : Operands{&c1, &c2}, out, why);
  } catch (const std::exception& e) {
    return ctx.say(std::string("constants not combined: ") + e.what());
  }
  if (status == fold::Status::kTooBig) return "the merged constant would be larger than the two";
  if (status != fold::Status::kDone) return ctx.say("constants not combined: " + why);
  if (const char* lost = lost_range(c1, c2, out[0], !outer.additive)) return lost;

  Value* k = ctx.add_constant(g, &n, single_output(n)->name + "_merged", out[0]);
  if (!k) return ctx.reason();
  Node* one = g.new_node();
  one->op_type.set(outer.divides                            ? "Div"
                   : m.kernel == std::string("Mul")        ? "Mul"
                   : m.x_negated || m.k_negated            ? "Sub"
                                                           : "Add");
  if (n.name.has) one->name = n.name;
  one->domain = n.domain;
  one->inputs = m.x_negated ? std::vector<Value*>{k, inner_step.x} : std::vector<Value*>{inner_step.x, k};
  Rewrite record{"merged", {node_id(*inner), node_id(n)}, {}};
  ctx.count_removed(n);
  g.replace_node(&n, one);
  ++ctx.stats->nodes_added;
  ctx.remove_if_unread(g, inner);
  record.produced = {node_id(*one), k->name};
  ctx.stats->rewrites.push_back(std::move(record));
  return nullptr;
}

}  // namespace pyonnxopt::passes::algebra
