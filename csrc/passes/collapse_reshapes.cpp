#include "passes/collapse_reshapes.h"

#include <algorithm>
#include <deque>
#include <optional>
#include <set>

#include "fold/array.h"
#include "passes/known_values.h"
#include "passes/new_values.h"

namespace pyonnxopt::passes {

using namespace ir;

namespace {

// Dims as far as known (kUnknownDim where not); nullopt: not even the rank.
using Dims = std::optional<std::vector<int64_t>>;

bool is_chain_op(const Node& n) {
  const std::string& op = n.op_type.value;
  const std::string& d = n.domain.value;
  return (d.empty() || d == "ai.onnx") && (op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze") &&
         !n.inputs.empty() && n.inputs[0] && n.outputs.size() == 1 && n.outputs[0];
}

int64_t int_attr(const Node& n, const char* name, int64_t otherwise) {
  const Attribute* a = n.attribute(name);
  return a ? a->i.value : otherwise;
}

// The product of d[from, to); kUnknownDim when a factor is unknown.
int64_t product(const std::vector<int64_t>& d, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) {
    if (d[i] == kUnknownDim) return kUnknownDim;
    p *= d[i];
  }
  return p;
}

Dims reshape_dims(const Dims& in, const std::vector<int64_t>& target, bool allowzero) {
  std::vector<int64_t> out;
  int64_t inferred = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    const int64_t t = target[i];
    if (t > 0 || (t == 0 && allowzero)) {
      out.push_back(t);
    } else if (t == 0) {
      out.push_back(in && i < in->size() ? (*in)[i] : kUnknownDim);
    } else if (t == -1 && inferred < 0) {
      inferred = static_cast<int64_t>(i);
      out.push_back(kUnknownDim);
    } else {
      return std::nullopt;  // malformed: left to the runtime
    }
  }
  if (inferred >= 0 && in) {
    out[static_cast<size_t>(inferred)] = 1;
    const int64_t total = product(*in, 0, in->size()), others = product(out, 0, out.size());
    out[static_cast<size_t>(inferred)] =
        total != kUnknownDim && others != kUnknownDim && others > 0 && total % others == 0 ? total / others : kUnknownDim;
  }
  return out;
}

Dims flatten_dims(const Dims& in, int64_t axis) {
  if (!in) return std::vector<int64_t>{kUnknownDim, kUnknownDim};
  const int64_t r = static_cast<int64_t>(in->size());
  if (axis < -r || axis > r) return std::nullopt;
  const size_t a = static_cast<size_t>(axis < 0 ? axis + r : axis);
  return std::vector<int64_t>{product(*in, 0, a), product(*in, a, in->size())};
}

Dims squeeze_dims(const Dims& in, const IntList& axes) {
  if (!in) return std::nullopt;
  const int64_t r = static_cast<int64_t>(in->size());
  std::vector<bool> drop(in->size(), false);
  if (!axes.present || axes.values.empty()) {
    if (!fully_static(*in)) return std::nullopt;  // which dims are 1 decides the rank
    for (size_t i = 0; i < in->size(); ++i) drop[i] = (*in)[i] == 1;
  }
  for (int64_t a : axes.values) {
    if (a < -r || a >= r) return std::nullopt;
    drop[static_cast<size_t>(a < 0 ? a + r : a)] = true;
  }
  std::vector<int64_t> out;
  for (size_t i = 0; i < in->size(); ++i) {
    if (!drop[i]) out.push_back((*in)[i]);
    else if ((*in)[i] != 1 && (*in)[i] != kUnknownDim) return std::nullopt;
  }
  return out;
}

Dims unsqueeze_dims(const Dims& in, const std::vector<int64_t>& axes) {
  if (!in) return std::nullopt;
  const int64_t r = static_cast<int64_t>(in->size() + axes.size());
  std::vector<bool> inserted(static_cast<size_t>(r), false);
  for (int64_t a : axes) {
    if (a < -r || a >= r || inserted[static_cast<size_t>(a < 0 ? a + r : a)]) return std::nullopt;
    inserted[static_cast<size_t>(a < 0 ? a + r : a)] = true;
  }
  std::vector<int64_t> out;
  size_t next = 0;
  for (int64_t i = 0; i < r; ++i) out.push_back(inserted[static_cast<size_t>(i)] ? 1 : (*in)[next++]);
  return out;
}

// For each axis of a value in the chain, the axis of the chain's input it
// is a copy of (a Reshape's 0 passes it on at the same index, Unsqueeze and
// Squeeze move it along), or -1. A dim still a copy of the input's at its
// own index can be a 0 in the collapsed target although it is unknown.
using Origins = std::vector<int64_t>;

Origins reshape_origins(const Origins& in, const std::vector<int64_t>& target, bool allowzero) {
  Origins out;
  for (size_t i = 0; i < target.size(); ++i)
    out.push_back(target[i] == 0 && !allowzero && i < in.size() ? in[i] : -1);
  return out;
}

// Origins with the axes squeezed (or, without axes, the dims of 1) left out.
Origins squeeze_origins(const Origins& in, const Dims& in_dims, const IntList& axes) {
  const int64_t r = static_cast<int64_t>(in.size());
  std::vector<bool> drop(in.size(), false);
  for (int64_t a : axes.values)
    if (a >= -r && a < r) drop[static_cast<size_t>(a < 0 ? a + r : a)] = true;
  if (!axes.present || axes.values.empty())
    for (size_t i = 0; i < in.size(); ++i) drop[i] = in_dims && i < in_dims->size() && (*in_dims)[i] == 1;
  Origins out;
  for (size_t i = 0; i < in.size(); ++i)
    if (!drop[i]) out.push_back(in[i]);
  return out;
}

// Origins with -1 at the inserted axes.
Origins unsqueeze_origins(const Origins& in, const std::vector<int64_t>& axes) {
  const int64_t r = static_cast<int64_t>(in.size() + axes.size());
  std::vector<bool> inserted(static_cast<size_t>(r), false);
  for (int64_t a : axes)
    if (a >= -r && a < r) inserted[static_cast<size_t>(a < 0 ? a + r : a)] = true;
  Origins out;
  size_t next = 0;
  for (int64_t i = 0; i < r; ++i) out.push_back(inserted[static_cast<size_t>(i)] || next >= in.size() ? -1 : in[next++]);
  return out;
}

// Where a chain stops: why, or nullptr with the node's output dims.
const char* step(const Model& m, const Graph& g, const Node& n, const Dims& in, Dims& out, Origins& origins,
                 std::string& why) {
  const std::string& op = n.op_type.value;
  auto not_constant = [&](const char* what, size_t input, const char* reason) {
    why = std::string(what) + " '" + n.inputs[input]->name + "' " + reason;
    return why.c_str();
  };
  if (op == "Flatten") {
    out = flatten_dims(in, int_attr(n, "axis", 1));
    origins.assign(2, -1);
    return nullptr;
  }
  if (op == "Reshape") {
    IntList shape = int_list(m, g, n, "shape", 1, 5);
    if (!shape.present) return "Reshape without shape";
    if (shape.why) return not_constant("shape", 1, shape.why);
    out = reshape_dims(in, shape.values, int_attr(n, "allowzero", 0) != 0);
    origins = reshape_origins(origins, shape.values, int_attr(n, "allowzero", 0) != 0);
    return nullptr;
  }
  IntList axes = int_list(m, g, n, "axes", 1, 13);
  if (axes.why) return not_constant("axes", 1, axes.why);
  const Dims before = in;
  if (op == "Squeeze") {
    out = squeeze_dims(in, axes);
    origins = squeeze_origins(origins, before, axes);
    return nullptr;
  }
  if (!axes.present) return "Unsqueeze without axes";
  out = unsqueeze_dims(in, axes.values);
  origins = unsqueeze_origins(origins, axes.values);
  return nullptr;
}

struct Target {
  std::vector<int64_t> shape;
  bool allowzero = false;
};

// count_symbols of a graph, worked out once and only where a rewrite asks.
class Counts {
 public:
  explicit Counts(const Graph& g) : g_(g) {}
  const std::set<std::string>& get() {
    if (!symbols_) symbols_ = count_symbols(g_);
    return *symbols_;
  }

 private:
  const Graph& g_;
  std::optional<std::set<std::string>> symbols_;
};

// The one shape that makes the chain's output from its input.
const char* target_of(const Model& m, const Graph& g, const std::deque<Node*>& chain, Counts& counts, Target& target,
                      std::string& why) {
  const Node& last = *chain.back();
  if (last.op_type.value == "Reshape") {
    IntList shape = int_list(m, g, last, "shape", 1, 5);
    const bool allowzero = int_attr(last, "allowzero", 0) != 0;
    const auto& s = shape.values;
    if (shape.known() && std::count(s.begin(), s.end(), -1) <= 1 &&
        (allowzero || std::find(s.begin(), s.end(), 0) == s.end())) {
      target = {s, allowzero};
      return nullptr;
    }
  }
  Dims dims = known_shape(chain.front()->inputs[0]);
  Origins origins;
  for (size_t k = 0; dims && k < dims->size(); ++k) origins.push_back(static_cast<int64_t>(k));
  for (const Node* n : chain)
    if (const char* r = step(m, g, *n, dims, dims, origins, why)) return r;
  const Dims declared = known_shape(last.outputs[0]);
  if (dims && declared && declared->size() == dims->size())
    for (size_t i = 0; i < dims->size(); ++i)
      if ((*dims)[i] == kUnknownDim) (*dims)[i] = (*declared)[i];
  if (!dims) dims = declared;
  if (!dims) return "the output's rank is unknown";
  const bool empty = std::find(dims->begin(), dims->end(), 0) != dims->end();
  // Unknown dims that are the input's at their own index become 0s (copies)
  // where -1 cannot stand for them all; a single unknown stays the -1, which
  // later passes may rewire (flatten_linear_rows feeds the rows to it).
  bool copies = false;
  if (!empty && origins.size() == dims->size() && std::count(dims->begin(), dims->end(), kUnknownDim) > 1)
    for (size_t i = 0; i < dims->size(); ++i)
      if ((*dims)[i] == kUnknownDim && origins[i] == static_cast<int64_t>(i)) (*dims)[i] = 0, copies = true;
  const auto unknown = std::count(dims->begin(), dims->end(), kUnknownDim);
  if (unknown > 1) return "more than one dim of the output is unknown";
  // A -1 beside a copy of a dim that may be empty (a detector's kept boxes) is undefined where the chain ran.
  if (unknown && copies)
    for (size_t i = 0; i < dims->size(); ++i)
      if ((*dims)[i] == 0 && may_be_empty(chain.front()->inputs[0], i, counts.get()))
        return "a dim it copies may be empty (a data-dependent count), and -1 beside an empty dim is undefined";
  if (empty && unknown) return "an empty dim beside the unknown one (-1 would be ill-defined)";
  if (empty && default_opset(m, g) < 14) return "an empty dim needs allowzero (opset >= 14)";
  target = {*dims, empty && !copies};
  return nullptr;
}

// A chain of Squeezes and Unsqueezes alone, as one Squeeze of the input's
// axes it drops and one Unsqueeze of the output's axes it inserts: what a
// Reshape target cannot say where two dims are unknown and move (a mask's
// [B, S] -> [B, 1, S] -> [B, 1, 1, S]).
struct AxisMoves {
  std::vector<int64_t> dropped, inserted;
  size_t nodes() const { return size_t(!dropped.empty()) + size_t(!inserted.empty()); }
};

// Normalized axes for rank `rank`; false when one is out of range or repeated.
bool normalized(const std::vector<int64_t>& axes, int64_t rank, std::vector<bool>& marked) {
  marked.assign(size_t(rank), false);
  for (int64_t a : axes) {
    if (a < -rank || a >= rank) return false;
    const size_t i = size_t(a < 0 ? a + rank : a);
    if (marked[i]) return false;
    marked[i] = true;
  }
  return true;
}

// False where the chain holds another op, axes that are not constants or do
// not fit, or a Squeeze without axes of a dim that may be 1.
bool axis_moves(const Model& m, const Graph& g, const std::deque<Node*>& chain, AxisMoves& moves) {
  Dims dims = known_shape(chain.front()->inputs[0]);
  if (!dims) return false;
  // Per axis of the value so far: the input axis it is, or -1 (inserted), and its dim.
  std::vector<int64_t> source, dim = *dims;
  for (size_t k = 0; k < dim.size(); ++k) source.push_back(int64_t(k));
  std::vector<bool> marked;
  for (const Node* n : chain) {
    const bool squeeze = n->op_type.value == "Squeeze";
    if (!squeeze && n->op_type.value != "Unsqueeze") return false;
    IntList axes = int_list(m, g, *n, "axes", 1, 13);
    if (axes.why || (!squeeze && !axes.present)) return false;
    const int64_t rank = int64_t(source.size() + (squeeze ? 0 : axes.values.size()));
    if (squeeze && axes.values.empty()) {  // every axis of size 1
      marked.assign(source.size(), false);
      for (size_t i = 0; i < dim.size(); ++i) {
        if (dim[i] == kUnknownDim) return false;
        marked[i] = dim[i] == 1;
      }
    } else if (!normalized(axes.values, rank, marked)) {
      return false;
    }
    std::vector<int64_t> next_source, next_dim;
    for (size_t i = 0, from = 0; i < size_t(rank); ++i) {
      if (squeeze && marked[i]) {
        if (source[i] >= 0) moves.dropped.push_back(source[i]);
      } else if (squeeze || !marked[i]) {
        next_source.push_back(source[squeeze ? i : from]);
        next_dim.push_back(dim[squeeze ? i : from]);
        ++from;
      } else {
        next_source.push_back(-1);
        next_dim.push_back(1);
      }
    }
    source.swap(next_source);
    dim.swap(next_dim);
  }
  std::sort(moves.dropped.begin(), moves.dropped.end());
  for (size_t i = 0; i < source.size(); ++i)
    if (source[i] < 0) moves.inserted.push_back(int64_t(i));
  return true;
}

// A Squeeze or Unsqueeze of `x` by constant `axes`, in the opset's form.
Node* axes_node(const Model& m, Graph& g, int64_t opset, FreshNames& names, const char* op, Value* x,
                const std::vector<int64_t>& axes, const std::string& base, Node* before, PassStats& stats) {
  Node* n = g.new_node();
  n->op_type.set(op);
  n->inputs.push_back(x);
  if (opset && opset < 13) {
    Attribute& a = n->attributes.emplace_back();
    a.name.set("axes");
    a.type.set(int32_t(AttrType::kInts));
    a.ints = axes;
  } else {
    bool as_node = false;
    const std::string name = names.make(base + "_axes");
    n->inputs.push_back(add_constant(m, g, int_tensor(axes, fold::kInt64), name, before, as_node));
    if (as_node) ++stats.nodes_added;
  }
  return n;
}

// Whether only chain ops of `g` read `v`, each as its data: then every
// reader can take the chain above it into itself, and the last one to do so
// removes it (an Unsqueeze read by two Unsqueezes: 3 nodes -> 2).
bool only_chain_ops_read(const Graph& g, const Value* v) {
  if (v->is_graph_output()) return false;
  for (const auto& use : v->uses)
    if (use.node->graph != &g || !is_chain_op(*use.node) || use.index != 0) return false;
  return true;
}

// The chain that ends at `last`: its producers while they are chain ops of
// this graph whose output only chain ops read.
std::deque<Node*> chain_ending_at(const Graph& g, Node* last, std::set<std::string>& refused) {
  std::deque<Node*> chain{last};
  for (Node* n = last;;) {
    Node* p = n->inputs[0]->producer;
    if (!p || p->graph != &g || !is_chain_op(*p) || !only_chain_ops_read(g, n->inputs[0])) break;
    if (p->pinned || n->pinned) {
      refused.insert((p->pinned ? p : n)->display_name() + ": excluded from optimization");
      break;
    }
    chain.push_front(p);
    n = p;
  }
  return chain;
}

// Whether `n` is read by one chain op alone, which ends (or continues) its chain.
bool continues(const Graph& g, const Node& n) {
  const Value* v = n.outputs[0];
  if (v->is_graph_output() || v->uses.size() != 1) return false;
  const Node* next = v->uses[0].node;
  return next->graph == &g && is_chain_op(*next) && next->inputs[0] == v && !next->pinned && !n.pinned;
}

// Puts `replacement` where the chain's last node is (its output keeps its
// name) and removes the chain up from there while nothing else reads a node
// (other readers of a shared one take it into themselves in their turn).
void replace_chain(Graph& g, const std::deque<Node*>& chain, Node* replacement, const char* what, PassStats& stats) {
  Node* last = chain.back();
  std::deque<std::pair<std::string, std::string>> removed{{node_id(*last), last->display_name()}};
  g.replace_node(last, replacement);
  for (auto it = chain.rbegin() + 1; it != chain.rend() && (*it)->outputs[0]->uses.empty(); ++it) {
    removed.emplace_front(node_id(**it), (*it)->display_name());
    g.remove_node(*it);
  }
  Rewrite record{what, {}, {}};
  for (const auto& [id, display] : removed) {
    record.consumed.push_back(id);
    stats.removed.push_back(display);
  }
  record.produced.push_back(node_id(*replacement));
  stats.rewrites.push_back(std::move(record));
  stats.nodes_removed += static_cast<int64_t>(removed.size());
  ++stats.nodes_added;
}

}  // namespace

PassStats CollapseReshapes::run(Model& model, const PassOptions&) const {
  PassStats stats;
  FreshNames names(model);
  std::string why;
  for (Graph* g : model.all_graphs()) {
    std::set<std::string> refused;
    bool changed = false;
    const int64_t opset = default_opset(model, *g);
    Counts counts(*g);
    for (Node* last : g->topological_order()) {
      if (last->removed || !is_chain_op(*last) || continues(*g, *last)) continue;
      std::deque<Node*> chain = chain_ending_at(*g, last, refused);
      if (chain.size() < 2) continue;
      Target target;
      if (const char* r = target_of(model, *g, chain, counts, target, why)) {
        AxisMoves moves;
        if (!axis_moves(model, *g, chain, moves) || moves.nodes() >= chain.size()) {
          refused.insert(last->display_name() + ": " + r);
          continue;
        }
        const std::string base = last->name.value.empty() ? last->outputs[0]->name : last->name.value;
        Value* x = chain.front()->inputs[0];
        Node* replacement = nullptr;
        if (!moves.dropped.empty()) {
          replacement = axes_node(model, *g, opset, names, "Squeeze", x, moves.dropped,
                                  moves.inserted.empty() ? base : base + "_squeeze", last, stats);
          if (!moves.inserted.empty()) {
            replacement->name.set(base + "_squeeze");
            replacement->outputs.push_back(g->create_value(names.make(base + "_squeezed")));
            g->add_node(replacement, last);
            ++stats.nodes_added;
            x = replacement->outputs[0];
          }
        }
        if (!moves.inserted.empty())
          replacement = axes_node(model, *g, opset, names, "Unsqueeze", x, moves.inserted, base, last, stats);
        if (!replacement) {  // the chain gives its input back: an Identity, which eliminate_identity takes
          replacement = g->new_node();
          replacement->op_type.set("Identity");
          replacement->inputs.push_back(x);
        }
        replacement->name = last->name;
        replace_chain(*g, chain, replacement, "collapsed squeezes and unsqueezes", stats);
        changed = true;
        continue;
      }
      Node* reshape = g->new_node();
      reshape->op_type.set("Reshape");
      reshape->name = last->name;
      reshape->inputs.push_back(chain.front()->inputs[0]);
      if (opset && opset < 5) {
        Attribute& a = reshape->attributes.emplace_back();
        a.name.set("shape");
        a.type.set(int32_t(AttrType::kInts));
        a.ints = target.shape;
      } else {
        bool as_node = false;
        const std::string base = (last->name.value.empty() ? last->outputs[0]->name : last->name.value) + "_shape";
        reshape->inputs.push_back(
            add_constant(model, *g, int_tensor(target.shape, fold::kInt64), names.make(base), last, as_node));
        if (as_node) ++stats.nodes_added;
      }
      if (target.allowzero) reshape->attributes.push_back(int_attribute("allowzero", 1));
      replace_chain(*g, chain, reshape, "collapsed reshapes", stats);
      changed = true;
    }
    if (changed) {
      stats.initializers_removed += static_cast<int64_t>(g->remove_unused_initializers(stats.removed));
      stats.value_info_removed += static_cast<int64_t>(g->remove_stale_value_info());
    }
    stats.refused.insert(stats.refused.end(), refused.begin(), refused.end());
  }
  return stats;
}

}  // namespace pyonnxopt::passes
