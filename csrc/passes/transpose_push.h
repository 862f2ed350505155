// Moving a Transpose below the node that reads it: what each op needs.
//
//   y = N(Transpose<perm=q>(v), c, ...)  ->  y' = N'(v, c', ...);  y = Transpose<perm=q'>(y')
//
// N' is N computing on the untransposed layout. Axis i of the transposed
// value is axis q[i] of v, so:
//   - unary elementwise ops (Relu, Sigmoid, Cast, Clip with its scalar
//     min/max, ...) and per-tensor QuantizeLinear/DequantizeLinear need
//     nothing;
//   - broadcasting ops (Add, Mul, Where, PRelu, Sum, Equal, ...): each other
//     operand is transposed by q too (read what it transposes), a tensor of
//     1s shape (the same in every layout), or a constant, first given
//     numpy's leading 1s up to the rank, then transposed by q's inverse; or
//     a computed value of the full rank that q's inverse would move only
//     along axes of size 1 (a Transpose that keeps the data in order, which
//     optimize_transposes then makes a Reshape);
//   - Concat, Split, Softmax (opset >= 13), ArgMax/ArgMin: axis a -> q[a];
//     Concat's other inputs as above, constants at the full rank;
//   - Reduce*: axes a -> q[a]; with keepdims=0 the kept axes come out in
//     the order of v, so q' is what q says about them; Squeeze (axes
//     given) and Gather of one constant scalar index alike, dropping their
//     axes;
//   - MatMul with a 2-d second input, when q keeps the last axis: each row
//     is multiplied alone, so nothing changes; when q swaps the last two
//     axes and that input is a constant B: MatMul(Bᵀ, v), inputs swapped
//     (with `regroup` only: after the fusions, which read Linears as
//     MatMul(x, W));
//   - Reshape that keeps the first k axes, the ones q moves (each target
//     entry 0, that size, or one -1 beside a rest that holds exactly the
//     other axes' elements): the target's first k entries become 0 (copy)
//     and q' is q on them, the identity after; with `regroup`, else, with
//     at most one unknown size (held by the target's one unknown), a
//     Reshape that only splits and merges runs of axes, each merged run a
//     run of v's axes in order: it regroups v's runs in v's order, and q'
//     puts them where the target has them;
//   - Slice: axes a -> q[a] (axes made explicit when absent);
//     Pad: pads[q[i]] <- pads[i] per begin/end half (or its axes remapped);
//     Resize: scales, sizes and roi reordered the same way.
// q' is q, or nothing where the output needs no Transpose (all of it
// reduced, or what is left keeps its order).
//
// Refuses (the reason says which): the transposed value read as a parameter
// (Slice starts, Pad pads, ...); an operand that is neither of the above, of
// unknown rank or of a higher rank; a constant operand read elsewhere and
// larger than kSmallConstant elements (a transposed copy would grow the
// model) or whose data cannot be read; axes, pads, scales, sizes, roi that
// are not constants; Softmax family before opset 13 (it flattens at axis);
// legacy broadcasting (a `broadcast` attribute, PRelu before opset 7);
// per-axis or blocked quantization; Resize with `axes`, or in linear/cubic
// mode where the resized axes would move somewhere other than where they
// were or the innermost axes (runtimes implement few layouts).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ir/model.h"
#include "passes/permutation.h"

namespace pyonnxopt::passes {

// A constant operand read elsewhere is copied (transposed) only this small.
constexpr uint64_t kSmallConstant = 64;

struct PushedInput {
  enum Kind {
    kKeep,                // the same value
    kPermuted,            // a value transposed by q: read what it transposes
    kTransposedConstant,  // a constant: its transposed copy (full rank, perm inverse(q); or own_perm)
    kReplaced,            // a new constant `tensor` (past the inputs: an added input)
    kUnitMoved,           // a computed operand of full rank: Transpose(it, inverse(q)), which moves only
                          // axes of size 1 (LLaMA's cos [1, 1, S, D]), so becomes a Reshape
  } kind = kKeep;
  std::shared_ptr<const ir::Tensor> tensor;
  Perm own_perm;  // kTransposedConstant: transposed at its own rank by this instead (MatMul's Bᵀ)
};

struct Push {
  std::vector<PushedInput> inputs;        // one per input slot, plus any added ones
  std::vector<ir::Attribute> attributes;  // set on N', each replacing the one of its name
  std::vector<Perm> outputs;              // per output, q' (empty: needs no Transpose)
  bool swap_inputs = false;               // N' reads its first two inputs the other way round
  std::string reason;                     // holds the text of a refusal that names a value
};

struct PushQuery {
  const ir::Model& model;
  const ir::Graph& graph;
  const ir::Node& node;
  const Perm& perm;  // q
  // Whether an input is Transpose<perm=q>(w) and the caller can give w instead.
  std::function<bool(const ir::Value&)> transposed;
  // Whether a Reshape may also regroup runs of axes (regroup_transposes).
  bool regroup = false;
};

// The node is of no op a Transpose moves through.
extern const char* const kNoRule;

// nullptr when `query.node` can compute on v, with `out` saying how; else
// why not (kNoRule for ops this knows nothing of).
const char* plan_push(const PushQuery& query, Push& out);

// Whether Transpose<perm>(x), x of `dims` (kUnknownDim for unknown ones),
// keeps the data in order: only axes of size 1 move past others, and at
// most one unknown dim moves (a Reshape's one -1 then holds it).
bool keeps_data_order(const std::vector<int64_t>& dims, const Perm& perm);

// The constant `t` given leading 1s up to `rank` and transposed by `perm`;
// nullptr when its data cannot be read.
std::unique_ptr<ir::Tensor> transposed_constant(const ir::Tensor& t, size_t rank, const Perm& perm);

}  // namespace pyonnxopt::passes
