#include "proto/link.h"

namespace pyonnxopt::proto {
namespace {

using namespace ir;

std::string graph_label(const Graph& g) {
  if (g.is_function_body) return "function '" + g.name.value + "'";
  return "graph '" + g.name.value + "'";
}

Value* define(Graph& g, std::string_view name, const char* what, const Node* node = nullptr) {
  if (Value* v = g.try_create_value(name)) return v;
  Value* old = g.find_local(name);
  std::string by = old->producer ? "node " + old->producer->display_name()
                   : old->initializer ? std::string("an initializer")
                                      : std::string("a graph input");
  std::string thing = node ? "output of node " + node->display_name() : std::string(what);
  throw ModelError(graph_label(g) + ": " + thing + " '" + std::string(name) + "' is already defined by " + by);
}

void add_sparse(SparseTensor& s, std::vector<Tensor*>& out) {
  if (s.values) out.push_back(s.values.get());
  if (s.indices) out.push_back(s.indices.get());
}

void add_attribute_tensors(std::vector<Attribute>& attrs, std::vector<Tensor*>& out) {
  for (auto& a : attrs) {
    if (a.t) out.push_back(a.t.get());
    for (auto& t : a.tensors) out.push_back(t.get());
    if (a.sparse_tensor) add_sparse(*a.sparse_tensor, out);
    for (auto& sp : a.sparse_tensors) add_sparse(*sp, out);
  }
}

// Links graphs one scope at a time, walking each graph's nodes as few times
// as it can (big graphs are bound by memory latency, not arithmetic), and
// gathers every tensor on the way for the checks that follow.
class Linker {
 public:
  explicit Linker(PendingNames& names) : names_(names) {}
  std::vector<Tensor*> tensors;

  void link(Graph& g, Graph* parent, Node* owner) {
    g.parent = parent;
    g.owner_node = owner;
    g.reserve_values(g.inputs.size() + g.initializers.size() + g.sparse_initializers.size() + g.nodes.size());
    define_inputs_and_initializers(g);

    // Pass 1: outputs (every value of the scope must exist before any input
    // or subgraph resolves a name), file positions, attribute tensors.
    std::vector<Node*> with_subgraphs;
    size_t position = 0;
    for (Node* n : g.nodes) {
      n->order_index = position++;
      auto& io = names_.of(n);
      n->outputs.assign(io.outputs.size(), nullptr);
      for (size_t i = 0; i < io.outputs.size(); ++i) {
        if (io.outputs[i].empty()) continue;
        Value* v = define(g, io.outputs[i], "output", n);
        v->producer = n;
        v->producer_index = static_cast<int>(i);
        n->outputs[i] = v;
      }
      if (!n->attributes.empty()) {
        add_attribute_tensors(n->attributes, tensors);
        if (n->has_subgraphs()) with_subgraphs.push_back(n);
      }
    }
    for (Node* n : with_subgraphs)
      for (Graph* sub : n->subgraphs()) link(*sub, &g, n);

    // Pass 2: inputs, noting whether every producer comes before its reader.
    bool sorted = true;
    auto comes_before = [&g](const Value* v, const Node* reader) {
      return !v->producer || v->producer->graph != &g || v->producer->order_index < reader->order_index;
    };
    for (Node* n : g.nodes) {
      auto& io = names_.of(n);
      n->inputs.assign(io.inputs.size(), nullptr);
      for (size_t i = 0; i < io.inputs.size(); ++i) {
        if (io.inputs[i].empty()) continue;
        Value* v = output_of_previous(n, io.inputs[i]);
        if (!v) v = g.lookup(io.inputs[i]);
        if (!v)
          throw ModelError(graph_label(g) + ": node " + n->display_name() + " reads '" + std::string(io.inputs[i]) +
                           "', which no node, graph input or initializer defines");
        n->inputs[i] = v;
        v->uses.push_back(Use{n, static_cast<int>(i)});
        sorted = sorted && comes_before(v, n);
      }
    }
    for (Node* n : with_subgraphs)
      for (Graph* sub : n->subgraphs())
        for (const Value* v : sub->outer_references()) sorted = sorted && comes_before(v, n);
    if (!sorted) g.topological_order();  // names a node on a cycle; an unsorted DAG is fine

    link_outputs_and_value_info(g);
  }

 private:
  // Most inputs read the node just before: check it before hashing.
  static Value* output_of_previous(const Node* n, std::string_view name) {
    if (!n->prev) return nullptr;
    for (Value* out : n->prev->outputs)
      if (out && out->name == name) return out;
    return nullptr;
  }

  void define_inputs_and_initializers(Graph& g) {
    for (auto& in : g.inputs) {
      if (!in.name.has || in.name.value.empty()) throw ModelError(graph_label(g) + " has an input without a name");
      Value* v = define(g, in.name.value, "input");
      v->is_graph_input = true;
      v->info = &in;
      in.value = v;
    }
    for (size_t i = 0; i < g.initializers.size(); ++i) {
      Tensor* t = g.initializers[i].get();
      tensors.push_back(t);
      if (t->name.value.empty()) throw ModelError(graph_label(g) + ": initializer #" + std::to_string(i) + " has no name");
      Value* v = g.find_local(t->name.value);
      // An initializer may also be listed as a graph input (IR < 4 style, or overridable).
      if (!v || !v->is_graph_input || v->initializer) v = define(g, t->name.value, "initializer");
      v->initializer = t;
    }
    for (size_t i = 0; i < g.sparse_initializers.size(); ++i) {
      SparseTensor& s = g.sparse_initializers[i];
      add_sparse(s, tensors);
      if (!s.values || s.values->name.value.empty())
        throw ModelError(graph_label(g) + ": sparse initializer #" + std::to_string(i) + " has no name");
      Value* v = define(g, s.values->name.value, "sparse initializer");
      v->sparse_initializer = &s;
    }
  }

  void link_outputs_and_value_info(Graph& g) {
    for (auto& out : g.outputs) {
      Value* v = g.lookup(out.name.value);
      if (!v)
        throw ModelError(graph_label(g) + ": output '" + out.name.value +
                         "' is not produced by any node, graph input or initializer");
      out.value = v;
      ++v->graph_output_refs;
      if (!v->info && !g.is_function_body) v->info = &out;
    }
    for (auto& vi : g.value_info) {
      Value* v = g.find_local(vi.name.value);
      if (!v) continue;  // stale value_info is kept as it is
      vi.value = v;
      if (!v->info) v->info = &vi;
    }
  }

  PendingNames& names_;
};

bool checked_numel(const std::vector<int64_t>& dims, uint64_t& out) {
  uint64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) return false;
    if (d != 0 && n > UINT64_MAX / static_cast<uint64_t>(d)) return false;
    n *= static_cast<uint64_t>(d);
  }
  out = n;
  return true;
}

void check_tensor(const Tensor& t) {
  auto fail = [&](const std::string& what) { throw ModelError("tensor '" + t.name.value + "': " + what); };
  uint64_t numel = 0;
  for (int64_t d : t.dims)
    if (d < 0) fail("negative dimension " + std::to_string(d));
  if (!checked_numel(t.dims, numel) || numel > (uint64_t(1) << 62)) fail("dimensions multiply past 2^62 elements");
  if (t.segment.has) return;  // a chunk of a larger tensor
  const int32_t dtype = t.data_type.value;
  if (storage_bytes(dtype, numel) == kBytesOverflow) fail("dimensions need more than 2^63 bytes");
  if (t.is_external()) return;  // checked against the file by resolve_external_data
  if (t.has_raw_data) {
    int64_t want = storage_bytes(dtype, numel);
    if (want >= 0 && static_cast<uint64_t>(want) != t.raw_data.length)
      fail("raw_data has " + std::to_string(t.raw_data.length) + " bytes, but " + dtype_name(dtype) + " dims need " +
           std::to_string(want));
    return;
  }
  auto count_check = [&](uint64_t have, uint64_t per, const char* field) {
    if (have && have != numel * per)
      fail(std::string(field) + " has " + std::to_string(have) + " elements, but the dims need " + std::to_string(numel * per));
  };
  switch (dtype) {
    case 1: count_check(t.float_data.size() / 4, 1, "float_data"); break;
    case 14: count_check(t.float_data.size() / 4, 2, "float_data"); break;
    case 11: count_check(t.double_data.size() / 8, 1, "double_data"); break;
    case 15: count_check(t.double_data.size() / 8, 2, "double_data"); break;
    case 7: count_check(t.int64_data.size(), 1, "int64_data"); break;
    case 12: case 13: count_check(t.uint64_data.size(), 1, "uint64_data"); break;
    case 2: case 3: case 4: case 5: case 6: case 9: case 10: case 16:
      count_check(t.int32_data.size(), 1, "int32_data");
      break;
    case 8: count_check(t.string_data.size(), 1, "string_data"); break;
    default: break;
  }
}

}  // namespace

std::vector<Tensor*> link_model(Model& model, PendingNames& names) {
  Linker linker(names);
  if (model.graph) linker.link(*model.graph, nullptr, nullptr);
  for (auto& f : model.functions) {
    linker.link(*f->body, nullptr, nullptr);
    add_attribute_tensors(f->attribute_proto, linker.tensors);
    // Graph-valued attribute defaults are standalone graphs.
    for (auto& a : f->attribute_proto) {
      if (a.g) linker.link(*a.g, nullptr, nullptr);
      for (auto& g : a.graphs) linker.link(*g, nullptr, nullptr);
    }
  }
  // Training graphs may read the inference graph's initializers.
  for (auto& t : model.training_info) {
    if (t.initialization) linker.link(*t.initialization, model.graph.get(), nullptr);
    if (t.algorithm) linker.link(*t.algorithm, model.graph.get(), nullptr);
  }
  return std::move(linker.tensors);
}

void check_tensors(const std::vector<Tensor*>& tensors) {
  for (const Tensor* t : tensors) check_tensor(*t);
}

}  // namespace pyonnxopt::proto
