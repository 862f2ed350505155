#include "passes/transpose_region.h"

#include <algorithm>
#include <set>
#include <unordered_set>

#include "passes/bypass.h"
#include "passes/known_values.h"

namespace pyonnxopt::passes {

using namespace ir;

Region Planner::grow(Node* root, const Perm& perm) {
  refusals_.clear();
  Region region{root, perm, {}};
  std::unordered_map<const Value*, Perm> values{{root->outputs[0], perm}};
  std::unordered_set<const Node*> taken{root};
  std::set<std::pair<size_t, Node*>> frontier;
  auto readers_of = [&](const Value* v) {
    for (const Use& u : v->uses)
      if (auto it = position_.find(u.node); it != position_.end() && !taken.count(u.node))
        frontier.emplace(it->second, u.node);
  };
  readers_of(root->outputs[0]);
  size_t tries = 0;
  while (!frontier.empty() && region.moved.size() < kMaxRegion && tries++ < 4 * kMaxRegion) {
    auto [position, n] = *frontier.begin();
    frontier.erase(frontier.begin());
    if (taken.count(n) || is_transpose(*n)) continue;
    const Perm* q = nullptr;
    for (const Value* v : n->inputs)
      if (auto it = v ? values.find(v) : values.end(); it != values.end() && !q) q = &it->second;
    if (!q) continue;
    const Perm perm_here = *q;
    auto joinable = [&](const Value& v) {  // a Transpose<perm_here> outside the region, read through
      const Node* p = v.producer;
      if (!p || p->graph != &graph_ || !is_transpose(*p) || p->pinned || taken.count(p)) return false;
      if (values.count(p->inputs[0])) return false;  // it reads the region: it is a reader
      std::optional<Perm> pp = transpose_perm(*p, static_cast<int64_t>(perm_here.size()));
      return pp && *pp == perm_here;
    };
    PushQuery query{model_, graph_, *n, perm_here, [&](const Value& v) {
                      auto it = values.find(&v);
                      return it != values.end() ? it->second == perm_here : joinable(v);
                    },
                     regroup_};
    Moved m{n, perm_here, Push{}, position};
    const char* why = plan_push(query, m.push);
    if (why == kNoRule) continue;
    if (!why && n->pinned) why = "excluded from optimization";
    if (why) {
      refusals_.push_back(n->display_name() + ": " + why);
      continue;
    }
    taken.insert(n);
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      const Value* v = n->inputs[i];
      if (m.push.inputs[i].kind != PushedInput::kPermuted || values.count(v)) continue;
      taken.insert(v->producer);  // a Transpose read through joins
      values.emplace(v, perm_here);
      readers_of(v);
    }
    for (size_t i = 0; i < n->outputs.size(); ++i) {
      if (!n->outputs[i] || m.push.outputs[i].empty()) continue;
      values.emplace(n->outputs[i], m.push.outputs[i]);
      readers_of(n->outputs[i]);
    }
    region.moved.push_back(std::move(m));
  }
  std::sort(region.moved.begin(), region.moved.end(),
            [](const Moved& a, const Moved& b) { return a.position < b.position; });
  prune(region);
  return region;
}

// The Transpose a region adds for `v` (perm `perm`, v's dims as they are)
// moves only axes of size 1: optimize_transposes makes it a Reshape, the
// data keeps its order, so it costs no Transpose. Mirrors
// reshape_unit_moves: at most one unknown dim may move.
bool Planner::unit_moves_only(const Perm& perm, const Value* v) const {
  std::optional<std::vector<int64_t>> dims = known_shape(v);
  if (!dims || dims->size() != perm.size() || default_opset(model_, graph_) < 5) return false;
  std::vector<int64_t> untransposed(dims->size());  // the Transpose's input: v = Transpose(it, perm)
  for (size_t i = 0; i < perm.size(); ++i) untransposed[static_cast<size_t>(perm[i])] = (*dims)[i];
  return keeps_data_order(untransposed, perm);
}

// `n` reads `perm`-transposed data as input `index` of an opset-23
// Attention on 4-d heads, [0, 2, 1, 3] being the head split's: the
// Transpose there costs nothing, since fuse_attention_heads then gives the
// op the 3-d tensor and lets it split the heads. So a Transpose moves below
// LLaMA's rotary embedding, which sits between the split and the Attention.
// A cache's Concat(past, new keys) along the sequence, read by Attentions as
// their keys or values only, takes it along too (the rule gives the op the
// past as past_key). Not where that rule cannot take q, k and v: past inputs,
// other Concats along the sequence, or heads made by a Reshape or an Expand
// (keys and values repeated for grouped heads) or fed in; the move would
// gain nothing. (GPT-NeoX's partial rotary ends in a Concat along the head
// size: that one moves.)
bool Planner::split_for_attention(const Node& n, int index, const Perm& perm) const {
  static const Perm kSplit{0, 2, 1, 3};
  if (is_cache_concat(n)) {
    if (index != 1 || perm != kSplit || n.outputs[0]->uses.empty()) return false;
    for (const Use& u : n.outputs[0]->uses)
      if (u.index < 1 || u.index > 2 || !split_for_attention(*u.node, u.index, perm)) return false;
    return true;
  }
  if (n.op_type.value != "Attention" || !is_standard_domain(n.domain.value) || index > 2 || perm != kSplit ||
      n.attribute("q_num_heads") || n.graph != &graph_ || default_opset(model_, graph_) < 23 || n.inputs.size() > 4)
    return false;
  for (int i = 0; i < 3; ++i) {
    const Node* p = i < static_cast<int>(n.inputs.size()) && n.inputs[i] ? n.inputs[i]->producer : nullptr;
    if (!p) return false;
    const std::string& op = p->op_type.value;
    const Attribute* axis = op == "Concat" ? p->attribute("axis") : nullptr;
    const bool cache = i > 0 && is_cache_concat(*p);
    if ((op == "Concat" && !cache && (!axis || (axis->i.value != 3 && axis->i.value != -1))) || op == "Reshape" ||
        op == "Expand" || op == "Tile")
      return false;
  }
  return true;
}

// Concat(past, new) of two 4-d inputs along axis 2, the sequence of [B, H, T, D] heads.
bool Planner::is_cache_concat(const Node& n) const {
  if (n.op_type.value != "Concat" || !is_standard_domain(n.domain.value) || n.inputs.size() != 2 ||
      n.graph != &graph_ || !n.inputs[0] || !n.inputs[1])
    return false;
  const Attribute* axis = n.attribute("axis");
  const std::optional<std::vector<int64_t>> dims = known_shape(n.outputs[0]);
  return axis && dims && dims->size() == 4 && (axis->i.value == 2 || axis->i.value == -2);
}

bool reshape_like(const Node* n) {
  if (!n || !is_standard_domain(n->domain.value) || n->outputs.size() != 1) return false;
  const std::string& op = n->op_type.value;
  return op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze";
}

namespace {

// Whether something reads `v` and every reader only reshapes it.
bool only_reshapes_read(const Value* v) {
  if (v->is_graph_output() || v->uses.empty()) return false;
  return std::all_of(v->uses.begin(), v->uses.end(), [](const Use& u) { return reshape_like(u.node); });
}

}  // namespace

// What a Transpose weighs in a plan's count (transpose_region.h): one that
// moves only size-1 axes becomes a Reshape, and one of those beside a node
// that only reshapes (`beside_reshape`) then merges into it
// (collapse_reshapes): it costs nothing. Each Transpose weighs what its own
// place says, whether the plan adds it or removes it, so a plan and its
// reverse cannot both pay (a weight of 0 when added but 1 when removed let
// torch's batch-1 [S, 1, E] Transpose before a residual Add go down the
// stream as two and back up as one, sweep after sweep).
int Planner::weight(const Perm& perm, const Value* v, bool beside_reshape) const {
  if (!unit_moves_only(perm, v)) return kWeight;
  return beside_reshape ? 0 : kUnitWeight;
}

Roles Planner::roles(const Region& region) {
  Roles r;
  std::unordered_map<const Node*, const Moved*> moved;
  for (const Moved& m : region.moved) moved.emplace(m.node, &m);
  r.perm_of.emplace(region.root->outputs[0], region.root_perm);
  r.sources.push_back(region.root);
  for (const Moved& m : region.moved)
    for (size_t i = 0; i < m.node->outputs.size(); ++i)
      if (m.node->outputs[i] && !m.push.outputs[i].empty()) r.perm_of.emplace(m.node->outputs[i], m.push.outputs[i]);
  for (const Moved& m : region.moved)
    for (size_t i = 0; i < m.node->inputs.size(); ++i) {
      Value* v = m.node->inputs[i];
      if (m.push.inputs[i].kind == PushedInput::kPermuted && r.perm_of.emplace(v, m.perm).second)
        r.sources.push_back(v->producer);
    }
  for (const auto& [v, perm] : r.perm_of) {
    const bool made_here = std::find(r.sources.begin(), r.sources.end(), v->producer) == r.sources.end();
    const Value* existing = made_here ? nullptr : v->producer->inputs[0];
    bool outside = v->is_graph_output();
    bool for_attention = false;  // read by an Attention that takes the Transpose along (split_for_attention)
    bool outside_only_reshapes = true;  // every reader outside the region (the added Transpose's) only reshapes
    for (const Use& u : v->uses) {
      Node* n = u.node;
      if (auto it = moved.find(n); it != moved.end()) {
        if (it->second->push.inputs[static_cast<size_t>(u.index)].kind == PushedInput::kPermuted) continue;
        outside = true;  // it reads this value as it is (a parameter)
        outside_only_reshapes = outside_only_reshapes && reshape_like(n);
        continue;
      }
      const bool source = std::find(r.sources.begin(), r.sources.end(), n) != r.sources.end();
      std::optional<Perm> p;
      if (n->graph == &graph_ && is_transpose(*n) && !n->pinned && !source) p = transpose_perm(*n, static_cast<int64_t>(perm.size()));
      if (p && !is_identity(compose(perm, *p))) r.composed.emplace_back(n, v);
      else if (p && cancels(n, v, existing)) r.cancelled.emplace_back(n, v);
      else if (split_for_attention(*n, u.index, perm)) for_attention = true;
      else {
        outside = true;
        outside_only_reshapes = outside_only_reshapes && reshape_like(n);
      }
    }
    if (outside && made_here)  // its Transpose is added, between v's maker and the readers outside
      r.delta += weight(perm, v, reshape_like(v->producer) || (outside_only_reshapes && !v->is_graph_output()));
    if (!outside && !for_attention && !made_here)  // its Transpose goes
      r.delta -= weight(perm, v, reshape_like(v->producer->inputs[0]->producer) || only_reshapes_read(v));
  }
  for (const auto& [t, v] : r.cancelled)
    r.delta -= weight(r.perm_of.at(v), v, reshape_like(v->producer) || only_reshapes_read(t->outputs[0]));
  return r;
}

// A Transpose reading region value `v` whose composed perm is the
// identity goes: a bypass to v's twin, which is `existing` (the input of
// the Transpose v comes from) or a new value a moved node makes (read by
// v's own Transpose alone when the bypass happens). Records why not.
bool Planner::cancels(const Node* t, const Value* v, const Value* existing) {
  const Value* out = t->outputs[0];
  const char* why = nullptr;
  if (out->is_graph_output() && (v->uses.size() != 1 || v->is_graph_output()))
    why = "it would cancel into a graph output whose name a value with other readers would have to take";
  else if (existing)
    why = why_not_reroute(graph_, existing, out, existing->uses.size());
  else
    why = why_not_reroute(graph_, v, out, 1);  // v stands in: same graph, made by a node
  if (why) refusals_.push_back(t->display_name() + ": " + why);
  return !why;
}

// Drops moved nodes at the lower edge (no moved node reads their outputs)
// while that does not raise the count: the smallest region that gains most.
void Planner::prune(Region& region) {
  int best = roles(region).delta;
  for (bool again = true; again;) {
    again = false;
    for (size_t k = region.moved.size(); k-- > 0;) {
      const Node* n = region.moved[k].node;
      bool read = false;
      for (const Moved& m : region.moved)
        for (const Value* v : m.node->inputs)
          read = read || (v && v->producer == n);
      if (read) continue;
      Moved m = std::move(region.moved[k]);
      region.moved.erase(region.moved.begin() + static_cast<std::ptrdiff_t>(k));
      const int delta = roles(region).delta;
      if (delta <= best) {
        best = delta;
        again = true;
      } else {
        region.moved.insert(region.moved.begin() + static_cast<std::ptrdiff_t>(k), std::move(m));
      }
    }
  }
}

}  // namespace pyonnxopt::passes
