#include "match/pattern.h"

#include <cmath>
#include <cstring>

#include "fold/array.h"
#include "fold/broadcast.h"
#include "passes/known_values.h"
#include "passes/pass.h"

namespace pyonnxopt::match {
namespace {

bool same_domain(const std::string& a, const std::string& b) {
  auto norm = [](const std::string& d) { return d == "ai.onnx" ? std::string() : d; };
  return norm(a) == norm(b);
}

std::string who(const ir::Node& n) { return "'" + passes::node_id(n) + "'"; }

bool is_constant(const ir::Value* v) { return v && v->initializer && !v->is_graph_input; }

// Element `i` of a constant as double; false for types that have no such reading.
bool element_as_double(const fold::Array& a, uint64_t i, double& out) {
  using namespace fold;
  switch (a.dtype) {
    case kFloat: out = a.at<float>(i); return true;
    case kDouble: out = a.at<double>(i); return true;
    case kFloat16: out = half_to_float(a.at<uint16_t>(i)); return true;
    case kBFloat16: {
      const uint32_t bits = uint32_t(a.at<uint16_t>(i)) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      out = f;
      return true;
    }
    case kInt8: out = a.at<int8_t>(i); return true;
    case kUint8: out = a.at<uint8_t>(i); return true;
    case kInt16: out = a.at<int16_t>(i); return true;
    case kUint16: out = a.at<uint16_t>(i); return true;
    case kInt32: out = a.at<int32_t>(i); return true;
    case kUint32: out = a.at<uint32_t>(i); return true;
    case kInt64: out = double(a.at<int64_t>(i)); return true;
    case kUint64: out = double(a.at<uint64_t>(i)); return true;
    case kBool: out = a.at<uint8_t>(i) ? 1 : 0; return true;
    default: return false;
  }
}

std::string attr_text(const AttrConstraint& c) {
  std::string s;
  switch (c.type) {
    case ir::AttrType::kInt: return std::to_string(c.ints.empty() ? 0 : c.ints[0]);
    case ir::AttrType::kFloat: return std::to_string(c.floats.empty() ? 0 : c.floats[0]);
    case ir::AttrType::kString: return "'" + c.s + "'";
    case ir::AttrType::kInts:
      for (int64_t i : c.ints) s += (s.empty() ? "" : ",") + std::to_string(i);
      return "[" + s + "]";
    default:
      for (double f : c.floats) s += (s.empty() ? "" : ",") + std::to_string(f);
      return "[" + s + "]";
  }
}

// Empty when the node's attribute satisfies `c`, else why not.
std::string check_attr(const ir::Node& n, const AttrConstraint& c) {
  const ir::Attribute* a = n.attribute(c.name);
  if (!a) return c.absent_ok ? "" : "no attribute " + c.name + " (needs " + attr_text(c) + ")";
  if (a->ref_attr_name.has) return "attribute " + c.name + " refers to a function attribute";
  bool ok = false;
  switch (c.type) {
    case ir::AttrType::kInt: ok = a->i.has && !c.ints.empty() && a->i.value == c.ints[0]; break;
    case ir::AttrType::kFloat: ok = a->f.has && !c.floats.empty() && double(a->f.value) == double(float(c.floats[0])); break;
    case ir::AttrType::kString: ok = a->s.has && a->s.value == c.s; break;
    case ir::AttrType::kInts: ok = a->ints == c.ints; break;
    case ir::AttrType::kFloats: {
      ok = a->floats.size() == c.floats.size();
      for (size_t i = 0; ok && i < c.floats.size(); ++i) ok = double(a->floats[i]) == double(float(c.floats[i]));
      break;
    }
    default: break;
  }
  return ok ? "" : "attribute " + c.name + " is not " + attr_text(c);
}

class Matcher {
 public:
  // `explain`: write why attempts fail (near misses); off, failures cost nothing.
  Matcher(const ir::Graph& g, const Pattern& p, bool explain) : graph_(g), p_(p), explain_(explain) {
    for (size_t e = 0; e < p_.elements.size(); ++e)
      if (p_.elements[e].commutative && p_.elements[e].inputs.size() >= 2) commutative_.push_back(e);
    bit_of_.assign(p_.elements.size(), -1);
    for (size_t i = 0; i < std::min(commutative_.size(), kMaxSwappable); ++i) bit_of_[commutative_[i]] = int(i);
  }

  // Tries the pattern rooted at `root`. True on a match (bindings in `m_`);
  // false with `best_reason_` set where an attempt bound more than `floor`
  // elements (`explained()`). Each commutative element may take its inputs
  // in either order; every combination is tried (first found wins), since
  // only a whole binding can tell whether the exclusivity rule holds.
  bool run(ir::Node* root, int floor = -1) {
    best_reason_.clear();
    best_depth_ = floor;
    best_ops_ = 0;
    explained_ = false;
    const size_t swappable = std::min(commutative_.size(), kMaxSwappable);
    // Orders differing only in elements no attempt reached bind alike: the
    // orders tried are those of the elements reached so far (`reached`
    // grows as attempts go deeper).
    size_t reached = 0;
    for (size_t mask = 0; mask < (size_t(1) << reached) || mask == 0; ++mask) {
      swapped_.assign(p_.elements.size(), false);
      for (size_t i = 0; i < swappable; ++i) swapped_[commutative_[i]] = (mask >> i) & 1;
      m_.nodes.assign(p_.elements.size(), nullptr);
      m_.values.assign(p_.elements.size(), nullptr);
      bound_.assign(p_.elements.size(), false);
      highest_bit_ = -1;
      if (bind_op(0, root) && exclusive_outputs()) return true;
      reached = std::max(reached, size_t(highest_bit_ + 1));
    }
    return false;
  }

  const Match& match() const { return m_; }
  const std::string& reason() const { return best_reason_; }
  int reason_depth() const { return best_depth_ < 0 ? 0 : best_depth_; }
  int reason_ops() const { return best_ops_; }
  bool explained() const { return explained_; }

 private:
  const ir::Graph& graph_;
  const Pattern& p_;
  const bool explain_;
  std::vector<size_t> commutative_;  // elements that may take inputs 0 and 1 swapped
  bool explained_ = false;
  Match m_;
  std::vector<bool> bound_;
  std::vector<bool> swapped_;  // per element: take inputs 0 and 1 swapped
  std::vector<int> bit_of_;   // per element: its bit in the order mask, or -1
  int highest_bit_ = -1;      // the highest such bit this attempt reached
  static constexpr size_t kMaxSwappable = 10;  // beyond, later commutative elements keep their order
  std::string best_reason_;
  int best_depth_ = -1;
  int best_ops_ = 0;

  int depth() const {
    int d = 0;
    for (bool b : bound_) d += b;
    return d;
  }
  int ops_bound() const {
    int d = 0;
    for (size_t e = 0; e < bound_.size(); ++e) d += bound_[e] && p_.elements[e].kind == Element::Kind::kOp;
    return d;
  }
  // Keeps the failure of the attempt that bound the most elements: the
  // "almost" of an almost-match. The reason is written only then: most
  // failures are shallower than one already kept. `typed`: the failing op
  // element had found a node of its type (it counts among the ops).
  template <class Why>
  bool fail(Why&& why, bool typed = false) {
    if (!explain_) return false;
    const int d = depth();
    if (d > best_depth_) {
      best_depth_ = d;
      best_ops_ = ops_bound() + typed;
      best_reason_ = why();
      explained_ = true;
    }
    return false;
  }
  std::string label(int e) const { return "'" + p_.elements[size_t(e)].name + "'"; }

  bool bind_value(int e, ir::Value* v) {
    const Element& el = p_.elements[size_t(e)];
    if (el.kind == Element::Kind::kOp) {
      if (!v) return fail([&] { return label(e) + ": input is omitted"; });
      if (!v->producer) return fail([&] { return label(e) + ": '" + v->name + "' is not produced by a node"; });
      if (v->producer->graph != &graph_)
        return fail([&] { return label(e) + ": '" + v->name + "' comes from an outer graph"; });
      if (v->producer_index != el.output_index)
        return fail([&] {
          return label(e) + ": '" + v->name + "' is output " + std::to_string(v->producer_index) + " of its node";
        });
      return bind_op(e, v->producer);
    }
    if (bound_[size_t(e)])
      return m_.values[size_t(e)] == v ? true : fail([&] { return label(e) + ": not the same value both times"; });
    if (!v) {
      if (!el.optional) return fail([&] { return label(e) + ": input is omitted"; });
    } else {
      if ((el.constant || el.scalar || el.has_value) && !is_constant(v))
        return fail([&] { return label(e) + ": '" + v->name + "' is not a constant"; });
      if (el.dtype) {
        const int32_t t = passes::known_elem_type(v);
        if (t != el.dtype)
          return fail([&] {
            return label(e) + ": '" + v->name + "' has element type " + (t ? ir::dtype_name(t) : "unknown") +
                   ", needs " + ir::dtype_name(el.dtype);
          });
      }
      if (el.rank >= 0) {
        const auto shape = passes::known_shape(v);
        if (!shape) return fail([&] { return label(e) + ": rank of '" + v->name + "' unknown"; });
        if (int(shape->size()) != el.rank)
          return fail([&] {
            return label(e) + ": '" + v->name + "' has rank " + std::to_string(shape->size()) + ", needs " +
                   std::to_string(el.rank);
          });
      }
      if (el.scalar || el.has_value) {
        std::string why = check_constant(el, *v->initializer);
        if (!why.empty()) return fail([&] { return label(e) + ": '" + v->name + "' " + why; });
      }
    }
    bound_[size_t(e)] = true;
    m_.values[size_t(e)] = v;
    return true;
  }

  std::string check_constant(const Element& el, const ir::Tensor& t) {
    fold::Array a;
    std::string why;
    if (!fold::to_array(t, a, why)) return "is unreadable: " + why;
    if (el.scalar && a.numel() != 1) return "has " + std::to_string(a.numel()) + " elements, needs 1";
    if (el.has_value) {
      for (uint64_t i = 0; i < a.numel(); ++i) {
        double x;
        if (!element_as_double(a, i, x)) return std::string("has an element type without numeric values");
        if (!(x == el.value)) return "holds " + std::to_string(x) + ", needs every element " + std::to_string(el.value);
      }
    }
    return "";
  }

  bool bind_op(int e, ir::Node* n) {
    const Element& el = p_.elements[size_t(e)];
    if (bound_[size_t(e)])
      return m_.nodes[size_t(e)] == n ? true : fail([&] { return label(e) + ": not the same node both times"; });
    bool type_ok = false;
    for (const auto& t : el.op_types) type_ok = type_ok || t == n->op_type.value;
    if (!type_ok || !same_domain(el.domain, n->domain.value)) {
      std::string want;
      for (const auto& t : el.op_types) want += (want.empty() ? "" : "/") + t;
      return fail([&] { return label(e) + ": " + who(*n) + " is not " + want; });
    }
    if (n->pinned) return fail([&] { return label(e) + ": " + who(*n) + " is pinned"; }, true);
    for (const auto& c : el.attrs) {
      std::string why = check_attr(*n, c);
      if (!why.empty()) return fail([&] { return label(e) + ": " + who(*n) + " " + why; }, true);
    }
    // Present inputs beyond the pattern's, or missing required ones, fail.
    size_t present = n->inputs.size();
    while (present && !n->inputs[present - 1]) --present;
    if (present > el.inputs.size())
      return fail(
          [&] {
            return label(e) + ": " + who(*n) + " has " + std::to_string(present) + " inputs, needs at most " +
                   std::to_string(el.inputs.size());
          },
          true);
    bound_[size_t(e)] = true;
    m_.nodes[size_t(e)] = n;
    auto input = [&](size_t i) { return i < n->inputs.size() ? n->inputs[i] : nullptr; };
    const bool swap = swapped_[size_t(e)];
    highest_bit_ = std::max(highest_bit_, bit_of_[size_t(e)]);
    for (size_t i = 0; i < el.inputs.size(); ++i) {
      const size_t from = swap && i < 2 ? 1 - i : i;
      if (!bind_value(el.inputs[i], input(from))) return unbind(e);
    }
    return true;
  }

  bool unbind(int e) {
    bound_[size_t(e)] = false;
    m_.nodes[size_t(e)] = nullptr;
    return false;
  }

  // Whether `use` of an output of `producer` is an edge of the pattern: a
  // matched node reading it at an input slot where the pattern has
  // producer's element. A matched node that reads it through a variable
  // slot is not (a MatMul of P and Transpose(P), where the rule rewrites
  // the P it takes to be only its first operand).
  bool read_by_pattern_edge(const ir::Node* producer, const ir::Use& use) const {
    for (size_t f = 0; f < p_.elements.size(); ++f) {
      if (m_.nodes[f] != use.node || p_.elements[f].kind != Element::Kind::kOp) continue;
      const auto& inputs = p_.elements[f].inputs;
      const size_t slot = swapped_[f] && use.index < 2 ? size_t(1 - use.index) : size_t(use.index);
      if (slot < inputs.size() && m_.nodes[size_t(inputs[slot])] == producer) return true;
    }
    return false;
  }

  // Every op element but the root, when exclusive, has outputs read only
  // along the pattern's edges and none is a graph output: removing the matched nodes
  // then cannot take a value from anyone else (peers have shipped exactly
  // this bug: a Pad fused into two Convs, one of which needed it whole).
  bool exclusive_outputs() {
    for (size_t e = 1; e < p_.elements.size(); ++e) {
      const Element& el = p_.elements[e];
      if (el.kind != Element::Kind::kOp || !el.exclusive) continue;
      const ir::Node* n = m_.nodes[e];
      for (const ir::Value* out : n->outputs) {
        if (!out) continue;
        if (out->is_graph_output())
          return fail([&] { return label(int(e)) + ": its output '" + out->name + "' is a graph output"; });
        for (const ir::Use& u : out->uses) {
          if (!read_by_pattern_edge(n, u)) {
            return fail(
                [&] { return label(int(e)) + ": its output '" + out->name + "' is also read by " + who(*u.node); });
          }
        }
      }
    }
    return true;
  }
};

}  // namespace

std::string Pattern::validate() const {
  if (elements.empty() || elements[0].kind != Element::Kind::kOp) return "the root must be an op";
  for (size_t e = 0; e < elements.size(); ++e) {
    const Element& el = elements[e];
    if (el.kind == Element::Kind::kOp && el.op_types.empty()) return "op element " + std::to_string(e) + " has no op type";
    for (int i : el.inputs)
      if (i <= 0 || size_t(i) >= elements.size()) return "element " + std::to_string(e) + " names input element " + std::to_string(i);
  }
  return "";
}

namespace {

// Calls `each(node)` for every node of `graph` whose op type and domain are the root's.
template <class Each>
void for_each_root(const ir::Graph& graph, const Pattern& pattern, Each&& each) {
  const Element& root = pattern.elements[0];
  for (ir::Node* n : graph.nodes) {
    bool type_ok = false;
    for (const auto& t : root.op_types) type_ok = type_ok || t == n->op_type.value;
    if (type_ok && same_domain(root.domain, n->domain.value)) each(n);
  }
}

}  // namespace

Matches find_all(const ir::Graph& graph, const Pattern& pattern) {
  Matches out;
  Matcher matcher(graph, pattern, true);
  for_each_root(graph, pattern, [&](ir::Node* n) {
    if (matcher.run(n))
      out.found.push_back(matcher.match());
    else
      out.near.push_back({n, matcher.reason(), matcher.reason_depth(), matcher.reason_ops()});
  });
  return out;
}

std::vector<Match> find_matches(const ir::Graph& graph, const Pattern& pattern, NearMissBook* book, int min_ops) {
  std::vector<Match> found;
  Matcher matcher(graph, pattern, book != nullptr);
  for_each_root(graph, pattern, [&](ir::Node* n) {
    NearMiss* held = nullptr;
    if (book)
      if (auto it = book->at.find(n); it != book->at.end()) held = &book->entries[it->second];
    if (matcher.run(n, held ? held->depth : -1)) {
      found.push_back(matcher.match());
    } else if (book && matcher.explained() && matcher.reason_ops() >= min_ops) {
      NearMiss miss{n, matcher.reason(), matcher.reason_depth(), matcher.reason_ops()};
      if (!held) {
        book->at.emplace(n, book->entries.size());
        held = &book->entries.emplace_back();
      }
      *held = std::move(miss);
    }
  });
  return found;
}

}  // namespace pyonnxopt::match
