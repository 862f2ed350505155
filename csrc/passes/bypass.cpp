#include "passes/bypass.h"

namespace pyonnxopt::passes {

using namespace ir;

namespace {

// A reader in a subgraph that defines `name` itself would, once written out
// by name, read its own value instead of ours.
bool shadowed_for_a_reader(const Graph& g, const Value* readers_of, const std::string& name) {
  for (const Use& u : readers_of->uses)
    for (const Graph* s = u.node->graph; s && s != &g; s = s->parent)
      if (s->find_local(name)) return true;
  return false;
}

int own_output_refs(const Graph& g, const Value* v) {
  int n = 0;
  for (const auto& o : g.outputs) n += o.value == v;
  return n;
}

}  // namespace

const char* why_not_reroute(const Graph& g, const Value* in, const Value* out) {
  return why_not_reroute(g, in, out, in ? in->uses.size() : 0);
}

const char* why_not_reroute(const Graph& g, const Value* in, const Value* out, size_t in_readers) {
  if (!in) return "no input";
  if (!out) return "no output";
  if (in->graph != &g && out->is_graph_output()) return "output is a graph output and the input is from an enclosing graph";
  if (out->graph_output_refs != own_output_refs(g, out)) return "output is an output of a subgraph";
  if (shadowed_for_a_reader(g, out, in->name)) return "a reading subgraph defines the input's name itself";
  if (!out->is_graph_output()) return nullptr;
  // The graph output keeps its name: the input's producer writes it directly.
  if (!in->producer || in->producer->graph != &g) return "output is a graph output and the input is a graph input, initializer or outer value";
  if (in->is_graph_output()) return "output and input are both graph outputs";
  // Its other readers then read it under the output's name, which a
  // subgraph of theirs must not define itself.
  if (in_readers != 1 && shadowed_for_a_reader(g, in, out->name))
    return "output is a graph output and a subgraph reading the input defines the output's name itself";
  return nullptr;
}

const char* bypass(Graph& g, Node* node, Value* in, Value* out) {
  if (node->pinned) return "excluded from optimization";
  if (const char* why = why_not_reroute(g, in, out)) return why;
  if (!out->is_graph_output()) {
    g.replace_all_uses(out, in);
    g.remove_node(node);
    return nullptr;
  }
  const std::string name = out->name;
  g.replace_all_uses(out, in);
  g.remove_node(node);
  g.rename_value(in, name);
  return nullptr;
}

const char* const kNotMine = "not this pass's kind of node";

PassStats bypass_where(Model& model, const Judge& judge) {
  PassStats stats;
  for (Graph* g : model.all_graphs()) {
    std::vector<Node*> candidates;  // bypassing edits the node list: decide first
    for (Node* n : g->nodes)
      if (is_standard_domain(n->domain.value) && !n->inputs.empty() && !n->outputs.empty())
        candidates.push_back(n);
    for (Node* n : candidates) {
      const char* why = judge(model, *g, *n);
      if (why == kNotMine) continue;
      const std::string label = n->display_name(), id = node_id(*n);
      if (!why) why = bypass(*g, n, n->inputs[0], n->outputs[0]);
      if (why) {
        stats.refused.push_back(label + ": " + why);
        continue;
      }
      stats.removed.push_back(label);
      stats.rewrites.push_back({"bypassed", {id}, {}});
      ++stats.nodes_removed;
    }
  }
  return stats;
}

}  // namespace pyonnxopt::passes
