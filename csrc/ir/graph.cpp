// Use-def bookkeeping, topological order and the invariant checker.
#include <algorithm>
#include <functional>
#include <queue>
#include <unordered_set>

#include "ir/model.h"

namespace pyonnxopt::ir {

void FixedData::append(const Blob& bytes) {
  if (!uses_owned && view.length == 0 && !view.buffer) {
    view = bytes;
    return;
  }
  if (!uses_owned) {
    owned.assign(reinterpret_cast<const char*>(view.data()), view.length);
    view = Blob{};
    uses_owned = true;
  }
  owned.append(reinterpret_cast<const char*>(bytes.data()), bytes.length);
}

void Tensor::set_raw(Blob bytes) {
  float_data = FixedData{};
  double_data = FixedData{};
  int32_data.clear();
  int64_data.clear();
  uint64_data.clear();
  string_data.clear();
  external_data.clear();
  data_location.clear();
  external_bytes = Blob{};
  segment.clear();
  raw_data = std::move(bytes);
  has_raw_data = true;
}

std::string Tensor::external_key(const char* key) const {
  for (const auto& e : external_data)
    if (e.key.value == key) return e.value.value;
  return {};
}

std::string Node::display_name() const {
  const std::string op = (domain.value.empty() ? "" : domain.value + "::") + op_type.value;
  if (name.value.empty())  // unnamed: the value it writes says which node
    for (const Value* v : outputs)
      if (v) return op + " writing '" + v->name + "'";
  return "'" + name.value + "' (" + op + ")";
}

const Attribute* Node::attribute(std::string_view attr_name) const {
  for (const auto& a : attributes)
    if (a.name.value == attr_name) return &a;
  return nullptr;
}

std::vector<Graph*> Node::subgraphs() const {
  std::vector<Graph*> out;
  for (const auto& a : attributes) {
    if (a.g) out.push_back(a.g.get());
    for (const auto& g : a.graphs) out.push_back(g.get());
  }
  return out;
}

uint64_t NameIndex::hash_of(std::string_view s) {
  uint64_t h = std::hash<std::string_view>()(s);
  return h ? h : 1;  // 0 marks an empty slot
}

size_t NameIndex::probe(std::string_view name, uint64_t hash) const {
  const size_t mask = slots_.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (!s.value || (s.hash == hash && s.value->name == name)) return i;
  }
}

Value* NameIndex::find(std::string_view name) const {
  if (slots_.empty()) return nullptr;
  return slots_[probe(name, hash_of(name))].value;
}

void NameIndex::reserve(size_t n) {
  size_t want = 16;
  while (want < 2 * n + 2) want <<= 1;
  if (want <= slots_.size()) return;
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(want, Slot{});
  for (const Slot& s : old)
    if (s.value) slots_[probe(s.value->name, s.hash)] = s;
}

bool NameIndex::insert(Value* v) {
  if (2 * (size_ + 1) > slots_.size()) reserve(size_ + 1 > 8 ? 2 * (size_ + 1) : 8);
  uint64_t h = hash_of(v->name);
  size_t i = probe(v->name, h);
  if (slots_[i].value) return false;
  slots_[i] = Slot{h, v};
  ++size_;
  return true;
}

void NameIndex::erase(std::string_view name) {
  if (slots_.empty()) return;
  const size_t mask = slots_.size() - 1;
  size_t i = probe(name, hash_of(name));
  if (!slots_[i].value) return;
  // Backward-shift deletion keeps every probe chain unbroken without tombstones.
  for (size_t j = (i + 1) & mask; slots_[j].value; j = (j + 1) & mask) {
    size_t home = slots_[j].hash & mask;
    bool movable = i <= j ? (home <= i || home > j) : (home <= i && home > j);
    if (movable) {
      slots_[i] = slots_[j];
      i = j;
    }
  }
  slots_[i] = Slot{};
  --size_;
}

Value* Graph::find_local(std::string_view n) const { return by_name_.find(n); }

Value* Graph::lookup(std::string_view n) const {
  for (const Graph* g = this; g; g = g->parent)
    if (Value* v = g->find_local(n)) return v;
  return nullptr;
}

Value* Graph::try_create_value(std::string_view n) {
  bool inserted = false;
  Value* v = by_name_.find_or_insert(n, inserted, [&] {
    Value* fresh = &value_pool_.emplace_back();
    fresh->name = std::string(n);
    fresh->graph = this;
    return fresh;
  });
  if (!inserted) return nullptr;
  v->slot = values_.size();
  values_.push_back(v);
  return v;
}

Value* Graph::create_value(std::string n) {
  Value* v = try_create_value(n);
  if (!v) throw ModelError("value '" + n + "' is defined twice in graph '" + name.value + "'");
  return v;
}

void Graph::rename_value(Value* v, std::string new_name) {
  if (v->name == new_name) return;
  if (by_name_.find(new_name)) throw ModelError("cannot rename '" + v->name + "': '" + new_name + "' exists");
  // A reader in a subgraph that defines the new name itself would, once
  // written out, read its own value instead.
  for (const Use& u : v->uses)
    for (const Graph* s = u.node->graph; s && s != this; s = s->parent)
      if (s->find_local(new_name))
        throw ModelError("cannot rename '" + v->name + "' to '" + new_name + "': subgraph '" + s->name.value +
                         "', which reads it, defines that name");
  by_name_.erase(v->name);
  v->name = std::move(new_name);
  by_name_.insert(v);
  if (v->initializer) v->initializer->name.set(v->name);
  if (v->info) v->info->name.set(v->name);
}

void NodeList::insert(Node* n, Node* before) {
  n->next = before;
  n->prev = before ? before->prev : tail_;
  if (n->prev) n->prev->next = n;
  else head_ = n;
  if (before) before->prev = n;
  else tail_ = n;
  ++size_;
}

void NodeList::erase(Node* n) {
  if (n->prev) n->prev->next = n->next;
  else head_ = n->next;
  if (n->next) n->next->prev = n->prev;
  else tail_ = n->prev;
  n->prev = n->next = nullptr;
  --size_;
}

Node* Graph::new_node() {
  Node* n = &node_pool_.emplace_back();
  n->graph = this;
  return n;
}

Node* Graph::add_node(Node* raw, Node* before) {
  if (raw->graph != this) throw ModelError("node " + raw->display_name() + " belongs to another graph");
  for (size_t i = 0; i < raw->outputs.size(); ++i) {
    Value* out = raw->outputs[i];
    if (!out) continue;
    if (out->graph != this || out->producer || out->is_graph_input || out->initializer)
      throw ModelError("output '" + out->name + "' of new node " + raw->display_name() + " is already defined");
    out->producer = raw;
    out->producer_index = static_cast<int>(i);
  }
  for (size_t i = 0; i < raw->inputs.size(); ++i)
    if (raw->inputs[i]) raw->inputs[i]->uses.push_back(Use{raw, static_cast<int>(i)});
  nodes.insert(raw, before);
  return raw;
}

static void for_each_graph_below(Graph* g, const std::function<void(Graph*)>& fn);
static bool defined_within(const Value* v, const Graph* root);

static void drop_use(Value* v, Node* node, int index) {
  auto& u = v->uses;
  auto it = std::find(u.begin(), u.end(), Use{node, index});
  if (it != u.end()) u.erase(it);
}

void Graph::set_input(Node* node, int index, Value* v) {
  if (index < 0 || index >= static_cast<int>(node->inputs.size())) throw std::out_of_range("input index");
  if (Value* old = node->inputs[index]) drop_use(old, node, index);
  node->inputs[index] = v;
  if (v) v->uses.push_back(Use{node, index});
}

void Graph::remove_node(Node* node) {
  if (node->graph != this || node->removed) throw ModelError("node " + node->display_name() + " is not in this graph");
  for (Value* out : node->outputs) {
    if (out && (!out->uses.empty() || out->is_graph_output()))
      throw ModelError("cannot remove node " + node->display_name() + ": its output '" + out->name + "' is still read");
  }
  for (size_t i = 0; i < node->inputs.size(); ++i)
    if (node->inputs[i]) drop_use(node->inputs[i], node, static_cast<int>(i));
  // Nodes inside its subgraphs read values of this scope (or further out):
  // those reads go with it.
  for (Graph* sub : node->subgraphs()) {
    for_each_graph_below(sub, [&](Graph* g) {
      for (Node* inner : g->nodes)
        for (size_t i = 0; i < inner->inputs.size(); ++i) {
          Value* v = inner->inputs[i];
          if (v && !defined_within(v, sub)) drop_use(v, inner, static_cast<int>(i));
        }
      for (auto& out : g->outputs)
        if (out.value && !defined_within(out.value, sub)) --out.value->graph_output_refs;
    });
  }
  for (Value* out : node->outputs) {
    if (!out) continue;
    out->producer = nullptr;
    drop_value(out);
  }
  node->removed = true;
  nodes.erase(node);
}

void Graph::remove_output(size_t index) {
  if (index >= outputs.size()) throw std::out_of_range("output index");
  Value* gone = outputs[index].value;
  if (gone) --gone->graph_output_refs;
  // Entries after `index` move down one: values whose info lives there follow.
  ValueInfo* first = outputs.data();
  std::vector<std::pair<Value*, size_t>> relink;
  for (Value* v : values_) {
    if (v->info >= first && v->info < first + outputs.size()) {
      relink.emplace_back(v, static_cast<size_t>(v->info - first));
      v->info = nullptr;
    }
  }
  outputs.erase(outputs.begin() + static_cast<std::ptrdiff_t>(index));
  for (auto& [v, i] : relink)
    if (i != index) v->info = &outputs[i > index ? i - 1 : i];
  if (gone && !gone->info) {
    for (auto& o : outputs)
      if (o.value == gone) gone->info = &o;
    for (auto& vi : value_info)
      if (!gone->info && vi.value == gone) gone->info = &vi;
  }
}

size_t Graph::unlist_initializer_inputs() {
  if (std::none_of(inputs.begin(), inputs.end(), [](const ValueInfo& i) { return i.value && i.value->initializer; }))
    return 0;
  ValueInfo* first = inputs.data();
  const size_t n = inputs.size();
  std::vector<Value*> described(n, nullptr);  // the value whose info is entry i
  for (Value* v : values_)
    if (v->info >= first && v->info < first + n) described[static_cast<size_t>(v->info - first)] = v;
  std::vector<ValueInfo> kept;
  std::vector<Value*> kept_described;
  size_t dropped = 0;
  for (size_t i = 0; i < n; ++i) {
    Value* v = inputs[i].value;
    if (v && v->initializer) {
      v->is_graph_input = false;
      if (described[i]) described[i]->info = nullptr;
      ++dropped;
      continue;
    }
    kept.push_back(std::move(inputs[i]));
    kept_described.push_back(described[i]);
  }
  inputs = std::move(kept);
  for (size_t i = 0; i < inputs.size(); ++i)
    if (kept_described[i]) kept_described[i]->info = &inputs[i];
  for (auto& vi : value_info)  // a value that lost its input entry may have a value_info one
    if (vi.value && !vi.value->info) vi.value->info = &vi;
  return dropped;
}

void Graph::drop_value(Value* v) {
  by_name_.erase(v->name);
  size_t slot = v->slot;  // swap with the last value and pop: the list's order is not meaningful
  values_[slot] = values_.back();
  values_[slot]->slot = slot;
  values_.pop_back();
}

size_t Graph::remove_unused_initializers(std::vector<std::string>& removed) {
  size_t kept = 0, before = initializers.size();
  for (size_t i = 0; i < before; ++i) {
    Tensor* t = initializers[i].get();
    Value* v = find_local(t->name.value);
    bool unused = v && v->initializer == t && v->uses.empty() && !v->is_graph_output() && !v->is_graph_input;
    if (unused) {
      removed.push_back(t->name.value);
      drop_value(v);
      v->initializer = nullptr;
      dropped_tensors_.push_back(std::move(initializers[i]));  // Python handles may still point at it
    } else {
      if (kept != i) initializers[kept] = std::move(initializers[i]);  // never self-move
      ++kept;
    }
  }
  initializers.resize(kept);
  return before - kept;
}

size_t Graph::remove_stale_value_info() {
  // Entries move, so values whose info lives in value_info are relinked.
  const ValueInfo* first = value_info.data();
  const ValueInfo* last = first + value_info.size();
  for (Value* v : values_)
    if (v->info >= first && v->info < last) v->info = nullptr;
  size_t kept = 0, before = value_info.size();
  for (size_t i = 0; i < before; ++i) {
    Value* v = value_info[i].value;
    if (!v || find_local(v->name) != v) continue;
    if (kept != i) value_info[kept] = std::move(value_info[i]);  // never self-move: it would empty the entry
    ++kept;
  }
  value_info.resize(kept);
  for (auto& vi : value_info)
    if (!vi.value->info) vi.value->info = &vi;
  return before - kept;
}

size_t Graph::clear_value_info() {
  const ValueInfo* first = value_info.data();
  const ValueInfo* last = first + value_info.size();
  for (Value* v : values_)
    if (v->info >= first && v->info < last) v->info = nullptr;
  const size_t n = value_info.size();
  value_info.clear();
  // A value described only there may also be a graph output.
  for (auto& o : outputs)
    if (o.value && !o.value->info && !is_function_body) o.value->info = &o;
  return n;
}

Node* Graph::replace_node(Node* old_node, Node* replacement) {
  if (old_node->graph != this || old_node->removed) throw ModelError("node " + old_node->display_name() + " is not in this graph");
  if (!replacement->outputs.empty()) throw ModelError("a replacement node takes over the old node's outputs; give it none");
  add_node(replacement, old_node);
  replacement->outputs = std::move(old_node->outputs);
  old_node->outputs.clear();
  for (size_t i = 0; i < replacement->outputs.size(); ++i) {
    if (Value* v = replacement->outputs[i]) {
      v->producer = replacement;
      v->producer_index = static_cast<int>(i);
    }
  }
  remove_node(old_node);
  return replacement;
}

void Graph::replace_all_uses(Value* from, Value* to) {
  if (from == to) return;
  auto uses = from->uses;  // set_input edits from->uses
  for (const Use& u : uses) u.node->graph->set_input(u.node, u.index, to);
  if (from->graph_output_refs) {
    // Outputs of this graph or of nested ones may name it.
    for_each_graph_below(from->graph, [&](Graph* g) {
      for (auto& out : g->outputs) {
        if (out.value != from) continue;
        if (from->info == &out) {  // `from` lives on (renamed): it keeps its type, not the output's entry
          from->info = nullptr;
          if (out.type.has) from->graph->set_value_type(from, out.type.value);
        }
        out.value = to;
        out.name.set(to->name);
        --from->graph_output_refs;
        ++to->graph_output_refs;
        if (!to->info && !g->is_function_body) to->info = &out;  // its type is now described there
      }
    });
  }
}

Value* Graph::split_output(Node* node, int index, std::string fresh_name) {
  if (node->graph != this || node->removed) throw ModelError("node " + node->display_name() + " is not in this graph");
  if (index < 0 || index >= static_cast<int>(node->outputs.size()) || !node->outputs[index])
    throw std::out_of_range("output index");
  Value* old = node->outputs[index];
  Value* fresh = create_value(std::move(fresh_name));
  node->outputs[index] = fresh;
  fresh->producer = node;
  fresh->producer_index = index;
  old->producer = nullptr;
  old->producer_index = -1;
  return fresh;
}

void Graph::set_constant(Value* v, std::unique_ptr<Tensor> t, bool as_node) {
  Node* producer = v->producer;
  if (v->graph != this || !producer || producer->removed)
    throw ModelError("'" + v->name + "' is not a node output of graph '" + name.value + "'");
  producer->outputs[static_cast<size_t>(v->producer_index)] = nullptr;
  v->producer = nullptr;
  v->producer_index = -1;
  if (as_node) {
    Node* c = new_node();
    c->op_type.set("Constant");
    c->name.set(v->name + "_const");
    Attribute& value = c->attributes.emplace_back();
    value.name.set("value");
    value.type.set(int32_t(AttrType::kTensor));
    t->name.clear();
    value.t = std::move(t);
    c->outputs.push_back(v);
    add_node(c, producer);
  } else {
    t->name.set(v->name);
    v->initializer = t.get();
    initializers.push_back(std::move(t));
  }
  bool left = false;
  for (const Value* o : producer->outputs) left = left || o;
  if (!left) remove_node(producer);
}

Value* Graph::add_initializer(std::string value_name, std::unique_ptr<Tensor> t) {
  Value* v = create_value(std::move(value_name));
  t->name.set(v->name);
  v->initializer = t.get();
  initializers.push_back(std::move(t));
  return v;
}

std::string Graph::unique_name(std::string_view hint) const {
  std::string name(hint);
  for (int i = 1; lookup(name); ++i) name = std::string(hint) + "_" + std::to_string(i);
  return name;
}

void Graph::set_value_type(Value* v, std::string type) {
  if (v->info) {
    v->info->type.set(std::move(type));
    return;
  }
  if (value_info.size() == value_info.capacity()) {
    // Growing moves the entries: values whose info lives there are relinked.
    // The capacity doubles, so that happens a logarithmic number of times.
    const ValueInfo* first = value_info.data();
    std::vector<std::pair<Value*, size_t>> relink;
    for (Value* x : values_)
      if (x->info >= first && x->info < first + value_info.size()) relink.emplace_back(x, size_t(x->info - first));
    value_info.reserve(std::max<size_t>(16, 2 * value_info.capacity()));
    for (auto& [x, i] : relink) x->info = &value_info[i];
  }
  ValueInfo& vi = value_info.emplace_back();
  vi.name.set(v->name);
  vi.type.set(std::move(type));
  vi.value = v;
  v->info = &value_info.back();
}

static bool defined_within(const Value* v, const Graph* root) {
  for (const Graph* s = v->graph; s; s = s->parent)
    if (s == root) return true;
  return false;
}

// Values defined outside `root` and read by `g` (a graph inside `root`).
static void collect_outer(const Graph* g, const Graph* root, std::unordered_set<Value*>& seen,
                          std::vector<Value*>& out) {
  auto consider = [&](Value* v) {
    if (v && !defined_within(v, root) && seen.insert(v).second) out.push_back(v);
  };
  for (const auto& n : g->nodes) {
    for (Value* v : n->inputs) consider(v);
    for (Graph* sub : n->subgraphs()) collect_outer(sub, root, seen, out);
  }
  for (const auto& o : g->outputs) consider(o.value);
}

static void for_each_graph_below(Graph* g, const std::function<void(Graph*)>& fn) {
  fn(g);
  for (const auto& n : g->nodes)
    for (Graph* sub : n->subgraphs()) for_each_graph_below(sub, fn);
}

std::vector<Value*> Graph::outer_references() const {
  std::unordered_set<Value*> seen;
  std::vector<Value*> out;
  collect_outer(this, this, seen, out);
  return out;
}

std::vector<Node*> Graph::topological_order() const {
  // Kahn's algorithm; a node also depends on producers its subgraphs read.
  std::unordered_map<const Node*, size_t> index;
  std::vector<Node*> order_in_file;
  for (const auto& n : nodes) {
    index.emplace(n, order_in_file.size());
    order_in_file.push_back(n);
  }
  const size_t count = order_in_file.size();
  std::vector<std::vector<size_t>> users(count);
  std::vector<size_t> pending(count, 0);
  for (size_t i = 0; i < count; ++i) {
    Node* n = order_in_file[i];
    std::vector<Value*> reads(n->inputs.begin(), n->inputs.end());
    for (Graph* sub : n->subgraphs()) {
      auto outer = sub->outer_references();
      reads.insert(reads.end(), outer.begin(), outer.end());
    }
    std::unordered_set<size_t> deps;
    for (Value* v : reads) {
      if (!v || !v->producer || v->producer->graph != this) continue;
      deps.insert(index.at(v->producer));
    }
    for (size_t d : deps) {
      users[d].push_back(i);
      ++pending[i];
    }
  }
  std::priority_queue<size_t, std::vector<size_t>, std::greater<size_t>> ready;
  for (size_t i = 0; i < count; ++i)
    if (pending[i] == 0) ready.push(i);
  std::vector<Node*> out;
  out.reserve(count);
  while (!ready.empty()) {
    size_t i = ready.top();
    ready.pop();
    out.push_back(order_in_file[i]);
    for (size_t u : users[i])
      if (--pending[u] == 0) ready.push(u);
  }
  if (out.size() != count) {
    for (size_t i = 0; i < count; ++i)
      if (pending[i] != 0)
        throw ModelError("graph '" + name.value + "' has a cycle through node " + order_in_file[i]->display_name());
  }
  return out;
}

static void add_graph_tree(Graph* g, std::vector<Graph*>& out) {
  if (!g) return;
  out.push_back(g);
  for (const auto& n : g->nodes)
    if (n->has_subgraphs())
      for (Graph* sub : n->subgraphs()) add_graph_tree(sub, out);
}

std::vector<Graph*> Model::all_graphs() const {
  std::vector<Graph*> out;
  add_graph_tree(graph.get(), out);
  for (const auto& f : functions) {
    add_graph_tree(f->body.get(), out);
    for (const auto& a : f->attribute_proto) {
      add_graph_tree(a.g.get(), out);
      for (const auto& g : a.graphs) add_graph_tree(g.get(), out);
    }
  }
  for (const auto& t : training_info) {
    add_graph_tree(t.initialization.get(), out);
    add_graph_tree(t.algorithm.get(), out);
  }
  return out;
}

static void add_sparse(SparseTensor& s, std::vector<Tensor*>& out) {
  if (s.values) out.push_back(s.values.get());
  if (s.indices) out.push_back(s.indices.get());
}

static void add_attr_tensors(std::vector<Attribute>& attrs, std::vector<Tensor*>& out) {
  for (auto& a : attrs) {
    if (a.t) out.push_back(a.t.get());
    for (auto& t : a.tensors) out.push_back(t.get());
    if (a.sparse_tensor) add_sparse(*a.sparse_tensor, out);
    for (auto& s : a.sparse_tensors) add_sparse(*s, out);
  }
}

std::vector<Tensor*> Model::all_tensors() const {
  std::vector<Tensor*> out;
  for (Graph* g : all_graphs()) {
    for (auto& t : g->initializers) out.push_back(t.get());
    for (auto& s : g->sparse_initializers) add_sparse(s, out);
    for (Node* n : g->nodes) add_attr_tensors(n->attributes, out);
  }
  for (auto& f : functions) add_attr_tensors(f->attribute_proto, out);
  return out;
}

std::vector<std::string> check_invariants(const Model& model) {
  std::vector<std::string> problems;
  auto report = [&](const std::string& s) { problems.push_back(s); };
  std::unordered_map<const Value*, int> output_refs;
  for (Graph* g : model.all_graphs())
    for (const auto& o : g->outputs)
      if (o.value) ++output_refs[o.value];
  for (Graph* g : model.all_graphs()) {
    const std::string where = "graph '" + g->name.value + "': ";
    for (Value* v : g->values()) {
      if (v->graph != g) report(where + "value '" + v->name + "' has the wrong owner");
      if (g->find_local(v->name) != v) report(where + "value '" + v->name + "' is not indexed by its name");
      if (v->producer) {
        if (v->producer->removed) report(where + "value '" + v->name + "' is produced by a removed node");
        else if (v->producer_index < 0 || v->producer_index >= int(v->producer->outputs.size()) ||
                 v->producer->outputs[v->producer_index] != v)
          report(where + "value '" + v->name + "' does not match its producer's outputs");
      } else if (!v->is_graph_input && !v->initializer && !v->sparse_initializer) {
        report(where + "value '" + v->name + "' has no definition");
      }
      for (const Use& u : v->uses) {
        if (!u.node || u.node->removed) report(where + "value '" + v->name + "' is read by a removed node");
        else if (u.index < 0 || u.index >= int(u.node->inputs.size()) || u.node->inputs[u.index] != v)
          report(where + "value '" + v->name + "' lists a use its reader does not have");
      }
      auto it = output_refs.find(v);
      int refs = it == output_refs.end() ? 0 : it->second;
      if (refs != v->graph_output_refs) report(where + "value '" + v->name + "' has a wrong graph-output count");
    }
    for (const auto& n : g->nodes) {
      if (n->graph != g) report(where + "node " + n->display_name() + " has the wrong owner");
      for (size_t i = 0; i < n->inputs.size(); ++i) {
        Value* v = n->inputs[i];
        if (!v) continue;
        if (g->lookup(v->name) != v) report(where + "node " + n->display_name() + " reads '" + v->name + "', not in scope");
        if (std::count(v->uses.begin(), v->uses.end(), Use{n, int(i)}) != 1)
          report(where + "node " + n->display_name() + " input " + std::to_string(i) + " is missing from its value's uses");
      }
      for (size_t i = 0; i < n->outputs.size(); ++i) {
        Value* v = n->outputs[i];
        if (v && (v->producer != n || v->producer_index != int(i)))
          report(where + "node " + n->display_name() + " output '" + v->name + "' does not point back to it");
      }
      for (Graph* sub : n->subgraphs())
        if (sub->parent != g || sub->owner_node != n) report(where + "subgraph of " + n->display_name() + " has wrong links");
    }
    try {
      g->topological_order();
    } catch (const ModelError& e) {
      report(where + e.what());
    }
  }
  return problems;
}

int64_t storage_bytes(int32_t dtype, uint64_t count) {
  auto checked_mul = [](uint64_t n, uint64_t k) -> int64_t {
    if (n > static_cast<uint64_t>(INT64_MAX) / k) return kBytesOverflow;
    return static_cast<int64_t>(n * k);
  };
  switch (dtype) {
    case 1: case 6: case 12: return checked_mul(count, 4);
    case 2: case 3: case 9: case 17: case 18: case 19: case 20: case 24: return checked_mul(count, 1);
    case 4: case 5: case 10: case 16: return checked_mul(count, 2);
    case 7: case 11: case 13: case 14: return checked_mul(count, 8);
    case 15: return checked_mul(count, 16);
    case 21: case 22: case 23: return static_cast<int64_t>((count + 1) / 2);
    case 25: case 26: return static_cast<int64_t>((count + 3) / 4);
    case 27: case 28: return checked_mul(count, 6) < 0 ? kBytesOverflow : static_cast<int64_t>((count * 6 + 7) / 8);
    default: return -1;
  }
}

const char* dtype_name(int32_t dtype) {
  static const char* kNames[] = {"undefined", "float32", "uint8", "int8", "uint16", "int16", "int32", "int64",
                                 "string", "bool", "float16", "float64", "uint32", "uint64", "complex64",
                                 "complex128", "bfloat16", "float8e4m3fn", "float8e4m3fnuz", "float8e5m2",
                                 "float8e5m2fnuz", "uint4", "int4", "float4e2m1", "float8e8m0", "uint2", "int2",
                                 "float6e2m3", "float6e3m2"};
  if (dtype < 0 || dtype >= int32_t(sizeof(kNames) / sizeof(kNames[0]))) return "unknown";
  return kNames[dtype];
}

}  // namespace pyonnxopt::ir
