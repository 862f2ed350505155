#include "passes/optimize_transposes.h"

#include <algorithm>
#include <memory>
#include <set>
#include <unordered_set>

#include "passes/bypass.h"
#include "passes/known_values.h"
#include "passes/new_values.h"
#include "passes/permutation.h"
#include "passes/transpose_push.h"

namespace pyonnxopt::passes {

using namespace ir;

namespace {

constexpr int kMaxPlanNodes = 256;  // nodes one plan may move a Transpose through
constexpr int kMaxSweeps = 64;      // each sweep strictly lowers the count; a bound all the same

struct NodePlan;

// What becomes of the readers of `value`, which is Transpose<perm>(the
// untransposed value).
struct ValuePlan {
  Value* value = nullptr;
  Perm perm;
  std::vector<Node*> cancelled;      // Transposes that undo it: bypassed
  std::vector<Node*> composed;       // other Transposes: read the untransposed value, perms composed
  std::unique_ptr<NodePlan> pushed;  // the one other reader, computing on the untransposed value
  bool kept = false;                 // a Transpose stays (or is added) for what else reads it
  int delta = 0;                     // Transposes added minus removed, from here down
};

struct NodePlan {
  Node* node = nullptr;
  Perm perm;  // of the transposed value it reads
  Push push;
  std::vector<Node*> freed;                         // sibling Transposes nothing else reads
  std::vector<std::unique_ptr<ValuePlan>> outputs;  // per output; nullptr where none follows
  int delta = 0;
};

// Follows a Transpose's output down and says what moving it would cost.
// Every node a plan changes is claimed, so no node takes two roles.
class Planner {
 public:
  Planner(const Model& model, const Graph& graph) : model_(model), graph_(graph) {}

  std::unique_ptr<ValuePlan> plan(Node* root, const Perm& perm) {
    claimed_.clear();
    claims_.clear();
    refusals_.clear();
    budget_ = kMaxPlanNodes;
    claim(root);
    return plan_value(root->outputs[0], perm, root->inputs[0]);
  }
  const std::vector<std::string>& refusals() const { return refusals_; }

 private:
  const Model& model_;
  const Graph& graph_;
  std::unordered_set<const Node*> claimed_;
  std::vector<const Node*> claims_;  // in order, to take back a plan not chosen
  std::vector<std::string> refusals_;
  int budget_ = 0;

  bool claimed(const Node* n) const { return claimed_.count(n) != 0; }
  void claim(const Node* n) {
    if (claimed_.insert(n).second) claims_.push_back(n);
  }
  void rollback(size_t mark) {
    for (; claims_.size() > mark; claims_.pop_back()) claimed_.erase(claims_.back());
  }

  // A Transpose reading `v` whose composed perm is the identity goes (bypass
  // to the untransposed value: `existing`, the start's input, or a value a
  // moved node makes, of this graph, read by the kept Transpose alone then).
  bool cancels(const Node* t, const Value* v, const Value* existing) const {
    const Value* out = t->outputs[0];
    if (out->is_graph_output() && (v->uses.size() != 1 || v->is_graph_output())) return false;
    if (existing) return why_not_bypass(graph_, t, existing, out, existing->uses.size()) == nullptr;
    return why_not_bypass(graph_, t, v, out, 1) == nullptr;  // v stands in: same graph, made by a node
  }

  std::unique_ptr<ValuePlan> plan_value(Value* v, const Perm& perm, const Value* existing) {
    auto plan = std::make_unique<ValuePlan>();
    plan->value = v;
    plan->perm = perm;
    const int64_t rank = static_cast<int64_t>(perm.size());
    bool keep = v->is_graph_output();
    std::vector<Node*> others;
    for (const Use& u : v->uses) {
      Node* n = u.node;
      if (n->graph != &graph_ || claimed(n)) {
        keep = true;
      } else if (is_transpose(*n)) {
        std::optional<Perm> p = n->pinned ? std::nullopt : transpose_perm(*n, rank);
        if (p && !is_identity(compose(perm, *p))) {
          plan->composed.push_back(n);
          claim(n);
        } else if (p && cancels(n, v, existing)) {
          plan->cancelled.push_back(n);
          claim(n);
        } else {
          keep = true;  // it reads the Transpose that stays
        }
      } else if (std::find(others.begin(), others.end(), n) == others.end()) {
        others.push_back(n);
      }
    }
    const int found = -static_cast<int>(plan->cancelled.size());
    plan->kept = keep || !others.empty();
    plan->delta = found + (plan->kept ? 1 : 0);
    if (keep || others.size() != 1 || budget_ <= 0) return plan;
    const size_t mark = claims_.size();
    std::unique_ptr<NodePlan> pushed = plan_node(others[0], v, perm);
    if (pushed && found + pushed->delta < plan->delta) {
      plan->delta = found + pushed->delta;
      plan->kept = false;
      plan->pushed = std::move(pushed);
    } else {
      rollback(mark);
    }
    return plan;
  }

  std::unique_ptr<NodePlan> plan_node(Node* n, Value* v, const Perm& perm) {
    auto plan = std::make_unique<NodePlan>();
    plan->node = n;
    plan->perm = perm;
    PushQuery query{model_, graph_, *n, *v, perm, [this](const Node& s) { return !claimed(&s); }};
    const char* why = plan_push(query, plan->push);
    if (why == kNoRule) return nullptr;
    if (!why && n->pinned) why = "excluded from optimization";
    if (why) {
      refusals_.push_back(n->display_name() + ": " + why);
      return nullptr;
    }
    claim(n);
    --budget_;
    for (const PushedInput& in : plan->push.inputs) {
      if (in.kind != PushedInput::kSibling || claimed(in.sibling)) continue;  // one sibling at two inputs: once
      claim(in.sibling);
      const Value* s = in.sibling->outputs[0];
      const bool only_here = !s->is_graph_output() &&
                             std::all_of(s->uses.begin(), s->uses.end(), [n](const Use& u) { return u.node == n; });
      if (only_here) {
        plan->freed.push_back(in.sibling);
        --plan->delta;
      }
    }
    for (size_t i = 0; i < n->outputs.size(); ++i) {
      plan->outputs.emplace_back();
      if (!n->outputs[i] || plan->push.outputs[i].empty()) continue;
      plan->outputs[i] = plan_value(n->outputs[i], plan->push.outputs[i], nullptr);
      plan->delta += plan->outputs[i]->delta;
    }
    return plan;
  }
};

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
bool prepare(NodePlan& plan, bool constants_as_nodes, int64_t opset) {
  for (size_t i = 0; i < plan.push.inputs.size(); ++i) {
    PushedInput& in = plan.push.inputs[i];
    if (in.kind == PushedInput::kTransposedConstant) {
      const Value* c = plan.node->inputs[i];
      in.tensor = transposed_constant(*c->initializer, plan.perm.size(), inverse(plan.perm));
      if (!in.tensor) return false;
    }
    // Constant-1 (before opset 9) holds floats only.
    const bool is_float = in.tensor && (in.tensor->data_type.value == 1 || in.tensor->data_type.value == 10 ||
                                        in.tensor->data_type.value == 11);
    if (in.tensor && constants_as_nodes && opset < 9 && !is_float) return false;
  }
  for (auto& out : plan.outputs)
    if (out && out->pushed && !prepare(*out->pushed, constants_as_nodes, opset)) return false;
  return true;
}

// Carries out a plan, keeping the stats and the provenance record.
class Applier {
 public:
  Applier(const Model& model, Graph& graph, FreshNames& names, PassStats& stats, Rewrite& record)
      : model_(model), g_(graph), names_(names), stats_(stats), record_(record) {}

  // `maker` is the Transpose that makes p.value from `untransposed`.
  void value(ValuePlan& p, Value* untransposed, Node* maker) {
    for (Node* t : p.cancelled) {
      const std::string label = t->display_name(), id = node_id(*t);
      if (bypass(g_, t, untransposed, t->outputs[0])) {  // the plan said it would not refuse: keep it correct anyway
        g_.set_input(t, 0, untransposed);
        set_perm(*t, Perm(p.perm.size()));
        continue;
      }
      removed(label, id);
    }
    for (Node* t : p.composed) {
      const Perm perm = compose(p.perm, *transpose_perm(*t, static_cast<int64_t>(p.perm.size())));
      g_.set_input(t, 0, untransposed);
      set_perm(*t, perm);
    }
    if (p.pushed) node(*p.pushed, untransposed);
    if (!p.value->uses.empty() || p.value->is_graph_output()) return;
    const std::string label = maker->display_name(), id = node_id(*maker);
    g_.remove_node(maker);
    if (added_.erase(maker)) {
      --stats_.nodes_added;
      record_.produced.erase(std::find(record_.produced.begin(), record_.produced.end(), id));
    } else {
      removed(label, id);
    }
  }

  std::set<Graph*> constants_replaced;  // graphs where a transposed constant may have left its original unread

 private:
  const Model& model_;
  Graph& g_;
  FreshNames& names_;
  PassStats& stats_;
  Rewrite& record_;
  std::unordered_set<const Node*> added_;

  void removed(const std::string& label, const std::string& id) {
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

  void node(NodePlan& p, Value* untransposed) {
    Node* n = p.node;
    record_.what = "moved transposes";
    for (size_t i = 0; i < p.push.inputs.size(); ++i) {
      PushedInput& in = p.push.inputs[i];
      if (i >= n->inputs.size()) n->inputs.resize(i + 1, nullptr);  // an added input (Slice's axes)
      Value* old = n->inputs[i];
      switch (in.kind) {
        case PushedInput::kKeep:
          break;
        case PushedInput::kPermuted:
          g_.set_input(n, static_cast<int>(i), untransposed);
          break;
        case PushedInput::kSibling:
          g_.set_input(n, static_cast<int>(i), in.sibling->inputs[0]);
          break;
        case PushedInput::kTransposedConstant:
          constants_replaced.insert(old->graph);
          g_.set_input(n, static_cast<int>(i), constant(in.tensor, old->name + "_transposed", n));
          break;
        case PushedInput::kReplaced:
          g_.set_input(n, static_cast<int>(i), constant(in.tensor, (old ? old->name : n->name.value + "_axes") + "_permuted", n));
          if (old && old->initializer) constants_replaced.insert(old->graph);
          break;
      }
    }
    for (Node* s : p.freed) {
      const std::string label = s->display_name(), id = node_id(*s);
      if (!s->outputs[0]->uses.empty() || s->outputs[0]->is_graph_output()) continue;
      g_.remove_node(s);
      removed(label, id);
    }
    for (Attribute& a : p.push.attributes) set_attribute(*n, std::move(a));
    for (size_t i = 0; i < p.outputs.size(); ++i) {
      if (!p.outputs[i]) continue;
      Value* y = n->outputs[i];
      Value* pre = g_.split_output(n, static_cast<int>(i), names_.make(y->name + "_untransposed"));
      Node* t = g_.new_node();
      t->op_type.set("Transpose");
      t->name.set(names_.make(y->name + "_transpose"));
      set_perm(*t, p.outputs[i]->perm);
      t->inputs.push_back(pre);
      t->outputs.push_back(y);
      g_.add_node(t, n->next);
      added_.insert(t);
      ++stats_.nodes_added;
      record_.produced.push_back(node_id(*t));
      value(*p.outputs[i], pre, t);
    }
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

// One sweep over a graph: every Transpose a start, then the chains.
// Returns whether anything changed; refusals go to `refused`.
bool sweep(Model& model, Graph& g, FreshNames& names, PassStats& stats, std::set<std::string>& refused) {
  bool changed = false;
  const bool as_nodes = g.is_function_body || (model.ir_version.has && model.ir_version.value < 4);
  const int64_t opset = default_opset(model, g);
  Planner planner(model, g);
  std::set<Graph*> replaced;
  for (Node* root : g.topological_order()) {
    if (root->removed || !is_transpose(*root)) continue;
    std::optional<std::vector<int64_t>> shape = known_shape(root->inputs[0]);
    std::optional<Perm> perm = transpose_perm(*root, shape ? static_cast<int64_t>(shape->size()) : -1);
    if (!perm) {
      refused.insert(root->display_name() + ": Transpose without perm and its input's rank unknown");
      continue;
    }
    if (is_identity(*perm)) continue;  // eliminate_nop's
    std::unique_ptr<ValuePlan> plan = planner.plan(root, *perm);
    if (plan->delta - 1 >= 0) {
      refused.insert(planner.refusals().begin(), planner.refusals().end());
      continue;
    }
    if (root->pinned) {
      refused.insert(root->display_name() + ": excluded from optimization");
      continue;
    }
    if (plan->pushed && !prepare(*plan->pushed, as_nodes, opset)) continue;
    Rewrite record{"cancelled transposes", {}, {}};
    Applier apply(model, g, names, stats, record);
    apply.value(*plan, root->inputs[0], root);
    replaced.insert(apply.constants_replaced.begin(), apply.constants_replaced.end());
    stats.rewrites.push_back(std::move(record));
    changed = true;
  }
  for (Node* t : g.topological_order())
    if (is_transpose(*t)) changed = shorten_chain(g, t, stats) || changed;
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
      if (!sweep(model, *g, names, stats, refused)) break;
    }
    stats.refused.insert(stats.refused.end(), refused.begin(), refused.end());
  }
  return stats;
}

}  // namespace pyonnxopt::passes
