#include "passes/eliminate_dead_code.h"

#include <set>
#include <tuple>

namespace pyonnxopt::passes {
namespace {

using namespace ir;

using FunctionKey = std::tuple<std::string, std::string, std::string>;  // domain, name, overload

FunctionKey key_of(const Node& n) { return {n.domain.value, n.op_type.value, n.overload.value}; }
FunctionKey key_of(const Function& f) { return {f.domain.value, f.name.value, f.overload.value}; }

bool is_dead(const Node* n, const std::set<FunctionKey>& local_functions) {
  if (n->pinned) return false;
  if (!is_standard_domain(n->domain.value) && !local_functions.count(key_of(*n))) return false;
  for (const Value* out : n->outputs)
    if (out && (!out->uses.empty() || out->is_graph_output())) return false;
  return true;
}

// Removes dead nodes of `g`, last to first, so a chain goes in one sweep;
// a producer whose last reader went is looked at again.
void sweep(Graph& g, const std::set<FunctionKey>& local_functions, PassStats& stats) {
  std::vector<Node*> work;
  for (Node* n : g.nodes) work.push_back(n);
  while (!work.empty()) {
    Node* n = work.back();
    work.pop_back();
    if (n->removed || !is_dead(n, local_functions)) continue;
    std::vector<Node*> producers;
    for (const Value* v : n->inputs)
      if (v && v->producer && v->producer->graph == &g) producers.push_back(v->producer);
    stats.removed.push_back(n->display_name());
    stats.rewrites.push_back({"dead", {node_id(*n)}, {}});
    g.remove_node(n);
    ++stats.nodes_removed;
    work.insert(work.end(), producers.begin(), producers.end());
  }
}

// Functions called from the model's graphs, and from the functions they call.
std::set<FunctionKey> called_functions(const Model& m) {
  std::set<FunctionKey> called;
  std::vector<const Graph*> todo;  // graphs outside every function body
  for (Graph* g : m.all_graphs()) {
    const Graph* root = g;
    while (root->parent) root = root->parent;
    bool in_body = false;
    for (const auto& f : m.functions) in_body = in_body || f->body.get() == root;
    if (!in_body) todo.push_back(g);
  }
  auto scan = [&](const Graph* g, std::vector<FunctionKey>& found) {
    for (const Node* n : g->nodes)
      if (called.insert(key_of(*n)).second) found.push_back(key_of(*n));
  };
  std::vector<FunctionKey> found;
  for (const Graph* g : todo) scan(g, found);
  while (!found.empty()) {
    FunctionKey k = found.back();
    found.pop_back();
    for (const auto& f : m.functions)
      if (key_of(*f) == k) {
        std::vector<Graph*> inner;
        for (Graph* g : m.all_graphs())
          for (const Graph* p = g; p; p = p->parent)
            if (p == f->body.get()) inner.push_back(g);
        for (const Graph* g : inner) scan(g, found);
      }
  }
  return called;
}

}  // namespace

PassStats EliminateDeadCode::run(Model& model, const PassOptions&) const {
  PassStats stats;
  std::set<FunctionKey> local_functions;
  for (const auto& f : model.functions) local_functions.insert(key_of(*f));

  // Inner graphs first: what a removed subgraph node read may die outside.
  for (bool changed = true; changed;) {
    const int64_t before = stats.nodes_removed;
    auto graphs = model.all_graphs();
    for (auto it = graphs.rbegin(); it != graphs.rend(); ++it) sweep(**it, local_functions, stats);
    changed = stats.nodes_removed != before;
  }
  for (Graph* g : model.all_graphs()) {
    stats.initializers_removed += static_cast<int64_t>(g->remove_unused_initializers(stats.removed));
    stats.value_info_removed += static_cast<int64_t>(g->remove_stale_value_info());
  }
  const auto called = called_functions(model);
  auto& fns = model.functions;
  for (auto it = fns.begin(); it != fns.end();) {
    if (called.count(key_of(**it))) {
      ++it;
      continue;
    }
    stats.removed.push_back("function " + (*it)->domain.value + "::" + (*it)->name.value);
    model.dropped_functions.push_back(std::move(*it));  // Python handles may still point into it
    it = fns.erase(it);
    ++stats.functions_removed;
  }
  return stats;
}

}  // namespace pyonnxopt::passes
