// Wire format -> IR. Parsing follows onnx.proto field by field; a known field
// with the wrong wire type is an error, an unknown field is kept verbatim.
// Linking (names -> Values) and the checks that need the whole graph happen in
// link.cpp; external data is resolved in external_data.cpp.
#include "proto/reader.h"

#include <system_error>

#include "proto/link.h"
#include "proto/validate.h"
#include "proto/wire.h"

namespace pyonnxopt::proto {
namespace {

using namespace ir;

constexpr int kMaxDepth = kMaxMessageDepth;

class Parser {
 public:
  Parser(std::shared_ptr<const Buffer> buf, PendingNames& names)
      : buf_(std::move(buf)), root_(buf_->data()), names_(names) {}

  std::unique_ptr<Model> model() {
    auto m = std::make_unique<Model>();
    WireReader r(root_, buf_->size(), 0);
    Field f;
    while (next(r, f)) {
      switch (f.num) {
        case 1: m->ir_version.set(i64(r, f)); break;
        case 2: m->producer_name.set(str(r, f)); break;
        case 3: m->producer_version.set(str(r, f)); break;
        case 4: m->domain.set(str(r, f)); break;
        case 5: m->model_version.set(i64(r, f)); break;
        case 6: m->doc_string.set(str(r, f)); break;
        case 7: graph(msg(r, f), m->graph, 2); break;
        case 8: m->opset_import.push_back(opset(msg(r, f))); break;
        case 14: m->metadata_props.push_back(entry(msg(r, f))); break;
        case 20: m->training_info.push_back(training(msg(r, f), 2)); break;
        case 25: m->functions.push_back(function(msg(r, f), 2)); break;
        case 26: m->extra.push_back(kept_field(r, f, validate_device_configuration, 2)); break;
        default: m->extra.emplace_back(r.skip(f.start, f.wire, f.num));
      }
    }
    return m;
  }

 private:
  struct Field {
    uint32_t num;
    WireType wire;
    const uint8_t* start;
  };

  bool next(WireReader& r, Field& f) {
    f.start = r.pos();
    return r.tag(f.num, f.wire);
  }

  [[noreturn]] void bad_wire(WireReader& r, const Field& f, const char* expected) {
    r.fail("field " + std::to_string(f.num) + " has wire type " + std::to_string(f.wire) + ", expected " + expected);
  }
  void expect(WireReader& r, const Field& f, WireType w) {
    if (f.wire != w) bad_wire(r, f, w == kLen ? "length-delimited" : w == kVarint ? "varint" : "fixed-width");
  }

  WireReader sub(std::string_view v) {
    auto p = reinterpret_cast<const uint8_t*>(v.data());
    return WireReader(p, v.size(), static_cast<uint64_t>(p - root_));
  }
  WireReader msg(WireReader& r, const Field& f) {
    expect(r, f, kLen);
    return sub(r.bytes());
  }
  std::string str(WireReader& r, const Field& f) {
    expect(r, f, kLen);
    return std::string(r.bytes());
  }
  std::string_view view_str(WireReader& r, const Field& f) {
    expect(r, f, kLen);
    return r.bytes();
  }
  int64_t i64(WireReader& r, const Field& f) {
    expect(r, f, kVarint);
    return static_cast<int64_t>(r.varint());
  }
  int32_t i32(WireReader& r, const Field& f) {
    expect(r, f, kVarint);
    return static_cast<int32_t>(r.varint());
  }
  Blob view(std::string_view v) {
    return Blob{buf_, static_cast<uint64_t>(reinterpret_cast<const uint8_t*>(v.data()) - root_), v.size()};
  }

  // Repeated varint field, packed or not. The element count is bounded by
  // the payload size, so no allocation is sized by a declared count alone.
  template <class T>
  void varints(WireReader& r, const Field& f, std::vector<T>& out) {
    if (f.wire == kVarint) {
      out.push_back(static_cast<T>(r.varint()));
    } else if (f.wire == kLen) {
      WireReader p = sub(r.bytes());
      while (!p.done()) out.push_back(static_cast<T>(p.varint()));
    } else {
      bad_wire(r, f, "varint or packed");
    }
  }
  // Repeated fixed-width field (float/double), packed or not.
  void fixed(WireReader& r, const Field& f, FixedData& out, WireType element) {
    if (f.wire == kLen) {
      auto v = r.bytes();
      size_t width = element == kFixed32 ? 4 : 8;
      if (v.size() % width) r.fail("packed field " + std::to_string(f.num) + " length is not a multiple of " + std::to_string(width));
      out.append(view(v));
    } else if (f.wire == element) {
      const uint8_t* p = r.pos();
      if (element == kFixed32) r.fixed32();
      else r.fixed64();
      out.append(view(std::string_view(reinterpret_cast<const char*>(p), static_cast<size_t>(r.pos() - p))));
    } else {
      bad_wire(r, f, "fixed-width or packed");
    }
  }
  void floats(WireReader& r, const Field& f, std::vector<float>& out) {
    auto one = [&](WireReader& rr) {
      uint32_t bits = rr.fixed32();
      float x;
      std::memcpy(&x, &bits, 4);
      out.push_back(x);
    };
    if (f.wire == kFixed32) {
      one(r);
    } else if (f.wire == kLen) {
      WireReader p = sub(r.bytes());
      while (!p.done()) one(p);
    } else {
      bad_wire(r, f, "fixed32 or packed");
    }
  }

  // `depth` counts messages from the ModelProto (1), as protobuf does: a model
  // protobuf refuses to read is refused here too, not written back.
  void depth_check(WireReader& r, int depth) {
    if (depth > kMaxDepth) r.fail("messages nested deeper than protobuf's limit of " + std::to_string(kMaxDepth));
  }

  // A message kept as bytes (TypeProto, Segment): checked against its schema
  // now, so bad bytes fail here rather than in whoever reads them later. A
  // repeated occurrence merges, which for serialized messages is concatenation.
  using Validator = void (*)(std::string_view, int);
  void check(std::string_view payload, Validator validate, int depth) {
    try {
      validate(payload, depth);
    } catch (const ParseError& e) {  // offsets relative to the payload -> to the file
      throw ParseError(e.what(), e.offset + static_cast<uint64_t>(reinterpret_cast<const uint8_t*>(payload.data()) - root_));
    }
  }
  void raw_into(WireReader& r, const Field& f, Opt<std::string>& out, Validator validate, int depth) {
    expect(r, f, kLen);
    std::string_view v = r.bytes();
    check(v, validate, depth);
    if (out.has) out.value.append(v);
    else out.set(std::string(v));
  }
  // A known field the IR does not model, kept whole (tag included) with the
  // unknown ones once its payload passed the schema check.
  std::string kept_field(WireReader& r, const Field& f, Validator validate, int depth) {
    expect(r, f, kLen);
    check(r.bytes(), validate, depth);
    return std::string(reinterpret_cast<const char*>(f.start), static_cast<size_t>(r.pos() - f.start));
  }
  std::string raw_one(WireReader& r, const Field& f, Validator validate, int depth) {
    Opt<std::string> out;
    raw_into(r, f, out, validate, depth);
    return std::move(out.value);
  }

  Entry entry(WireReader r) {
    Entry e;
    Field f;
    while (next(r, f)) {
      if (f.num == 1) e.key.set(str(r, f));
      else if (f.num == 2) e.value.set(str(r, f));
      else e.extra.emplace_back(r.skip(f.start, f.wire, f.num));
    }
    return e;
  }

  OpsetId opset(WireReader r) {
    OpsetId o;
    Field f;
    while (next(r, f)) {
      if (f.num == 1) o.domain.set(str(r, f));
      else if (f.num == 2) o.version.set(i64(r, f));
      else o.extra.emplace_back(r.skip(f.start, f.wire, f.num));
    }
    return o;
  }

  // Parses into `t`; called again for a repeated occurrence, it merges.
  void tensor(WireReader r, std::unique_ptr<Tensor>& slot, int depth) {
    depth_check(r, depth);
    if (!slot) slot = std::make_unique<Tensor>();
    Tensor* t = slot.get();
    Field f;
    while (next(r, f)) {
      switch (f.num) {
        case 1: varints(r, f, t->dims); break;
        case 2: t->data_type.set(i32(r, f)); break;
        case 3: raw_into(r, f, t->segment, validate_segment, depth + 1); break;
        case 4: fixed(r, f, t->float_data, kFixed32); break;
        case 5: varints(r, f, t->int32_data); break;
        case 6: t->string_data.push_back(str(r, f)); break;
        case 7: varints(r, f, t->int64_data); break;
        case 8: t->name.set(str(r, f)); break;
        case 9:
          expect(r, f, kLen);
          t->raw_data = view(r.bytes());
          t->has_raw_data = true;
          break;
        case 10: fixed(r, f, t->double_data, kFixed64); break;
        case 11: varints(r, f, t->uint64_data); break;
        case 12: t->doc_string.set(str(r, f)); break;
        case 13: t->external_data.push_back(entry(msg(r, f))); break;
        case 14: t->data_location.set(i32(r, f)); break;
        case 16: t->metadata_props.push_back(entry(msg(r, f))); break;
        default: t->extra.emplace_back(r.skip(f.start, f.wire, f.num));
      }
    }
  }
  std::unique_ptr<Tensor> tensor(WireReader r, int depth) {
    std::unique_ptr<Tensor> t;
    tensor(r, t, depth);
    return t;
  }

  void sparse(WireReader r, SparseTensor& s, int depth) {
    depth_check(r, depth);
    Field f;
    while (next(r, f)) {
      if (f.num == 1) tensor(msg(r, f), s.values, depth + 1);
      else if (f.num == 2) tensor(msg(r, f), s.indices, depth + 1);
      else if (f.num == 3) varints(r, f, s.dims);
      else s.extra.emplace_back(r.skip(f.start, f.wire, f.num));
    }
  }
  void sparse(WireReader r, std::unique_ptr<SparseTensor>& slot, int depth) {
    if (!slot) slot = std::make_unique<SparseTensor>();
    sparse(r, *slot, depth);
  }

  ValueInfo value_info(WireReader r, int depth) {
    depth_check(r, depth);
    ValueInfo v;
    Field f;
    while (next(r, f)) {
      if (f.num == 1) v.name.set(str(r, f));
      else if (f.num == 2) raw_into(r, f, v.type, validate_type, depth + 1);
      else if (f.num == 3) v.doc_string.set(str(r, f));
      else if (f.num == 4) v.metadata_props.push_back(entry(msg(r, f)));
      else v.extra.emplace_back(r.skip(f.start, f.wire, f.num));
    }
    return v;
  }

  Attribute attribute(WireReader r, int depth) {
    depth_check(r, depth);
    Attribute a;
    Field f;
    while (next(r, f)) {
      switch (f.num) {
        case 1: a.name.set(str(r, f)); break;
        case 2:
          expect(r, f, kFixed32);
          {
            uint32_t bits = r.fixed32();
            float x;
            std::memcpy(&x, &bits, 4);
            a.f.set(x);
          }
          break;
        case 3: a.i.set(i64(r, f)); break;
        case 4: a.s.set(str(r, f)); break;
        case 5: tensor(msg(r, f), a.t, depth + 1); break;
        case 6: graph(msg(r, f), a.g, depth + 1); break;
        case 7: floats(r, f, a.floats); break;
        case 8: varints(r, f, a.ints); break;
        case 9: a.strings.push_back(str(r, f)); break;
        case 10: a.tensors.push_back(tensor(msg(r, f), depth + 1)); break;
        case 11: a.graphs.emplace_back(); graph(msg(r, f), a.graphs.back(), depth + 1); break;
        case 13: a.doc_string.set(str(r, f)); break;
        case 14: raw_into(r, f, a.tp, validate_type, depth + 1); break;
        case 15: a.type_protos.push_back(raw_one(r, f, validate_type, depth + 1)); break;
        case 20: a.type.set(i32(r, f)); break;
        case 21: a.ref_attr_name.set(str(r, f)); break;
        case 22: sparse(msg(r, f), a.sparse_tensor, depth + 1); break;
        case 23: a.sparse_tensors.emplace_back(); sparse(msg(r, f), a.sparse_tensors.back(), depth + 1); break;
        default: a.extra.emplace_back(r.skip(f.start, f.wire, f.num));
      }
    }
    return a;
  }

  Node* node(WireReader r, Graph& g, int depth) {
    depth_check(r, depth);
    Node* n = g.new_node();
    // Subgraph nodes parsed below add their own entries; `names_` keeps
    // references to earlier entries valid.
    auto& io = names_.add(n);
    Field f;
    while (next(r, f)) {
      switch (f.num) {
        case 1: io.inputs.push_back(view_str(r, f)); break;
        case 2: io.outputs.push_back(view_str(r, f)); break;
        case 3: n->name.set(str(r, f)); break;
        case 4: n->op_type.set(str(r, f)); break;
        case 5: n->attributes.push_back(attribute(msg(r, f), depth + 1)); break;
        case 6: n->doc_string.set(str(r, f)); break;
        case 7: n->domain.set(str(r, f)); break;
        case 8: n->overload.set(str(r, f)); break;
        case 9: n->metadata_props.push_back(entry(msg(r, f))); break;
        case 10: n->extra.push_back(kept_field(r, f, validate_node_device_configuration, depth + 1)); break;
        default: n->extra.emplace_back(r.skip(f.start, f.wire, f.num));
      }
    }
    return n;
  }

  // Parses into the graph in `slot`; a repeated occurrence merges into it.
  void graph(WireReader r, std::unique_ptr<Graph>& slot, int depth) {
    if (!slot) slot = std::make_unique<Graph>();
    merge_graph(*slot, r, depth);
  }

  void merge_graph(Graph& g, WireReader r, int depth) {
    depth_check(r, depth);
    Field f;
    while (next(r, f)) {
      switch (f.num) {
        case 1: g.nodes.insert(node(msg(r, f), g, depth + 1), nullptr); break;
        case 2: g.name.set(str(r, f)); break;
        case 5: g.initializers.push_back(tensor(msg(r, f), depth + 1)); break;
        case 10: g.doc_string.set(str(r, f)); break;
        case 11: g.inputs.push_back(value_info(msg(r, f), depth + 1)); break;
        case 12: g.outputs.push_back(value_info(msg(r, f), depth + 1)); break;
        case 13: g.value_info.push_back(value_info(msg(r, f), depth + 1)); break;
        case 15: g.sparse_initializers.emplace_back(); sparse(msg(r, f), g.sparse_initializers.back(), depth + 1); break;
        case 16: g.metadata_props.push_back(entry(msg(r, f))); break;
        case 14: g.extra.push_back(kept_field(r, f, validate_tensor_annotation, depth + 1)); break;
        default: g.extra.emplace_back(r.skip(f.start, f.wire, f.num));
      }
    }
  }

  std::unique_ptr<Function> function(WireReader r, int depth) {
    depth_check(r, depth);
    auto fn = std::make_unique<Function>();
    fn->body = std::make_unique<Graph>();
    fn->body->is_function_body = true;
    Graph& body = *fn->body;
    Field f;
    while (next(r, f)) {
      switch (f.num) {
        case 1: fn->name.set(str(r, f)); break;
        case 4: body.inputs.emplace_back().name.set(str(r, f)); break;
        case 5: body.outputs.emplace_back().name.set(str(r, f)); break;
        case 6: fn->attribute.push_back(str(r, f)); break;
        case 7: body.nodes.insert(node(msg(r, f), body, depth + 1), nullptr); break;
        case 8: fn->doc_string.set(str(r, f)); break;
        case 9: fn->opset_import.push_back(opset(msg(r, f))); break;
        case 10: fn->domain.set(str(r, f)); break;
        case 11: fn->attribute_proto.push_back(attribute(msg(r, f), depth + 1)); break;
        case 12: body.value_info.push_back(value_info(msg(r, f), depth + 1)); break;
        case 13: fn->overload.set(str(r, f)); break;
        case 14: fn->metadata_props.push_back(entry(msg(r, f))); break;
        default: fn->extra.emplace_back(r.skip(f.start, f.wire, f.num));
      }
    }
    body.name.value = fn->name.value;  // for messages only; never written
    return fn;
  }

  TrainingInfo training(WireReader r, int depth) {
    depth_check(r, depth);
    TrainingInfo t;
    Field f;
    while (next(r, f)) {
      switch (f.num) {
        case 1: graph(msg(r, f), t.initialization, depth + 1); break;
        case 2: graph(msg(r, f), t.algorithm, depth + 1); break;
        case 3: t.initialization_binding.push_back(entry(msg(r, f))); break;
        case 4: t.update_binding.push_back(entry(msg(r, f))); break;
        default: t.extra.emplace_back(r.skip(f.start, f.wire, f.num));
      }
    }
    return t;
  }

  std::shared_ptr<const Buffer> buf_;
  const uint8_t* root_;
  PendingNames& names_;
};

std::unique_ptr<Model> parse(std::shared_ptr<const Buffer> buf, const std::string& label, const LoadOptions& options,
                             std::string base_dir) {
  PendingNames names;
  std::unique_ptr<Model> model;
  try {
    if (buf->size() == 0) throw ModelError("the file is empty");
    model = Parser(buf, names).model();
  } catch (const ParseError& e) {
    throw ModelError(label + ": not a valid ONNX model: " + e.what() + " at byte " + std::to_string(e.offset));
  } catch (const std::system_error& e) {
    throw ModelError(label + ": " + e.what());
  } catch (const ModelError& e) {
    throw ModelError(label + ": " + e.what());
  }
  model->source = std::move(buf);
  model->base_dir = std::move(base_dir);
  try {
    const std::vector<Tensor*> tensors = link_model(*model, names);
    check_tensors(tensors);
    resolve_external_data(*model, tensors, options.allow_external_outside, options.weights_from);
  } catch (const ModelError& e) {
    throw ModelError(label + ": " + e.what());
  }
  return model;
}

}  // namespace

std::unique_ptr<Model> load_file(const std::string& path, const LoadOptions& options) {
  if (path.find('\0') != std::string::npos) throw ModelError("path contains a NUL byte: " + path.substr(0, path.find('\0')));
  std::shared_ptr<MappedFile> file;
  try {
    file = std::make_shared<MappedFile>(path);
  } catch (const std::system_error& e) {
    throw ModelError(path + ": cannot open: " + e.code().message());
  }
  std::string base = options.base_dir;
  if (base.empty()) {
    auto slash = path.find_last_of('/');
    base = slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash);
  }
  auto model = parse(file, path, options, base);
  model->path = path;
  return model;
}

std::unique_ptr<Model> load_bytes(std::string bytes, const LoadOptions& options) {
  auto buf = std::make_shared<OwnedBuffer>(std::move(bytes));
  return parse(buf, "<bytes>", options, options.base_dir);
}

}  // namespace pyonnxopt::proto
