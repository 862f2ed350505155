// The in-memory model: every message of onnx.proto that the optimizer touches,
// with proto2 field presence, unknown fields kept as raw bytes (written back
// unchanged), tensors as views, and a use-def layer (Value <-> Node) on top of
// each graph. Knows nothing about serialization or Python.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ir/buffer.h"

namespace pyonnxopt::ir {

// Bad input: a malformed file or a graph that breaks ONNX's rules.
struct ModelError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A proto2 optional field: the value and whether it was set.
template <class T>
struct Opt {
  T value{};
  bool has = false;
  void set(T v) {
    value = std::move(v);
    has = true;
  }
  void clear() {
    value = T{};
    has = false;
  }
};

// Fields kept as they came: unknown fields, and known ones the IR does not
// model (quantization annotations, device configurations). Each entry is one
// complete field, tag included, written back after the known fields.
using RawFields = std::vector<std::string>;

struct Entry {  // StringStringEntryProto
  Opt<std::string> key, value;
  RawFields extra;
  mutable uint64_t cached_size = 0;
};

struct OpsetId {  // OperatorSetIdProto
  Opt<std::string> domain;
  Opt<int64_t> version;
  RawFields extra;
  mutable uint64_t cached_size = 0;
};

// Little-endian fixed-width elements (float_data, double_data): a view of the
// packed bytes when they came packed, else bytes gathered element by element.
struct FixedData {
  Blob view;
  std::string owned;
  bool uses_owned = false;
  uint64_t size() const { return uses_owned ? owned.size() : view.length; }
  const uint8_t* data() const {
    return uses_owned ? reinterpret_cast<const uint8_t*>(owned.data()) : view.data();
  }
  void append(const Blob& bytes);
};

enum class DataLocation : int32_t { kDefault = 0, kExternal = 1 };

struct Tensor {  // TensorProto
  std::vector<int64_t> dims;
  Opt<int32_t> data_type;
  Opt<std::string> segment;  // raw Segment message bytes
  FixedData float_data;
  std::vector<int32_t> int32_data;
  std::vector<std::string> string_data;
  std::vector<int64_t> int64_data;
  Opt<std::string> name;
  Opt<std::string> doc_string;
  bool has_raw_data = false;
  Blob raw_data;
  std::vector<Entry> external_data;
  Opt<int32_t> data_location;
  FixedData double_data;
  std::vector<uint64_t> uint64_data;
  std::vector<Entry> metadata_props;
  RawFields extra;
  mutable uint64_t cached_size = 0;

  // Resolved bytes of external data (data_location == EXTERNAL).
  Blob external_bytes;

  bool is_external() const { return data_location.has && data_location.value == int32_t(DataLocation::kExternal); }
  // Bytes of the tensor when stored raw (raw_data or external); null Blob otherwise.
  const Blob* raw_payload() const {
    if (is_external()) return &external_bytes;
    return has_raw_data ? &raw_data : nullptr;
  }
  // Replaces the data with new raw bytes; drops every other data field.
  void set_raw(Blob bytes);
  std::string external_key(const char* key) const;
};

struct SparseTensor {  // SparseTensorProto
  std::unique_ptr<Tensor> values, indices;
  std::vector<int64_t> dims;
  RawFields extra;
  mutable uint64_t cached_size = 0;
};

struct ValueInfo {  // ValueInfoProto; only a name inside FunctionProto input/output
  Opt<std::string> name;
  Opt<std::string> type;  // raw TypeProto bytes
  Opt<std::string> doc_string;
  std::vector<Entry> metadata_props;
  RawFields extra;
  mutable uint64_t cached_size = 0;
  struct Value* value = nullptr;  // the value it describes, when one has this name
};

struct Graph;
struct Node;

enum class AttrType : int32_t {
  kUndefined = 0, kFloat = 1, kInt = 2, kString = 3, kTensor = 4, kGraph = 5, kFloats = 6, kInts = 7,
  kStrings = 8, kTensors = 9, kGraphs = 10, kSparseTensor = 11, kSparseTensors = 12, kTypeProto = 13, kTypeProtos = 14,
};

struct Attribute {  // AttributeProto
  Opt<std::string> name, ref_attr_name, doc_string;
  Opt<int32_t> type;
  Opt<float> f;
  Opt<int64_t> i;
  Opt<std::string> s;
  std::unique_ptr<Tensor> t;
  std::unique_ptr<Graph> g;
  std::unique_ptr<SparseTensor> sparse_tensor;
  Opt<std::string> tp;  // raw TypeProto
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  std::vector<std::unique_ptr<Tensor>> tensors;
  std::vector<std::unique_ptr<Graph>> graphs;
  std::vector<std::unique_ptr<SparseTensor>> sparse_tensors;
  std::vector<std::string> type_protos;  // raw TypeProtos
  RawFields extra;
  mutable uint64_t cached_size = 0;
};

struct Use {
  Node* node;
  int index;  // input slot of `node`
  bool operator==(const Use& o) const { return node == o.node && index == o.index; }
};

// A named value in SSA form: a graph input, an initializer, or a node output.
struct Value {
  std::string name;
  Graph* graph = nullptr;  // the scope that defines it
  Node* producer = nullptr;
  int producer_index = -1;
  bool is_graph_input = false;
  Tensor* initializer = nullptr;
  SparseTensor* sparse_initializer = nullptr;
  int graph_output_refs = 0;  // how many graph outputs name it
  std::vector<Use> uses;      // node inputs reading it, in this graph or nested ones
  ValueInfo* info = nullptr;  // its value_info / input / output entry, if any
  size_t slot = 0;            // position in its graph's value list

  bool is_graph_output() const { return graph_output_refs > 0; }
};

// Name -> Value for one scope: open addressing with linear probing. Slots
// hold the hash beside the pointer, so a lookup touches one slot and, on a
// hash match, one Value; far fewer cache misses than std::unordered_map.
class NameIndex {
 public:
  Value* find(std::string_view name) const;
  bool insert(Value* v);  // keyed by v->name; false when the name is taken
  // The value named `name`, or, when there is none, `make()`'s new value
  // (named `name`) inserted; one probe either way.
  template <class Make>
  Value* find_or_insert(std::string_view name, bool& inserted, Make make);
  void erase(std::string_view name);
  void reserve(size_t n);

 private:
  struct Slot {
    uint64_t hash = 0;
    Value* value = nullptr;
  };
  static uint64_t hash_of(std::string_view name);
  size_t probe(std::string_view name, uint64_t hash) const;  // the slot holding it or the empty one to use
  std::vector<Slot> slots_;
  size_t size_ = 0;
};

template <class Make>
Value* NameIndex::find_or_insert(std::string_view name, bool& inserted, Make make) {
  if (2 * (size_ + 1) > slots_.size()) reserve(size_ + 1 > 8 ? 2 * (size_ + 1) : 8);
  const uint64_t h = hash_of(name);
  const size_t i = probe(name, h);
  inserted = !slots_[i].value;
  if (inserted) {
    slots_[i] = Slot{h, make()};
    ++size_;
  }
  return slots_[i].value;
}

struct Node {  // NodeProto
  Opt<std::string> name, op_type, domain, overload, doc_string;
  std::vector<Value*> inputs;   // nullptr: an omitted optional input ("")
  std::vector<Value*> outputs;  // nullptr: an omitted optional output ("")
  std::vector<Attribute> attributes;
  std::vector<Entry> metadata_props;
  RawFields extra;
  mutable uint64_t cached_size = 0;

  Graph* graph = nullptr;
  Node* prev = nullptr;  // neighbours in graph->nodes
  Node* next = nullptr;
  bool removed = false;
  bool pinned = false;  // no pass may change or remove it (--exclude-node)
  mutable size_t order_index = 0;  // scratch for ordering checks
  size_t pending_index = 0;        // scratch for the loader

  std::string display_name() const;  // "name (OpType)" for messages
  const Attribute* attribute(std::string_view attr_name) const;  // nullptr when absent
  // Subgraphs held by this node's attributes (If/Loop/Scan bodies).
  std::vector<Graph*> subgraphs() const;
  bool has_subgraphs() const {
    for (const auto& a : attributes)
      if (a.g || !a.graphs.empty()) return true;
    return false;
  }
};

// The nodes of a graph in order: an intrusive doubly-linked list, so insertion
// and removal are O(1) and iteration allocates nothing. Yields Node*.
class NodeList {
 public:
  class iterator {
   public:
    explicit iterator(Node* n) : n_(n) {}
    Node* operator*() const { return n_; }
    iterator& operator++() {
      n_ = n_->next;
      return *this;
    }
    bool operator==(const iterator& o) const { return n_ == o.n_; }
    bool operator!=(const iterator& o) const { return n_ != o.n_; }

   private:
    Node* n_;
  };
  iterator begin() const { return iterator(head_); }
  iterator end() const { return iterator(nullptr); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  Node* front() const { return head_; }
  Node* back() const { return tail_; }
  void insert(Node* n, Node* before);  // before == nullptr: append
  void erase(Node* n);

 private:
  Node* head_ = nullptr;
  Node* tail_ = nullptr;
  size_t size_ = 0;
};

struct Graph {  // GraphProto, or the body of a FunctionProto
  Opt<std::string> name, doc_string;
  NodeList nodes;
  std::vector<std::unique_ptr<Tensor>> initializers;
  std::vector<SparseTensor> sparse_initializers;
  std::vector<ValueInfo> inputs, outputs, value_info;
  std::vector<Entry> metadata_props;
  RawFields extra;  // includes quantization_annotation
  mutable uint64_t cached_size = 0;

  Graph* parent = nullptr;      // enclosing scope for outer-scope references
  Node* owner_node = nullptr;   // the node whose attribute holds this graph
  bool is_function_body = false;

  // ---- use-def layer ----
  Value* find_local(std::string_view name) const;
  Value* lookup(std::string_view name) const;  // this scope, then enclosing ones
  Value* create_value(std::string name);       // throws ModelError on a duplicate
  Value* try_create_value(std::string_view name);  // nullptr on a duplicate
  void rename_value(Value* v, std::string new_name);
  const std::vector<Value*>& values() const { return values_; }
  void reserve_values(size_t n) {
    values_.reserve(n);
    by_name_.reserve(n);
  }

  // A node owned by this graph, not yet in `nodes`; fill it, then add_node.
  Node* new_node();
  // Appends (or inserts before `before`) a node from new_node(); its outputs
  // must be fresh values.
  Node* add_node(Node* node, Node* before = nullptr);
  void set_input(Node* node, int index, Value* v);
  // Unlinks a node whose outputs are no longer read; it stays allocated (and
  // flagged `removed`) until the model is destroyed, so handles stay valid.
  void remove_node(Node* node);
  // Drops graph output `index` (what only it read becomes dead code).
  void remove_output(size_t index);
  // Drops the graph inputs that name an initializer (IR 3 lists every
  // initializer there); those values become plain initializers, the
  // constants they are under IR 3. Returns how many.
  size_t unlist_initializer_inputs();
  // Drops initializers nothing reads that are not graph inputs or outputs;
  // appends their names to `removed`.
  size_t remove_unused_initializers(std::vector<std::string>& removed);
  // Drops value_info entries naming no value of this graph; returns how many.
  size_t remove_stale_value_info();
  // Drops every value_info entry (types to be inferred again); returns how many.
  size_t clear_value_info();
  // Puts `replacement` (from new_node(), with inputs and no outputs) where
  // `old_node` is; it takes over old_node's output values, so every reader
  // and graph output keeps its name. old_node is removed.
  Node* replace_node(Node* old_node, Node* replacement);
  // Redirects every reader of `from` (nodes anywhere and graph outputs) to `to`.
  void replace_all_uses(Value* from, Value* to);
  // Gives `node` a new output value named `fresh_name` in place of its output
  // `index`, and returns it. The old value keeps its name, readers,
  // graph-output entries and type but has no producer: give it to a new node
  // (add_node) at once, e.g. to put a node between `node` and its readers.
  Value* split_output(Node* node, int index, std::string fresh_name);
  // Makes `v`, an output of a node of this graph, a constant holding `t`
  // under its own name: an initializer, or, with `as_node` (function bodies
  // have no initializers), the output of a new Constant node placed where its
  // producer was. Readers and value_info stay. The producer loses that output
  // and is removed once it has none left, so fold every read output of a node.
  void set_constant(Value* v, std::unique_ptr<Tensor> t, bool as_node);
  // A new initializer named `name` (throws ModelError when the name is
  // taken in this scope) holding `t`; returns its value.
  Value* add_initializer(std::string name, std::unique_ptr<Tensor> t);
  // `hint`, or `hint_1`, `hint_2`, ...: the first name no value in this
  // scope or an enclosing one has.
  std::string unique_name(std::string_view hint) const;
  // Sets the TypeProto (raw bytes) describing `v`: its input/output/value_info
  // entry, or a new value_info entry.
  void set_value_type(Value* v, std::string type);

  // Nodes in an order where producers come first (stable: keeps the file's
  // order where it can). Throws ModelError naming a node on a cycle.
  std::vector<Node*> topological_order() const;
  // Values of enclosing scopes that nodes in this graph (or deeper) read.
  std::vector<Value*> outer_references() const;


 private:
  // Nodes and values live in pools (stable addresses, allocated in chunks,
  // close together in memory) until the graph dies, so removed ones never
  // dangle. values_ lists the live values.
  std::deque<Node> node_pool_;
  std::deque<Value> value_pool_;
  std::vector<Value*> values_;
  NameIndex by_name_;
  std::vector<std::unique_ptr<Tensor>> dropped_tensors_;

  void drop_value(Value* v);  // out of the index and the live list; stays allocated
};

struct Function {  // FunctionProto
  Opt<std::string> name, domain, overload, doc_string;
  std::vector<std::string> attribute;
  std::vector<Attribute> attribute_proto;
  std::vector<OpsetId> opset_import;
  std::vector<Entry> metadata_props;
  std::unique_ptr<Graph> body;  // inputs/outputs carry names only
  RawFields extra;
  mutable uint64_t cached_size = 0;
};

struct TrainingInfo {  // TrainingInfoProto
  std::unique_ptr<Graph> initialization, algorithm;
  std::vector<Entry> initialization_binding, update_binding;
  RawFields extra;
  mutable uint64_t cached_size = 0;
};

struct Model {  // ModelProto
  Opt<int64_t> ir_version, model_version;
  std::vector<OpsetId> opset_import;
  Opt<std::string> producer_name, producer_version, domain, doc_string;
  std::unique_ptr<Graph> graph;
  std::vector<Entry> metadata_props;
  std::vector<TrainingInfo> training_info;
  std::vector<std::unique_ptr<Function>> functions;
  RawFields extra;  // includes configuration
  mutable uint64_t cached_size = 0;

  std::vector<std::unique_ptr<Function>> dropped_functions;  // removed, kept alive for handles

  std::string path;      // file it came from ("" for bytes)
  std::string base_dir;  // folder external data locations are relative to
  std::shared_ptr<const Buffer> source;

  // Every graph: main, subgraphs, function bodies, training graphs (pre-order).
  std::vector<Graph*> all_graphs() const;
  // Every tensor that can hold data: initializers, sparse parts, attribute tensors.
  std::vector<Tensor*> all_tensors() const;
};

// Checks use-def consistency of every graph; returns the problems found
// (empty when consistent). Used by the tests after every mutation.
std::vector<std::string> check_invariants(const Model& model);

// Size in bytes of `count` elements of ONNX data type `dtype`; -1 when the
// type has no fixed width (STRING, UNDEFINED, unknown types), kBytesOverflow
// when the size does not fit in int64.
constexpr int64_t kBytesOverflow = -2;
int64_t storage_bytes(int32_t dtype, uint64_t count);
const char* dtype_name(int32_t dtype);

}  // namespace pyonnxopt::ir
