#include "passes/optimize_transposes.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "passes/bypass.h"
#include "passes/known_values.h"
#include "passes/new_values.h"
#include "passes/permutation.h"
#include "passes/transpose_push.h"
#include "passes/transpose_region.h"

namespace pyonnxopt::passes {

using namespace ir;

namespace {

// `name` without the suffixes earlier moves appended ("_untransposed",
// "_transpose", each maybe with a counter): a value moved again and again
// keeps a name of bounded length (MaxViT's went past 10,000 characters).
std::string stem(const std::string& name) {
  std::string s = name;
  for (;;) {
    size_t end = s.size();
    while (end > 0 && s[end - 1] >= '0' && s[end - 1] <= '9') --end;
    const std::string t = end < s.size() && end > 0 && s[end - 1] == '_' ? s.substr(0, end - 1) : s;
    bool cut = false;
    for (const std::string suffix : {"_untransposed", "_transpose"}) {
      if (t.size() > suffix.size() && t.compare(t.size() - suffix.size(), suffix.size(), suffix) == 0) {
        s = t.substr(0, t.size() - suffix.size());
        cut = true;
        break;
      }
    }
    if (!cut) return s;
  }
}

constexpr int kMaxSweeps = 64;  // each sweep lowers the count or moves a Transpose down; a bound all the same

void set_perm(Node& t, const Perm& perm) {
  for (Attribute& a : t.attributes)
    if (a.name.value == "perm") {
      a.ints = perm;
      return;
    }
  Attribute& a = t.attributes.emplace_back();
  a.name.set("perm");
  a.type.set(int32_t(AttrType::kInts));
  a.ints = perm;
}

void set_attribute(Node& n, Attribute a) {
  for (Attribute& old : n.attributes)
    if (old.name.value == a.name.value) {
      old = std::move(a);
      return;
    }
  n.attributes.push_back(std::move(a));
}

// Computes the transposed constants a plan needs before anything changes,
// so a plan is applied whole or not at all.
bool prepare(Region& region, bool constants_as_nodes, int64_t opset) {
  for (Moved& m : region.moved)
    for (size_t i = 0; i < m.push.inputs.size(); ++i) {
      PushedInput& in = m.push.inputs[i];
      if (in.kind == PushedInput::kTransposedConstant) {
        const Tensor& t = *m.node->inputs[i]->initializer;
        in.tensor = in.own_perm.empty() ? transposed_constant(t, m.perm.size(), inverse(m.perm))
                                        : transposed_constant(t, in.own_perm.size(), in.own_perm);
        if (!in.tensor) return false;
      }
      // Constant-1 (before opset 9) holds floats only.
      const int32_t type = in.tensor ? in.tensor->data_type.value : 0;
      if (in.tensor && constants_as_nodes && opset < 9 && type != 1 && type != 10 && type != 11) return false;
    }
  return true;
}

// Carries out a plan, keeping the stats and the provenance record.
class Applier {
 public:
  Applier(const Model& model, Graph& graph, FreshNames& names, PassStats& stats)
      : model_(model), g_(graph), names_(names), stats_(stats) {}

  void apply(Region& region, const Roles& roles) {
    record_ = Rewrite{region.moved.empty() ? (roles.cancelled.empty() ? "merged transposes" : "cancelled transposes")
                                           : "moved transposes",
                      {}, {}};
    for (Node* s : roles.sources) twin_[s->outputs[0]] = s->inputs[0];
    for (const auto& [t, v] : roles.cancelled)  // before anything reads the twins: the counts bypass checks stand
      if (twin_.count(v)) cancel(t, v, roles.perm_of.at(v).size());
    for (Moved& m : region.moved) move(m, roles);
    for (const auto& [t, v] : roles.composed) {
      const Perm& perm = roles.perm_of.at(v);
      const Perm composed = compose(perm, *transpose_perm(*t, static_cast<int64_t>(perm.size())));
      g_.set_input(t, 0, twin_.at(v));
      set_perm(*t, composed);
    }
    for (const auto& [v, perm] : roles.perm_of) drop_unread(v);
    stats_.rewrites.push_back(std::move(record_));
  }

  std::set<Graph*> constants_replaced;  // graphs where a transposed constant may have left its original unread

 private:
  const Model& model_;
  Graph& g_;
  FreshNames& names_;
  PassStats& stats_;
  Rewrite record_;
  std::unordered_map<const Value*, Value*> twin_;       // region value -> the untransposed value
  std::unordered_map<const Value*, Node*> maker_;       // region value -> the Transpose added to make it
  std::unordered_map<const Value*, std::string> fresh_;  // twins split_output made, by the name given

  void removed(const Node* n) {
    ++stats_.nodes_removed;
    stats_.removed.push_back(n->display_name());
    record_.consumed.push_back(node_id(*n));
  }

  void cancel(Node* t, const Value* v, size_t rank) {
    const std::string label = t->display_name(), id = node_id(*t);
    Value* twin = twin_.at(v);
    if (bypass(g_, t, twin, t->outputs[0])) {  // the plan said it would not refuse: stay correct anyway
      g_.set_input(t, 0, twin);
      Perm identity(rank);
      for (size_t i = 0; i < rank; ++i) identity[i] = static_cast<int64_t>(i);
      set_perm(*t, identity);
      return;
    }
    ++stats_.nodes_removed;
    stats_.removed.push_back(label);
    record_.consumed.push_back(id);
  }

  Value* constant(std::shared_ptr<const Tensor> t, const std::string& base, Node* before) {
    bool as_node = false;
    Value* v = add_constant(model_, g_, std::make_unique<Tensor>(*t), names_.make(base), before, as_node);
    if (as_node) ++stats_.nodes_added;
    return v;
  }

  void move(Moved& m, const Roles& roles) {
    Node* n = m.node;
    for (size_t i = 0; i < m.push.inputs.size(); ++i) {
      PushedInput& in = m.push.inputs[i];
      if (i >= n->inputs.size()) n->inputs.resize(i + 1, nullptr);  // an added input (Slice's axes)
      Value* old = n->inputs[i];
      switch (in.kind) {
        case PushedInput::kKeep:
          break;
        case PushedInput::kPermuted:
          g_.set_input(n, static_cast<int>(i), twin_.at(old));
          break;
        case PushedInput::kTransposedConstant:
          constants_replaced.insert(old->graph);
          g_.set_input(n, static_cast<int>(i), constant(in.tensor, old->name + "_transposed", n));
          break;
        case PushedInput::kUnitMoved: {  // made in N's layout by a Transpose that reshape_unit_moves then turns
          Node* t = g_.new_node();
          t->op_type.set("Transpose");
          t->name.set(names_.make(stem(old->name) + "_transpose"));
          set_perm(*t, inverse(m.perm));
          t->inputs.push_back(old);
          t->outputs.push_back(g_.create_value(names_.make(stem(old->name) + "_untransposed")));
          g_.add_node(t, n);
          ++stats_.nodes_added;
          record_.produced.push_back(node_id(*t));
          g_.set_input(n, static_cast<int>(i), t->outputs[0]);
          break;
        }
        case PushedInput::kReplaced: {
          const std::string base = old ? old->name : (n->name.value.empty() ? "axes" : n->name.value + "_axes");
          g_.set_input(n, static_cast<int>(i), constant(in.tensor, base + "_permuted", n));
          if (old && old->initializer) constants_replaced.insert(old->graph);
          break;
        }
      }
    }
    if (m.push.swap_inputs) {
      Value *first = n->inputs[0], *second = n->inputs[1];
      g_.set_input(n, 0, second);
      g_.set_input(n, 1, first);
    }
    for (Attribute& a : m.push.attributes) set_attribute(*n, std::move(a));
    for (size_t i = 0; i < n->outputs.size(); ++i) {
      Value* y = n->outputs[i];
      if (!y || m.push.outputs[i].empty()) continue;
      Value* twin = g_.split_output(n, static_cast<int>(i), names_.make(stem(y->name) + "_untransposed"));
      twin_[y] = twin;
      fresh_[twin] = twin->name;
      Node* t = g_.new_node();
      t->op_type.set("Transpose");
      t->name.set(names_.make(stem(y->name) + "_transpose"));
      set_perm(*t, m.push.outputs[i]);
      t->inputs.push_back(twin);
      t->outputs.push_back(y);
      g_.add_node(t, n->next);
      maker_[y] = t;
      ++stats_.nodes_added;
      record_.produced.push_back(node_id(*t));
      for (const auto& [reader, v] : roles.cancelled)
        if (v == y) cancel(reader, v, m.push.outputs[i].size());
    }
  }

  // A region value nothing reads any more: the Transpose making it goes,
  // and a twin made in its place takes its name back.
  void drop_unread(Value* v) {
    if (!v->uses.empty() || v->is_graph_output()) return;
    Node* maker = v->producer;
    const std::string name = v->name;
    Value* twin = twin_.at(v);
    auto added = maker_.find(v);
    if (added == maker_.end()) {
      removed(maker);
      g_.remove_node(maker);
      return;
    }
    const std::string id = node_id(*maker);
    g_.remove_node(maker);
    --stats_.nodes_added;
    record_.produced.erase(std::find(record_.produced.begin(), record_.produced.end(), id));
    auto fresh = fresh_.find(twin);
    if (fresh != fresh_.end() && fresh->second == twin->name && !g_.find_local(name)) g_.rename_value(twin, name);
  }
};

// A Transpose reading a chain of Transposes reads the chain's input with
// the perms composed (the chain stays for its other readers). Returns
// whether it changed the graph.
bool shorten_chain(Graph& g, Node* t, PassStats& stats) {
  if (t->pinned) return false;
  std::optional<std::vector<int64_t>> shape = known_shape(t->inputs[0]);
  std::optional<Perm> perm = transpose_perm(*t, shape ? static_cast<int64_t>(shape->size()) : -1);
  Value* source = t->inputs[0];
  bool moved = false;
  while (perm && source->producer && is_transpose(*source->producer)) {
    const Node* up = source->producer;
    std::optional<Perm> p = transpose_perm(*up, static_cast<int64_t>(perm->size()));
    if (!p || g.lookup(up->inputs[0]->name) != up->inputs[0]) break;
    perm = compose(*p, *perm);
    source = up->inputs[0];
    moved = true;
  }
  if (!moved || !perm) return false;
  const std::string label = t->display_name(), id = node_id(*t);
  if (is_identity(*perm)) {
    if (bypass(g, t, source, t->outputs[0])) return false;
    stats.removed.push_back(label);
    stats.rewrites.push_back({"cancelled transposes", {id}, {}});
    ++stats.nodes_removed;
    return true;
  }
  Node* merged = g.new_node();
  merged->op_type = t->op_type;
  merged->domain = t->domain;
  merged->name = t->name;
  set_perm(*merged, *perm);
  merged->inputs.push_back(source);
  g.replace_node(t, merged);
  stats.rewrites.push_back({"merged transposes", {id}, {node_id(*merged)}});
  ++stats.nodes_removed;
  ++stats.nodes_added;
  return true;
}

// A Transpose that moves only axes of size 1 keeps the order of the data:
// a Reshape (a view at run time, and collapse_reshapes merges it with its
// neighbours). The target gives each known dim, 0 for an unknown one that
// stays at its index (copied), -1 for one unknown that moves. Returns
// whether it changed the graph.
bool reshape_unit_moves(const Model& model, Graph& g, Node* t, FreshNames& names, PassStats& stats) {
  if (t->pinned || default_opset(model, g) < 5) return false;
  std::optional<std::vector<int64_t>> dims = known_shape(t->inputs[0]);
  if (!dims) return false;
  std::optional<Perm> perm = transpose_perm(*t, static_cast<int64_t>(dims->size()));
  // keeps_data_order also refuses a 0 dim (in the target it would copy, allowzero aside) and a second moved unknown.
  if (!perm || is_identity(*perm) || !keeps_data_order(*dims, *perm)) return false;
  std::vector<int64_t> target;
  for (size_t i = 0; i < perm->size(); ++i) {
    const int64_t axis = (*perm)[i], d = (*dims)[static_cast<size_t>(axis)];
    target.push_back(d != kUnknownDim ? d : axis == static_cast<int64_t>(i) ? 0 : -1);
  }
  bool as_node = false;
  const std::string base = (t->name.value.empty() ? t->outputs[0]->name : t->name.value) + "_shape";
  Value* shape = add_constant(model, g, int_tensor(target, 7), names.make(base), t, as_node);
  if (as_node) ++stats.nodes_added;
  Node* reshape = g.new_node();
  reshape->op_type.set("Reshape");
  reshape->name = t->name;
  reshape->inputs = {t->inputs[0], shape};
  const std::string label = t->display_name(), id = node_id(*t);
  g.replace_node(t, reshape);
  stats.removed.push_back(label);
  stats.rewrites.push_back({"transpose of size-1 axes to reshape", {id}, {node_id(*reshape)}});
  ++stats.nodes_removed;
  ++stats.nodes_added;
  return true;
}

// Reshape -> Transpose -> Reshape where the Transpose can move below the
// second Reshape: moved, the count stays, but the two Reshapes meet and
// collapse_reshapes makes them one (nn.MultiheadAttention's q and v,
// [S, B*h, d] -> [B*h, S, d] -> [B, h, S, d]). The plan that moves it just
// there, or nullopt.
std::optional<Region> below_next_reshape(const Model& model, const Graph& g, Node* root, const Perm& perm,
                                         const std::unordered_map<const Node*, size_t>& position) {
  const Value* in = root->inputs[0];
  const Value* out = root->outputs[0];
  if (!reshape_like(in->producer) || in->is_graph_output() || in->uses.size() != 1 || out->is_graph_output() ||
      out->uses.size() != 1)
    return std::nullopt;
  Node* reshape = out->uses[0].node;
  if (reshape->op_type.value != "Reshape" || !(reshape->domain.value.empty() || reshape->domain.value == "ai.onnx") ||
      reshape->pinned || reshape->graph != &g || !position.count(reshape))
    return std::nullopt;
  PushQuery query{model, g, *reshape, perm, [&](const Value& v) { return &v == out; }, true};
  Moved moved{reshape, perm, Push{}, position.at(reshape)};
  if (plan_push(query, moved.push) || moved.push.outputs.empty() || moved.push.outputs[0].empty()) return std::nullopt;
  Region region;
  region.root = root;
  region.root_perm = perm;
  region.moved.push_back(std::move(moved));
  return region;
}

// One sweep over a graph: every Transpose a start, then the chains.
// Returns whether anything changed; refusals go to `refused`. `regroup`:
// regroup_transposes' moves too.
bool sweep(Model& model, Graph& g, FreshNames& names, PassStats& stats, std::set<std::string>& refused,
           bool regroup) {
  bool changed = false;
  const bool as_nodes = g.is_function_body || (model.ir_version.has && model.ir_version.value < 4);
  const int64_t opset = default_opset(model, g);
  const std::vector<Node*> order = g.topological_order();
  std::unordered_map<const Node*, size_t> position;
  for (size_t i = 0; i < order.size(); ++i) position.emplace(order[i], i);
  Planner planner(model, g, position, regroup);
  std::set<Graph*> replaced;
  for (Node* root : order) {
    if (root->removed || !is_transpose(*root)) continue;
    std::optional<std::vector<int64_t>> shape = known_shape(root->inputs[0]);
    std::optional<Perm> perm = transpose_perm(*root, shape ? static_cast<int64_t>(shape->size()) : -1);
    if (!perm) {
      refused.insert(root->display_name() + ": Transpose without perm and its input's rank unknown");
      continue;
    }
    if (is_identity(*perm)) continue;  // eliminate_nop's
    Region region = planner.grow(root, *perm);
    Roles roles = planner.roles(region);
    bool to_next_reshape = false;
    if (regroup && roles.delta >= 0)
      if (std::optional<Region> cut = below_next_reshape(model, g, root, *perm, position)) {
        Roles cut_roles = planner.roles(*cut);
        if (cut_roles.delta == 0) {
          region = std::move(*cut);
          roles = std::move(cut_roles);
          to_next_reshape = true;
        }
      }
    if (roles.delta >= 0 && !to_next_reshape) {
      refused.insert(planner.refusals().begin(), planner.refusals().end());
      continue;
    }
    if (root->pinned) {
      refused.insert(root->display_name() + ": excluded from optimization");
      continue;
    }
    if (!prepare(region, as_nodes, opset)) continue;
    Applier apply(model, g, names, stats);
    apply.apply(region, roles);
    replaced.insert(apply.constants_replaced.begin(), apply.constants_replaced.end());
    changed = true;
  }
  for (Node* t : g.topological_order())
    if (is_transpose(*t)) changed = shorten_chain(g, t, stats) || changed;
  // Last, and only after the fusions (regroup_transposes): a Transpose that
  // may still cancel, against another or one a fusion adds (fuse_attention's
  // batch-first ones), is not made a Reshape first.
  if (!changed && regroup)
    for (Node* t : g.topological_order())
      if (is_transpose(*t)) changed = reshape_unit_moves(model, g, t, names, stats) || changed;
  for (Graph* r : replaced) stats.initializers_removed += static_cast<int64_t>(r->remove_unused_initializers(stats.removed));
  if (changed) stats.value_info_removed += static_cast<int64_t>(g.remove_stale_value_info());
  return changed;
}

}  // namespace

PassStats OptimizeTransposes::run(Model& model, const PassOptions&) const {
  PassStats stats;
  FreshNames names(model);
  for (Graph* g : model.all_graphs()) {
    std::set<std::string> refused;
    for (int i = 0; i < kMaxSweeps; ++i) {
      refused.clear();
      if (!sweep(model, *g, names, stats, refused, regroup())) break;
    }
    stats.refused.insert(stats.refused.end(), refused.begin(), refused.end());
  }
  return stats;
}

}  // namespace pyonnxopt::passes
