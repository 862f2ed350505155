#include "passes/eliminate_common_subexpressions.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>
#include <unordered_map>

#include "proto/writer.h"

namespace pyonnxopt::passes {
namespace {

using namespace ir;

bool is_random(const std::string& op) {
  return op.rfind("Random", 0) == 0 || op == "Multinomial" || op == "Bernoulli" || op == "Dropout";
}

// Everything a node's result depends on, as bytes.
std::string key_of(const Node& n) {
  std::string k = n.op_type.value + '\0' + n.domain.value + '\0' + n.overload.value + '\0';
  for (const Value* v : n.inputs) k.append(reinterpret_cast<const char*>(&v), sizeof v);
  k += '\0' + std::to_string(n.outputs.size()) + '\0';
  std::vector<const Attribute*> attrs;
  for (const auto& a : n.attributes) attrs.push_back(&a);
  std::sort(attrs.begin(), attrs.end(), [](auto* a, auto* b) { return a->name.value < b->name.value; });
  for (const Attribute* a : attrs) k += proto::serialize_attribute(*a);
  return k;
}

bool read_where_name_is_shadowed(const Graph& g, const Value* v, const std::string& name) {
  for (const Use& u : v->uses)
    for (const Graph* s = u.node->graph; s && s != &g; s = s->parent)
      if (s->find_local(name)) return true;
  return false;
}

const char* merge_node(Graph& g, Node* copy, Node* kept) {
  for (size_t i = 0; i < copy->outputs.size(); ++i) {
    Value* a = copy->outputs[i];
    Value* b = kept->outputs[i];
    if (!a) continue;
    if (!b) return "it produces an optional output the first one does not";
    if (a->is_graph_output()) return "its output is a graph output";
    if (read_where_name_is_shadowed(g, a, b->name)) return "a reading subgraph defines the kept value's name";
  }
  for (size_t i = 0; i < copy->outputs.size(); ++i)
    if (copy->outputs[i]) g.replace_all_uses(copy->outputs[i], kept->outputs[i]);
  g.remove_node(copy);
  return nullptr;
}

void merge_nodes(Graph& g, PassStats& stats) {
  std::unordered_map<std::string, Node*> seen;
  for (Node* n : g.topological_order()) {
    if (!is_standard_domain(n->domain.value) || is_random(n->op_type.value) || n->has_subgraphs()) continue;
    auto [it, fresh] = seen.emplace(key_of(*n), n);
    if (fresh) continue;
    const std::string label = n->display_name();
    if (n->pinned) {
      stats.refused.push_back(label + ": excluded from optimization");
      continue;
    }
    if (const char* why = merge_node(g, n, it->second)) {
      stats.refused.push_back(label + ": " + why);
      continue;
    }
    stats.removed.push_back(label + " (same as " + it->second->display_name() + ")");
    stats.rewrites.push_back({"merged", {node_id(*n)}, {node_id(*it->second)}});
    ++stats.nodes_removed;
  }
}

// The tensor as bytes without its name, for data held in typed fields
// (float_data, int64_data, ...), which are small by nature.
std::string typed_data(const Tensor& t) {
  Tensor copy = t;
  copy.name.clear();
  copy.doc_string.clear();
  return proto::serialize_tensor(copy);
}

bool same_data(const Tensor& a, const Tensor& b) {
  if (a.data_type.value != b.data_type.value || a.dims != b.dims || a.segment.has || b.segment.has) return false;
  const Blob* x = a.raw_payload();
  const Blob* y = b.raw_payload();
  if (!x || !y) return !x && !y && typed_data(a) == typed_data(b);
  return x->length == y->length && (x->length == 0 || std::memcmp(x->data(), y->data(), x->length) == 0);
}

// What tells tensors of one type, dims and size apart cheaply: their first
// and last bytes (all of a small one), or the typed fields (small by nature).
// Thousands of same-shaped constants would otherwise be compared pairwise,
// and a large weight is never read whole for it.
std::string sample_of(const Tensor& t) {
  constexpr uint64_t kEdge = 64;
  const Blob* b = t.raw_payload();
  if (!b) return typed_data(t);
  const char* data = reinterpret_cast<const char*>(b->data());
  if (!data) return std::string();
  if (b->length <= 2 * kEdge) return std::string(data, b->length);
  return std::string(data, kEdge) + std::string(data + b->length - kEdge, kEdge);
}

void merge_initializers(Graph& g, PassStats& stats) {
  // Candidates share data type, dims, size and sample; only those are compared byte for byte.
  std::map<std::tuple<int32_t, std::vector<int64_t>, uint64_t, std::string>, std::vector<Value*>> groups;
  std::map<std::string, std::string> merged;  // copy -> the initializer it now reads
  for (const auto& t : g.initializers) {
    Value* v = g.find_local(t->name.value);
    if (!v || v->initializer != t.get() || v->is_graph_input || v->is_graph_output()) continue;
    if (t->segment.has) continue;  // external data is never merged (same_data)
    const Blob* payload = t->raw_payload();
    groups[{t->data_type.value, t->dims, payload ? payload->length : UINT64_MAX, sample_of(*t)}].push_back(v);
  }
  for (auto& [signature, values] : groups) {
    for (size_t i = 0; i < values.size(); ++i) {
      Value* kept = values[i];
      if (!kept) continue;
      for (size_t j = i + 1; j < values.size(); ++j) {
        Value* copy = values[j];
        if (!copy || !same_data(*kept->initializer, *copy->initializer)) continue;
        if (read_where_name_is_shadowed(g, copy, kept->name)) {
          stats.refused.push_back("initializer '" + copy->name + "': a reading subgraph defines '" + kept->name + "'");
          continue;
        }
        merged[copy->name] = kept->name;
        g.replace_all_uses(copy, kept);
        values[j] = nullptr;
      }
    }
  }
  // Only a merge makes this pass drop initializers (unread ones are dead
  // code's to report); any already unread go along, named as such.
  if (merged.empty()) return;
  std::vector<std::string> removed;
  stats.initializers_removed += static_cast<int64_t>(g.remove_unused_initializers(removed));
  for (const auto& name : removed) {
    auto it = merged.find(name);
    stats.removed.push_back(it != merged.end() ? name + " (same as " + it->second + ")" : name + " (unread)");
  }
}

}  // namespace

PassStats EliminateCommonSubexpressions::run(Model& model, const PassOptions&) const {
  PassStats stats;
  for (Graph* g : model.all_graphs()) {
    merge_initializers(*g, stats);
    merge_nodes(*g, stats);
  }
  return stats;
}

}  // namespace pyonnxopt::passes
