#include "passes/transpose_push.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <string_view>
#include <unordered_set>

#include "fold/array.h"
#include "fold/kernels.h"
#include "passes/known_values.h"
#include "passes/new_values.h"
#include "passes/pass.h"

namespace pyonnxopt::passes {

using namespace ir;

const char* const kNoRule = "no rule to move a Transpose through this op";

namespace {

using Names = std::unordered_set<std::string_view>;

// Elementwise ops of one tensor; later inputs (Clip's min/max, CastLike's
// target) are parameters whose layout does not matter.
const Names kUnary = {
    "Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "BitwiseNot", "Cast", "CastLike", "Ceil", "Celu",
    "Clip", "Cos", "Cosh", "Elu", "Erf", "Exp", "Floor", "Gelu", "HardSigmoid", "HardSwish", "Identity", "IsInf",
    "IsNaN", "LeakyRelu", "Log", "Mish", "Neg", "Not", "Reciprocal", "Relu", "Round", "Selu", "Shrink", "Sigmoid",
    "Sign", "Sin", "Sinh", "Softplus", "Softsign", "Sqrt", "Tan", "Tanh", "ThresholdedRelu"};

// onnxruntime's elementwise activations, which --target ort writes: on one
// tensor they are unary too (FastGelu's optional bias is per last axis).
const Names kMicrosoftUnary = {"FastGelu", "Gelu", "QuickGelu"};

// Elementwise ops whose inputs broadcast against each other.
const Names kBroadcasting = {
    "Add", "And", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "Div", "Equal", "Greater", "GreaterOrEqual",
    "Less", "LessOrEqual", "Max", "Mean", "Min", "Mod", "Mul", "Or", "Pow", "PRelu", "Sub", "Sum", "Where", "Xor"};

const Names kReduce = {"ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean",
                       "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare"};

const Names kSoftmax = {"Softmax", "LogSoftmax", "Hardmax"};

const Tensor* constant_of(const Value* v) { return v && v->initializer && !v->is_graph_input ? v->initializer : nullptr; }

int64_t int_attr(const Node& n, const char* name, int64_t otherwise) {
  const Attribute* a = n.attribute(name);
  return a ? a->i.value : otherwise;
}

const char* refuse(Push& out, std::string text) {
  out.reason = std::move(text);
  return out.reason.c_str();
}

std::string quoted(const Value* v) { return "'" + v->name + "'"; }

int64_t rank_of(const PushQuery& q) { return static_cast<int64_t>(q.perm.size()); }

// `a` in [0, rank), or -1 when out of range.
int64_t normalized(int64_t a, int64_t rank) {
  if (a < -rank || a >= rank) return -1;
  return a < 0 ? a + rank : a;
}

// Axes of the transposed value as axes of v.
bool map_axes(const PushQuery& q, const std::vector<int64_t>& axes, std::vector<int64_t>& out) {
  out.clear();
  for (int64_t a : axes) {
    const int64_t n = normalized(a, rank_of(q));
    if (n < 0) return false;
    out.push_back(q.perm[static_cast<size_t>(n)]);
  }
  return true;
}

// One entry per axis of the transposed value (and, with two halves, per
// begin/end), reordered to v's axes: out[q[i]] = in[i].
std::vector<size_t> axis_order(const Perm& q, size_t halves) {
  const Perm inv = inverse(q);
  std::vector<size_t> order;
  for (size_t h = 0; h < halves; ++h)
    for (int64_t i : inv) order.push_back(h * q.size() + static_cast<size_t>(i));
  return order;
}

template <class T>
std::vector<T> reordered(const std::vector<T>& in, const std::vector<size_t>& order) {
  std::vector<T> out;
  for (size_t i : order) out.push_back(in[i]);
  return out;
}

// The constant's elements in `order` (new[j] = old[order[j]]), any fixed-width type.
std::shared_ptr<const Tensor> reordered_constant(const Tensor& t, const std::vector<size_t>& order) {
  fold::Array a;
  std::string why;
  if (!fold::to_array(t, a, why) || a.numel() != order.size()) return nullptr;
  const size_t width = fold::element_size(a.dtype);
  if (!width) return nullptr;
  std::string bytes(order.size() * width, '\0');
  for (size_t j = 0; j < order.size(); ++j) std::memcpy(&bytes[j * width], a.bytes.data() + order[j] * width, width);
  return fold::to_tensor(fold::Array::of_bytes(a.dtype, a.dims, std::move(bytes)));
}

bool readable(const Tensor& t) {
  fold::Array a;
  std::string why;
  return fold::to_array(t, a, why) && fold::element_size(a.dtype) != 0;
}

// Marks the inputs transposed by q and gives every output perm q; an input
// from `params` on is a parameter, which may not be transposed.
const char* start(const PushQuery& q, Push& out, size_t params) {
  const Node& n = q.node;
  out.inputs.assign(n.inputs.size(), PushedInput{});
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (!n.inputs[i] || !q.transposed(*n.inputs[i])) continue;
    if (i >= params) return "the transposed value is also read as a parameter";
    out.inputs[i].kind = PushedInput::kPermuted;
  }
  out.outputs.clear();
  for (const Value* v : n.outputs) out.outputs.push_back(v ? q.perm : Perm{});
  return nullptr;
}

bool read_elsewhere(const Value* v, const Node& n) {
  if (v->is_graph_output()) return true;
  for (const Use& u : v->uses)
    if (u.node != &n) return true;
  return false;
}

}  // namespace

bool keeps_data_order(const std::vector<int64_t>& dims, const Perm& perm) {
  if (dims.size() != perm.size()) return false;
  int64_t last = -1;  // the input axis of the last dim other than 1, in output order
  bool moved_unknown = false;
  for (size_t i = 0; i < perm.size(); ++i) {
    const int64_t axis = perm[i], d = dims[static_cast<size_t>(axis)];
    if (d == 0) return false;
    if (d != 1) {
      if (axis < last) return false;
      last = axis;
    }
    if (d == kUnknownDim && axis != static_cast<int64_t>(i)) {
      if (moved_unknown) return false;
      moved_unknown = true;
    }
  }
  return true;
}

namespace {

// Why constant `v` (`c`) cannot be replaced by a transposed copy of it, or
// nullptr: read elsewhere and not small (the copy would grow the model), or
// data that cannot be read.
const char* copy_refusal(const PushQuery& q, const Value& v, const Tensor& c, Push& out) {
  uint64_t count = 1;
  for (int64_t d : c.dims) count *= static_cast<uint64_t>(std::max<int64_t>(d, 0));
  if (count > kSmallConstant && read_elsewhere(&v, q.node))
    return refuse(out, "constant " + quoted(&v) + " is read elsewhere: a transposed copy would grow the model");
  if (!readable(c)) return refuse(out, "constant " + quoted(&v) + " has data that cannot be transposed here");
  return nullptr;
}

// An input beside the transposed ones: a tensor of 1s shape, or a constant
// to transpose. `same_rank`: it must have the full rank (Concat), else it
// broadcasts (numpy: leading 1s).
const char* operand(const PushQuery& q, size_t slot, bool same_rank, Push& out) {
  const Value* v = q.node.inputs[slot];
  PushedInput& in = out.inputs[slot];
  const int64_t r = rank_of(q);
  std::optional<std::vector<int64_t>> shape = known_shape(v);
  if (!shape) return refuse(out, "operand " + quoted(v) + " has an unknown rank");
  const int64_t rank = static_cast<int64_t>(shape->size());
  if (rank > r || (same_rank && rank != r))
    return refuse(out, "operand " + quoted(v) + " has rank " + std::to_string(rank) + ", the transposed value " +
                           std::to_string(r));
  if (std::all_of(shape->begin(), shape->end(), [](int64_t d) { return d == 1; })) return nullptr;  // same in any layout
  const Tensor* c = constant_of(v);
  if (!c && rank == r && keeps_data_order(*shape, inverse(q.perm))) {
    in.kind = PushedInput::kUnitMoved;
    return nullptr;
  }
  if (!c) return refuse(out, "operand " + quoted(v) + " is neither transposed the same way nor a constant");
  if (const char* why = copy_refusal(q, *v, *c, out)) return why;
  in.kind = PushedInput::kTransposedConstant;
  return nullptr;
}

const char* broadcasting(const PushQuery& q, int64_t opset, Push& out) {
  const Node& n = q.node;
  if (int_attr(n, "broadcast", 0) != 0) return "legacy broadcasting (broadcast attribute)";
  if (n.op_type.value == "PRelu" && opset && opset < 7) return "PRelu before opset 7 broadcasts its own way";
  if (const char* why = start(q, out, n.inputs.size())) return why;
  for (size_t i = 0; i < n.inputs.size(); ++i)
    if (n.inputs[i] && out.inputs[i].kind == PushedInput::kKeep)
      if (const char* why = operand(q, i, false, out)) return why;
  return nullptr;
}

const char* quantize(const PushQuery& q, Push& out) {
  const Node& n = q.node;
  if (int_attr(n, "block_size", 0) != 0) return "blocked quantization";
  if (const char* why = start(q, out, 1)) return why;
  for (size_t i = 1; i < n.inputs.size(); ++i) {
    if (!n.inputs[i]) continue;
    std::optional<std::vector<int64_t>> shape = known_shape(n.inputs[i]);
    if (!shape) return refuse(out, "quantization parameter " + quoted(n.inputs[i]) + " has an unknown rank");
    if (!shape->empty()) return "per-axis quantization (its axis would move)";
  }
  return nullptr;
}

const char* concat(const PushQuery& q, Push& out) {
  const Node& n = q.node;
  const Attribute* axis = n.attribute("axis");
  if (!axis) return "Concat without axis";
  const int64_t a = normalized(axis->i.value, rank_of(q));
  if (a < 0) return "axis out of range";
  if (const char* why = start(q, out, n.inputs.size())) return why;
  for (size_t i = 0; i < n.inputs.size(); ++i)
    if (n.inputs[i] && out.inputs[i].kind == PushedInput::kKeep)
      if (const char* why = operand(q, i, true, out)) return why;
  out.attributes.push_back(int_attribute("axis", q.perm[static_cast<size_t>(a)]));
  return nullptr;
}

// Split, Softmax family, ArgMax/ArgMin: one `axis` attribute.
const char* one_axis(const PushQuery& q, int64_t fallback, Push& out) {
  const int64_t a = normalized(int_attr(q.node, "axis", fallback), rank_of(q));
  if (a < 0) return "axis out of range";
  if (const char* why = start(q, out, 1)) return why;
  out.attributes.push_back(int_attribute("axis", q.perm[static_cast<size_t>(a)]));
  return nullptr;
}

// The output's perm when the axes marked `reduced` are gone: what q says
// of the kept ones, renumbered; empty when they keep their order.
Perm kept_perm(const Perm& q, const std::vector<bool>& reduced) {
  std::vector<int64_t> kept;
  for (size_t i = 0; i < q.size(); ++i)
    if (!reduced[i]) kept.push_back(q[i]);
  std::vector<int64_t> sorted = kept;
  std::sort(sorted.begin(), sorted.end());
  Perm out;
  for (int64_t k : kept) out.push_back(std::lower_bound(sorted.begin(), sorted.end(), k) - sorted.begin());
  return is_identity(out) ? Perm{} : out;
}

Perm reduced_output(const Perm& q, const std::vector<bool>& reduced, bool keepdims) {
  if (std::all_of(reduced.begin(), reduced.end(), [](bool r) { return r; })) return {};  // all 1s, or a scalar
  return keepdims ? q : kept_perm(q, reduced);
}

// The remapped axes where the node keeps them: an attribute before opset
// `since` (or where the node has one), input 1 from then on.
void put_axes(const PushQuery& q, int64_t opset, int64_t since, const std::vector<int64_t>& mapped, Push& out) {
  const Node& n = q.node;
  if (opset ? opset < since : n.attribute("axes") != nullptr) {
    out.attributes.push_back(ints_attribute("axes", mapped));
  } else {
    out.inputs[1].kind = PushedInput::kReplaced;
    out.inputs[1].tensor = int_tensor(mapped, known_elem_type(n.inputs[1]));
  }
}

const char* reduce(const PushQuery& q, int64_t opset, Push& out) {
  const Node& n = q.node;
  const int64_t since = n.op_type.value == "ReduceSum" ? 13 : 18;
  IntList axes = int_list(q.model, q.graph, n, "axes", 1, since);
  if (axes.why) return refuse(out, "axes " + quoted(n.inputs[1]) + " " + axes.why);
  if (const char* why = start(q, out, 1)) return why;
  const bool keepdims = int_attr(n, "keepdims", 1) != 0;
  std::vector<bool> reduced(q.perm.size(), true);
  if (!axes.present || axes.values.empty()) {
    if (int_attr(n, "noop_with_empty_axes", 0) != 0) return nullptr;  // the identity: perm q
  } else {
    std::vector<int64_t> mapped;
    if (!map_axes(q, axes.values, mapped)) return "axes out of range";
    std::fill(reduced.begin(), reduced.end(), false);
    for (int64_t a : axes.values) reduced[static_cast<size_t>(normalized(a, rank_of(q)))] = true;
    put_axes(q, opset, since, mapped, out);
  }
  out.outputs[0] = reduced_output(q.perm, reduced, keepdims);
  return nullptr;
}

// Squeeze drops the axes it names, as a Reduce with keepdims=0 would.
// Without axes which ones go depends on their sizes: refused.
const char* squeeze(const PushQuery& q, int64_t opset, Push& out) {
  const Node& n = q.node;
  IntList axes = int_list(q.model, q.graph, n, "axes", 1, 13);
  if (axes.why) return refuse(out, "axes " + quoted(n.inputs[1]) + " " + axes.why);
  if (!axes.present || axes.values.empty()) return "Squeeze without axes: which axes go depends on their sizes";
  if (const char* why = start(q, out, 1)) return why;
  std::vector<int64_t> mapped;
  if (!map_axes(q, axes.values, mapped)) return "axes out of range";
  std::vector<bool> dropped(q.perm.size(), false);
  for (int64_t a : axes.values) dropped[static_cast<size_t>(normalized(a, rank_of(q)))] = true;
  put_axes(q, opset, 13, mapped, out);
  out.outputs[0] = reduced_output(q.perm, dropped, false);
  return nullptr;
}

// Gather with one constant index drops its axis (torch's unbind, q/k/v
// taken out of a packed projection); more indices would add axes there.
const char* gather(const PushQuery& q, Push& out) {
  const Node& n = q.node;
  const Tensor* index = n.inputs.size() > 1 ? constant_of(n.inputs[1]) : nullptr;
  if (!index || !index->dims.empty()) return "the indices are not one constant (a scalar): they would add axes";
  const int64_t a = normalized(int_attr(n, "axis", 0), rank_of(q));
  if (a < 0) return "axis out of range";
  if (const char* why = start(q, out, 1)) return why;
  out.attributes.push_back(int_attribute("axis", q.perm[static_cast<size_t>(a)]));
  std::vector<bool> dropped(q.perm.size(), false);
  dropped[static_cast<size_t>(a)] = true;
  out.outputs[0] = reduced_output(q.perm, dropped, false);
  return nullptr;
}

// Whether `v` reaches, within `hops` nodes that only shape, split or scale
// it, a MatMul of two computed values: attention's scores or context.
bool feeds_attention(const Value* v, int hops) {
  if (!v || hops < 0) return false;
  static const std::set<std::string_view> kPassing = {"Add", "Mul", "Div", "Reshape", "Transpose", "Squeeze",
                                                      "Unsqueeze", "Split", "Slice", "Gather"};
  for (const Use& u : v->uses) {
    const Node& n = *u.node;
    const std::string_view op = n.op_type.value;
    if (op == "MatMul" && n.inputs.size() == 2 && !constant_of(n.inputs[0]) && !constant_of(n.inputs[1])) return true;
    if (!kPassing.count(op)) continue;
    for (const Value* out : n.outputs)
      if (feeds_attention(out, hops - 1)) return true;
  }
  return false;
}

// MatMul(Transpose<q>(v), B) with B 2-d multiplies each row of the last
// axis alone: any q that keeps the last axis moves below it unchanged.
// A q that swaps the last two axes (the batch axes among themselves) and a
// constant B: T(v) @ B = T(Bᵀ @ v), Bᵀ broadcast over v's batch axes, so
// N' is MatMul(Bᵀ, v) and its output is transposed by q (MLP-Mixer's and
// gMLP's token mixing, a Linear over the time axis of [B, C, T]).
const char* matmul(const PushQuery& q, Push& out) {
  const Node& n = q.node;
  const size_t r = q.perm.size();
  const bool rows = r >= 3 && q.perm[r - 1] == static_cast<int64_t>(r - 1);
  const bool swap =
      r >= 2 && q.perm[r - 1] == static_cast<int64_t>(r - 2) && q.perm[r - 2] == static_cast<int64_t>(r - 1);
  if (!rows && !swap) return "the Transpose moves the reduced (last) axis (other than swapping it with the one before)";
  if (n.inputs.size() != 2 || !n.inputs[0] || !n.inputs[1] || !q.transposed(*n.inputs[0]))
    return "the transposed value is not MatMul's first input";
  std::optional<std::vector<int64_t>> b = known_shape(n.inputs[1]);
  if (!b || b->size() != 2) return refuse(out, "the second input " + quoted(n.inputs[1]) + " is not known to be 2-d");
  if (rows) return start(q, out, 1);
  // Only once the fusions are done (regroup_transposes): Wᵀ first is no
  // Linear to them, and they take Gemms and attention heads in the layout
  // the export wrote.
  if (!q.regroup) return "the Transpose swaps the last two axes: moved after the fusions (regroup_transposes)";
  // An attention's projection stays in the export's layout, which the
  // attention rules (after a regroup) and onnxruntime's own fusions read:
  // moved, a diffusers VAE lost its opset-23 Attention, and ran 5% slower
  // at onnxruntime's default level.
  if (feeds_attention(n.outputs[0], 4))
    return "the Transpose swaps the last two axes and the product feeds an attention (a projection)";
  // One row makes MatMul(Bᵀ, v) a product of a matrix by a vector per batch
  // where the original was one matrix product.
  std::optional<std::vector<int64_t>> a = known_shape(n.inputs[0]);
  if (a && a->size() == r && (*a)[r - 2] == 1) return "the Transpose swaps the last two axes of a single row";
  const Tensor* c = constant_of(n.inputs[1]);
  if (!c) return refuse(out, "the Transpose swaps the last two axes and the second input " + quoted(n.inputs[1]) +
                                 " is not a constant to transpose instead");
  if (const char* why = copy_refusal(q, *n.inputs[1], *c, out)) return why;
  start(q, out, 1);
  out.inputs[1].kind = PushedInput::kTransposedConstant;
  out.inputs[1].own_perm = {1, 0};
  out.swap_inputs = true;
  return nullptr;
}

// Reshape(Transpose<q>(v), t) where t only splits and merges runs of axes
// (size-1 axes aside) and each merged run is one run of v's axes, in
// order: Reshape(v, the same runs in v's order) then a Transpose putting
// the runs where t has them. nn.MultiheadAttention's K, [S, B*h, d] ->
// [B*h, S, d] -> [B, h, S, d], is one: [S, B, h, d] then <1, 2, 0, 3>.
// At most one size may be unknown, matched by t's one unknown size.
const char* reshape_runs(const PushQuery& q, const std::vector<int64_t>& dims, std::vector<int64_t> target,
                         Push& out) {
  const char* kNot = "the Reshape does not keep the axes the Transpose moves (nor moves whole runs of them)";
  const Node& n = q.node;
  if (std::count(dims.begin(), dims.end(), kUnknownDim) > 1 || std::count(dims.begin(), dims.end(), 0)) return kNot;
  for (size_t j = 0; j < target.size(); ++j)
    if (target[j] == 0) {
      if (j >= dims.size()) return kNot;
      target[j] = dims[j];  // kUnknownDim when it copies the unknown size
    }
  if (std::count(target.begin(), target.end(), kUnknownDim) > 1) return kNot;
  if (std::any_of(target.begin(), target.end(), [](int64_t t) { return t < kUnknownDim || t == 0; })) return kNot;
  // The unknown sizes become stand-ins that keep numel(dims) = numel(t)
  // and carry a large prime, so the run holding one holds the other: with
  // Kd, Kt the known products, dims' unknown is Kt*p and t's is Kd*p.
  constexpr int64_t kPrime = 2147483647;
  int64_t kd = 1, kt = 1;
  for (int64_t d : dims)
    if (d != kUnknownDim && (d % kPrime == 0 || __builtin_mul_overflow(kd, d, &kd))) return kNot;
  for (int64_t t : target)
    if (t != kUnknownDim && (t % kPrime == 0 || __builtin_mul_overflow(kt, t, &kt))) return kNot;
  std::vector<int64_t> sizes = dims;
  const auto unknown_dim = std::find(sizes.begin(), sizes.end(), kUnknownDim);
  const auto free_at = std::find(target.begin(), target.end(), kUnknownDim);
  const bool has_unknown = unknown_dim != sizes.end();
  const size_t free_target = static_cast<size_t>(free_at - target.begin());
  if (has_unknown) {
    int64_t all = 0;  // every product the runs form fits
    if (free_at == target.end() || __builtin_mul_overflow(kd, kt, &all) || __builtin_mul_overflow(all, kPrime, &all))
      return kNot;
    *unknown_dim = kt * kPrime;
    *free_at = kd * kPrime;
  } else if (free_at != target.end()) {
    if (kd % kt) return kNot;
    *free_at = kd / kt;
  } else if (kd != kt) {
    return kNot;
  }
  // v's axes other than size 1, in v's order: rank[a] is axis a's place.
  const size_t r = dims.size();
  const Perm from = inverse(q.perm);
  std::vector<int64_t> rank(r, -1);
  for (size_t a = 0, k = 0; a < r; ++a)
    if (sizes[static_cast<size_t>(from[a])] != 1) rank[a] = static_cast<int64_t>(k++);
  // Runs: the transposed value's axes i..., the target's j..., of equal product.
  struct Run {
    int64_t first_place;        // in v's order
    std::vector<size_t> split;  // the target's axes it becomes
  };
  std::vector<Run> runs;
  size_t i = 0, j = 0;
  while (true) {
    while (i < r && sizes[i] == 1) ++i;
    while (j < target.size() && target[j] == 1) ++j;
    if (i == r || j == target.size()) break;
    Run run{rank[static_cast<size_t>(q.perm[i])], {}};
    int64_t have = sizes[i], want = target[j], last = run.first_place;
    run.split.push_back(j++);
    ++i;
    while (have != want) {
      if (have < want) {
        while (i < r && sizes[i] == 1) ++i;
        if (i == r) return kNot;
        const int64_t place = rank[static_cast<size_t>(q.perm[i])];
        if (place != last + 1) return kNot;  // not one run of v's axes
        last = place;
        have *= sizes[i++];
      } else {
        while (j < target.size() && target[j] == 1) ++j;
        if (j == target.size()) return kNot;
        want *= target[j];
        run.split.push_back(j++);
      }
    }
    runs.push_back(std::move(run));
  }
  std::sort(runs.begin(), runs.end(), [](const Run& a, const Run& b) { return a.first_place < b.first_place; });
  // The new target: the runs in v's order, each size-1 axis of t right after
  // the axis of t it follows (at the front when none does).
  std::vector<size_t> order;
  for (size_t u = 0; u < target.size() && target[u] == 1; ++u) order.push_back(u);
  for (const Run& run : runs)
    for (size_t a : run.split) {
      order.push_back(a);
      for (size_t u = a + 1; u < target.size() && target[u] == 1; ++u) order.push_back(u);
    }
  if (const char* why = start(q, out, 1)) return why;
  std::vector<int64_t> regrouped;
  Perm perm(target.size());
  for (size_t k = 0; k < order.size(); ++k) {
    regrouped.push_back(has_unknown && order[k] == free_target ? -1 : target[order[k]]);
    perm[order[k]] = static_cast<int64_t>(k);
  }
  out.inputs[1].kind = PushedInput::kReplaced;
  out.inputs[1].tensor = int_tensor(regrouped, fold::kInt64);
  if (n.attribute("allowzero")) out.attributes.push_back(int_attribute("allowzero", 0));
  out.outputs[0] = is_identity(perm) ? Perm{} : perm;
  return nullptr;
}

// Reshape(Transpose<q>(v), t) where q moves only the first k axes and t
// keeps them (each entry a 0, that dim, or one -1 with the rest of t
// holding exactly the other axes' elements): Reshape(v, [0]*k + t[k:])
// then Transpose<q[:k] + identity>.
const char* reshape(const PushQuery& q, Push& out) {
  const Node& n = q.node;
  const int64_t r = rank_of(q);
  int64_t k = r;
  while (k > 0 && q.perm[static_cast<size_t>(k - 1)] == k - 1) --k;
  if (n.inputs.size() < 2 || !n.inputs[1]) return "Reshape without a shape";
  const char* bad = nullptr;
  std::optional<std::vector<int64_t>> target = constant_ints(n.inputs[1], &bad);
  if (!target) return refuse(out, "shape " + quoted(n.inputs[1]) + " " + bad);
  std::optional<std::vector<int64_t>> dims = known_shape(n.inputs[0]);
  if (!dims || static_cast<int64_t>(dims->size()) != r) return "the input's rank is unknown";
  const bool allowzero = int_attr(n, "allowzero", 0) != 0;
  if (allowzero && std::count(target->begin(), target->end(), 0)) return "allowzero with a 0 size in the shape";
  const char* kNot = "the Reshape does not keep the axes the Transpose moves";
  if (static_cast<int64_t>(target->size()) < k) return q.regroup ? reshape_runs(q, *dims, *target, out) : kNot;
  bool free_in_prefix = false;
  for (int64_t i = 0; i < k; ++i) {
    const int64_t t = (*target)[static_cast<size_t>(i)], d = (*dims)[static_cast<size_t>(i)];
    if (t == -1) free_in_prefix = true;
    else if (t != 0 && (d == kUnknownDim || t != d)) return q.regroup ? reshape_runs(q, *dims, *target, out) : kNot;
  }
  if (free_in_prefix) {  // -1 stands for that axis only if the rest keeps the other axes' elements
    int64_t have = 1, want = 1;
    for (int64_t i = k; i < r; ++i) {
      if ((*dims)[static_cast<size_t>(i)] == kUnknownDim) return "the unmoved axes' sizes are unknown";
      have *= (*dims)[static_cast<size_t>(i)];
    }
    for (size_t i = static_cast<size_t>(k); i < target->size(); ++i) {
      if ((*target)[i] <= 0) return kNot;
      want *= (*target)[i];
    }
    if (have != want) return kNot;
  }
  if (const char* why = start(q, out, 1)) return why;
  std::vector<int64_t> kept(static_cast<size_t>(k), 0);
  kept.insert(kept.end(), target->begin() + k, target->end());
  out.inputs[1].kind = PushedInput::kReplaced;
  out.inputs[1].tensor = int_tensor(kept, fold::kInt64);
  if (n.attribute("allowzero")) out.attributes.push_back(int_attribute("allowzero", 0));
  Perm perm(q.perm.begin(), q.perm.begin() + k);
  for (int64_t i = k; i < static_cast<int64_t>(kept.size()); ++i) perm.push_back(i);
  out.outputs[0] = perm;
  return nullptr;
}

const char* arg_reduce(const PushQuery& q, Push& out) {
  if (const char* why = one_axis(q, 0, out)) return why;
  std::vector<bool> reduced(q.perm.size(), false);
  reduced[static_cast<size_t>(normalized(int_attr(q.node, "axis", 0), rank_of(q)))] = true;
  out.outputs[0] = reduced_output(q.perm, reduced, int_attr(q.node, "keepdims", 1) != 0);
  return nullptr;
}

const char* slice(const PushQuery& q, int64_t opset, Push& out) {
  const Node& n = q.node;
  if (const char* why = start(q, out, 1)) return why;
  std::vector<int64_t> mapped;
  if (opset && opset < 10) {  // attributes
    const Attribute* starts = n.attribute("starts");
    const Attribute* axes = n.attribute("axes");
    if (!starts) return "Slice without starts";
    std::vector<int64_t> given = axes ? axes->ints : std::vector<int64_t>{};
    for (size_t i = 0; !axes && i < starts->ints.size(); ++i) given.push_back(static_cast<int64_t>(i));
    if (!map_axes(q, given, mapped)) return "axes out of range";
    out.attributes.push_back(ints_attribute("axes", mapped));
    return nullptr;
  }
  IntList axes = int_list(q.model, q.graph, n, "axes", 3, 10);
  if (axes.why) return refuse(out, "axes " + quoted(n.inputs[3]) + " " + axes.why);
  std::vector<int64_t> given = axes.values;
  int32_t dtype = axes.present ? known_elem_type(n.inputs[3]) : 0;
  if (!axes.present) {  // axes 0, 1, ... as many as starts has: made explicit
    if (n.inputs.size() < 2 || !n.inputs[1]) return "Slice without starts";
    std::optional<std::vector<int64_t>> starts = known_shape(n.inputs[1]);
    if (!starts || starts->size() != 1 || (*starts)[0] == kUnknownDim) return "the number of starts is unknown";
    for (int64_t i = 0; i < (*starts)[0]; ++i) given.push_back(i);
    dtype = known_elem_type(n.inputs[1]);  // axes share the type of starts
  }
  if (dtype != fold::kInt64 && dtype != fold::kInt32) return "the index type of Slice is unknown";
  if (!map_axes(q, given, mapped)) return "axes out of range";
  if (out.inputs.size() < 4) out.inputs.resize(4);
  out.inputs[3].kind = PushedInput::kReplaced;
  out.inputs[3].tensor = int_tensor(mapped, dtype);
  return nullptr;
}

const char* pad(const PushQuery& q, int64_t opset, Push& out) {
  const Node& n = q.node;
  const size_t r = q.perm.size();
  if (opset && opset < 11) {
    const char* name = n.attribute("paddings") ? "paddings" : "pads";
    const Attribute* pads = n.attribute(name);
    if (!pads || pads->ints.size() != 2 * r) return "pads do not match the rank";
    if (const char* why = start(q, out, 1)) return why;
    out.attributes.push_back(ints_attribute(name, reordered(pads->ints, axis_order(q.perm, 2))));
    return nullptr;
  }
  if (const char* why = start(q, out, 1)) return why;
  if (n.inputs.size() > 3 && n.inputs[3]) {  // opset 18 axes: remap them, pads stay in their order
    const char* bad = nullptr;
    std::optional<std::vector<int64_t>> axes = constant_ints(n.inputs[3], &bad);
    if (!axes) return refuse(out, "axes " + quoted(n.inputs[3]) + " " + bad);
    std::vector<int64_t> mapped;
    if (!map_axes(q, *axes, mapped)) return "axes out of range";
    out.inputs[3].kind = PushedInput::kReplaced;
    out.inputs[3].tensor = int_tensor(mapped, known_elem_type(n.inputs[3]));
    return nullptr;
  }
  IntList pads = int_list(q.model, q.graph, n, "pads", 1, 11);
  if (!pads.present) return "Pad without pads";
  if (pads.why) return refuse(out, "pads " + quoted(n.inputs[1]) + " " + pads.why);
  if (pads.values.size() != 2 * r) return "pads do not match the rank";
  out.inputs[1].kind = PushedInput::kReplaced;
  out.inputs[1].tensor = int_tensor(reordered(pads.values, axis_order(q.perm, 2)), known_elem_type(n.inputs[1]));
  return nullptr;
}

// LayerNormalization and RMSNormalization normalize the axes from `axis`
// on, scaled by parameters of those dims: unchanged where the Transpose
// keeps them in place (Gemma 3's and EXAONE 4's norms of each head, after
// the head split's Transpose). Their statistics outputs keep the rank. A
// Transpose of size-1 axes stays: it becomes a Reshape beside the Reshapes
// there (moved through the block's norm, torch's batch-1 `[S, 1, E]` went
// into vit_b_16's MLPs and kept flatten_linear_rows from them, 346 -> 442).
const char* normalization(const PushQuery& q, Push& out) {
  const int64_t r = rank_of(q);
  const int64_t a = normalized(int_attr(q.node, "axis", -1), r);
  if (a < 0) return "axis out of range";
  for (int64_t i = a; i < r; ++i)
    if (q.perm[static_cast<size_t>(i)] != i) return "the Transpose moves a normalized axis";
  const std::optional<std::vector<int64_t>> shape = known_shape(q.node.inputs[0]);
  if (shape && keeps_data_order(*shape, inverse(q.perm))) return "the Transpose moves only axes of size 1";
  return start(q, out, 1);
}

// Linear and cubic Resize are implemented for few layouts (the innermost
// axes, or NHWC's middle ones): the resized axes must stay where they were
// or, for linear, become the innermost ones. onnxruntime's cubic kernels
// for NCHW and NHWC filter the two axes in another order, which gives
// other NaNs where the input holds infinities of both signs.
bool supported_layout(const Perm& q, const std::vector<bool>& resized, bool cubic) {
  std::vector<bool> moved(q.size(), false);
  size_t count = 0;
  for (size_t i = 0; i < q.size(); ++i) {
    if (!resized[i]) continue;
    moved[static_cast<size_t>(q[i])] = true;
    ++count;
  }
  if (moved == resized) return true;
  if (cubic) return false;
  for (size_t j = 0; j < q.size(); ++j)
    if (moved[j] != (j >= q.size() - count)) return false;
  return true;
}

// The axes onnxruntime's linear and cubic kernels interpolate: all of the
// innermost two (three for 5-d, or NHWC's middle two) even where the scale
// is 1, with a weight of 0 on the neighbour there, which is NaN where that
// neighbour is infinite. Other layouts: the resized axes.
std::vector<bool> interpolated(const std::vector<bool>& resized) {
  const size_t r = resized.size();
  std::vector<bool> w(r, false);
  auto inner = [&](size_t from, size_t to) {
    for (size_t i = 0; i < r; ++i)
      if (resized[i] && (i < from || i >= to)) return false;
    for (size_t i = from; i < to; ++i) w[i] = true;
    return true;
  };
  if ((r == 2 || r == 3) && inner(0, r)) return w;
  if (r == 4 && (inner(2, 4) || inner(1, 3))) return w;
  if (r == 5 && inner(2, 5)) return w;
  return resized;
}

// Whether the pushed Resize interpolates the same axes of the data, so that
// an infinite input turns the same outputs NaN.
bool same_interpolated_axes(const Perm& q, const std::vector<bool>& resized) {
  std::vector<bool> moved(q.size(), false);
  for (size_t i = 0; i < q.size(); ++i) moved[static_cast<size_t>(q[i])] = resized[i];
  const std::vector<bool> before = interpolated(resized), after = interpolated(moved);
  for (size_t i = 0; i < q.size(); ++i)
    if (before[i] != after[static_cast<size_t>(q[i])]) return false;
  return true;
}

const char* resize(const PushQuery& q, int64_t opset, Push& out) {
  const Node& n = q.node;
  const size_t r = q.perm.size();
  if (n.attribute("axes")) return "Resize with axes";
  if (const char* why = start(q, out, 1)) return why;
  struct Param {
    size_t slot, halves;
  };
  std::vector<Param> params = opset && opset < 11 ? std::vector<Param>{{1, 1}}
                                                  : std::vector<Param>{{1, 2}, {2, 1}, {3, 1}};  // roi, scales, sizes
  std::vector<bool> resized(r, false);
  const std::optional<std::vector<int64_t>> dims = known_shape(n.inputs[0]);
  for (const Param& p : params) {
    if (p.slot >= n.inputs.size() || !n.inputs[p.slot]) continue;
    const Value* v = n.inputs[p.slot];
    const Tensor* c = constant_of(v);
    if (!c) return refuse(out, "Resize parameter " + quoted(v) + " is not a constant");
    fold::Array a;
    std::string why;
    if (!fold::to_array(*c, a, why) || !fold::element_size(a.dtype))
      return refuse(out, "Resize parameter " + quoted(v) + " cannot be read");
    if (a.numel() == 0) continue;  // an empty roi or scales stands for none
    if (a.numel() != p.halves * r) return refuse(out, "Resize parameter " + quoted(v) + " does not match the rank");
    const bool is_scales = p.slot == (opset && opset < 11 ? 1u : 2u);
    if (is_scales)
      for (size_t i = 0; i < r; ++i) resized[i] = resized[i] || a.dtype != fold::kFloat || a.at<float>(i) != 1.0f;
    if (p.slot == 3) {
      if (a.dtype != fold::kInt64) return refuse(out, "Resize sizes " + quoted(v) + " are not int64");
      const std::vector<int64_t> sizes = a.as_int64();
      for (size_t i = 0; i < r; ++i) resized[i] = resized[i] || !dims || (*dims)[i] == kUnknownDim || sizes[i] != (*dims)[i];
    }
    out.inputs[p.slot].kind = PushedInput::kReplaced;
    out.inputs[p.slot].tensor = reordered_constant(*c, axis_order(q.perm, p.halves));
    if (!out.inputs[p.slot].tensor) return refuse(out, "Resize parameter " + quoted(v) + " cannot be read");
  }
  const Attribute* mode = n.attribute("mode");
  const bool cubic = mode && mode->s.value == "cubic";
  if (mode && mode->s.value != "nearest" && !supported_layout(q.perm, resized, cubic))
    return cubic ? "cubic Resize would resize other axes than it did (its NCHW and NHWC kernels filter in another order)"
                 : "linear Resize would resize other axes than the innermost or the ones it did";
  if (mode && mode->s.value != "nearest" && !same_interpolated_axes(q.perm, resized))
    return "linear or cubic Resize would interpolate other axes at scale 1 (where an infinite input gives NaN)";
  return nullptr;
}

}  // namespace

const char* plan_push(const PushQuery& q, Push& out) {
  const Node& n = q.node;
  const std::string& d = n.domain.value;
  const std::string_view op = n.op_type.value;
  if (d == "com.microsoft" && kMicrosoftUnary.count(op)) {
    if (n.inputs.size() > 1 && n.inputs[1]) return "the activation adds a bias along its input's last axis";
    out = Push{};
    return start(q, out, 1);
  }
  if (!(d.empty() || d == "ai.onnx") || n.has_subgraphs()) return kNoRule;
  const int64_t opset = default_opset(q.model, q.graph);
  out = Push{};
  if (kUnary.count(op)) return start(q, out, 1);
  if (kBroadcasting.count(op)) return broadcasting(q, opset, out);
  if (op == "QuantizeLinear" || op == "DequantizeLinear") return quantize(q, out);
  if (op == "Concat") return concat(q, out);
  if (op == "Split") return one_axis(q, 0, out);
  if (kSoftmax.count(op)) {
    if (!opset || opset < 13) return "before opset 13 the Softmax family flattens at axis: the layout matters";
    return one_axis(q, -1, out);
  }
  if (op == "ArgMax" || op == "ArgMin") return arg_reduce(q, out);
  if (kReduce.count(op)) return reduce(q, opset, out);
  if (op == "Squeeze") return squeeze(q, opset, out);
  if (op == "Gather") return gather(q, out);
  if (op == "MatMul") return matmul(q, out);
  if (op == "Reshape" && (!opset || opset >= 5)) return reshape(q, out);
  if (op == "Slice") return slice(q, opset, out);
  if (op == "Pad") return pad(q, opset, out);
  if (op == "Resize") return resize(q, opset, out);
  if (op == "LayerNormalization" || op == "RMSNormalization") return normalization(q, out);
  return kNoRule;
}

std::unique_ptr<Tensor> transposed_constant(const Tensor& t, size_t rank, const Perm& perm) {
  fold::Array a;
  std::string why;
  if (!fold::to_array(t, a, why) || a.dims.size() > rank) return nullptr;
  a.dims.insert(a.dims.begin(), rank - a.dims.size(), 1);
  Node scratch;  // the folding kernel reads perm off a node
  scratch.op_type.set("Transpose");
  Attribute& p = scratch.attributes.emplace_back();
  p.name.set("perm");
  p.type.set(int32_t(AttrType::kInts));
  p.ints = perm;
  fold::KernelContext ctx{scratch, 13, UINT64_MAX};
  std::vector<fold::Array> result;
  if (fold::find_kernel("Transpose")(ctx, {&a}, result, why) != fold::Status::kDone) return nullptr;
  return fold::to_tensor(result[0]);
}

}  // namespace pyonnxopt::passes
