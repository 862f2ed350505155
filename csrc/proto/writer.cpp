// Serialization is one template per message (`emit`) run twice: once with a
// Counter that computes and caches every message's size, then with a Writer
// that streams bytes using the cached sizes (protobuf's own ByteSize-then-
// Serialize scheme), so nested messages are never buffered and tensor payloads
// go straight from their source to the file.
#include "proto/writer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <unordered_map>

#include "proto/sink.h"
#include "proto/wire.h"

namespace pyonnxopt::proto {
namespace {

using namespace ir;

struct Placement {
  size_t file;
  uint64_t offset;
};

// Where each externalized tensor goes; tensors not in it are written inline.
struct Plan {
  std::unordered_map<const Tensor*, Placement> placed;
  std::vector<std::string> files;
  std::vector<std::vector<const Tensor*>> order;  // tensors per file, by offset
  // Per file: the source file it is a whole copy of (tensors at their old
  // offsets), or null when it is composed tensor by tensor.
  std::vector<const Buffer*> whole_copy_of;
  uint64_t external_bytes = 0;
};

// ---------------------------------------------------------------- emitters

class Counter;
class Writer;

template <class Out>
void emit(Out& o, const Entry& e) {
  if (e.key.has) o.bytes(1, e.key.value);
  if (e.value.has) o.bytes(2, e.value.value);
  o.extra(e.extra);
}

template <class Out>
void emit(Out& o, const OpsetId& x) {
  if (x.domain.has) o.bytes(1, x.domain.value);
  if (x.version.has) o.varint(2, uint64_t(x.version.value));
  o.extra(x.extra);
}

template <class Out>
void emit(Out& o, const ValueInfo& v) {
  if (v.value) o.bytes(1, v.value->name);
  else if (v.name.has) o.bytes(1, v.name.value);
  if (v.type.has) o.bytes(2, v.type.value);
  if (v.doc_string.has) o.bytes(3, v.doc_string.value);
  for (const auto& e : v.metadata_props) o.message(4, e);
  o.extra(v.extra);
}

template <class Out>
void emit(Out& o, const Tensor& t) {
  for (int64_t d : t.dims) o.varint(1, uint64_t(d));
  if (t.data_type.has) o.varint(2, uint64_t(int64_t(t.data_type.value)));
  if (t.segment.has) o.bytes(3, t.segment.value);
  if (t.float_data.size()) o.bytes(4, t.float_data.data(), t.float_data.size());
  if (!t.int32_data.empty()) o.packed(5, t.int32_data);
  for (const auto& s : t.string_data) o.bytes(6, s);
  if (!t.int64_data.empty()) o.packed(7, t.int64_data);
  if (t.name.has) o.bytes(8, t.name.value);
  const Placement* placed = o.placement(t);
  const bool inline_external = t.is_external() && !placed;
  if (!placed) {
    if (t.is_external()) o.blob(9, t.external_bytes);
    else if (t.has_raw_data) o.blob(9, t.raw_data);
  }
  if (t.double_data.size()) o.bytes(10, t.double_data.data(), t.double_data.size());
  if (!t.uint64_data.empty()) o.packed(11, t.uint64_data);
  if (t.doc_string.has) o.bytes(12, t.doc_string.value);
  if (placed) {
    o.external(t, *placed);
    o.varint(14, uint64_t(DataLocation::kExternal));
  } else if (!inline_external) {
    for (const auto& e : t.external_data) o.message(13, e);
    if (t.data_location.has) o.varint(14, uint64_t(int64_t(t.data_location.value)));
  }
  for (const auto& e : t.metadata_props) o.message(16, e);
  o.extra(t.extra);
}

template <class Out>
void emit(Out& o, const SparseTensor& s) {
  if (s.values) o.message(1, *s.values);
  if (s.indices) o.message(2, *s.indices);
  for (int64_t d : s.dims) o.varint(3, uint64_t(d));
  o.extra(s.extra);
}

template <class Out>
void emit(Out& o, const Graph& g);

template <class Out>
void emit(Out& o, const Attribute& a) {
  if (a.name.has) o.bytes(1, a.name.value);
  if (a.f.has) o.fixed32(2, a.f.value);
  if (a.i.has) o.varint(3, uint64_t(a.i.value));
  if (a.s.has) o.bytes(4, a.s.value);
  if (a.t) o.message(5, *a.t);
  if (a.g) o.message(6, *a.g);
  for (float f : a.floats) o.fixed32(7, f);
  for (int64_t i : a.ints) o.varint(8, uint64_t(i));
  for (const auto& s : a.strings) o.bytes(9, s);
  for (const auto& t : a.tensors) o.message(10, *t);
  for (const auto& g : a.graphs) o.message(11, *g);
  if (a.doc_string.has) o.bytes(13, a.doc_string.value);
  if (a.tp.has) o.bytes(14, a.tp.value);
  for (const auto& tp : a.type_protos) o.bytes(15, tp);
  if (a.type.has) o.varint(20, uint64_t(int64_t(a.type.value)));
  if (a.ref_attr_name.has) o.bytes(21, a.ref_attr_name.value);
  if (a.sparse_tensor) o.message(22, *a.sparse_tensor);
  for (const auto& s : a.sparse_tensors) o.message(23, *s);
  o.extra(a.extra);
}

const std::string kEmpty;
inline const std::string& value_name(const Value* v) { return v ? v->name : kEmpty; }

template <class Out>
void emit(Out& o, const Node& n) {
  for (const Value* v : n.inputs) o.bytes(1, value_name(v));
  for (const Value* v : n.outputs) o.bytes(2, value_name(v));
  if (n.name.has) o.bytes(3, n.name.value);
  if (n.op_type.has) o.bytes(4, n.op_type.value);
  for (const auto& a : n.attributes) o.message(5, a);
  if (n.doc_string.has) o.bytes(6, n.doc_string.value);
  if (n.domain.has) o.bytes(7, n.domain.value);
  if (n.overload.has) o.bytes(8, n.overload.value);
  for (const auto& e : n.metadata_props) o.message(9, e);
  o.extra(n.extra);
}

template <class Out>
void emit(Out& o, const Graph& g) {
  for (const auto& n : g.nodes) o.message(1, *n);
  if (g.name.has) o.bytes(2, g.name.value);
  for (const auto& t : g.initializers) o.message(5, *t);
  if (g.doc_string.has) o.bytes(10, g.doc_string.value);
  for (const auto& v : g.inputs) o.message(11, v);
  for (const auto& v : g.outputs) o.message(12, v);
  for (const auto& v : g.value_info) o.message(13, v);
  for (const auto& s : g.sparse_initializers) o.message(15, s);
  for (const auto& e : g.metadata_props) o.message(16, e);
  o.extra(g.extra);
}

template <class Out>
void emit(Out& o, const Function& f) {
  const Graph& body = *f.body;
  if (f.name.has) o.bytes(1, f.name.value);
  for (const auto& v : body.inputs) o.bytes(4, v.value ? v.value->name : v.name.value);
  for (const auto& v : body.outputs) o.bytes(5, v.value ? v.value->name : v.name.value);
  for (const auto& s : f.attribute) o.bytes(6, s);
  for (const auto& n : body.nodes) o.message(7, *n);
  if (f.doc_string.has) o.bytes(8, f.doc_string.value);
  for (const auto& x : f.opset_import) o.message(9, x);
  if (f.domain.has) o.bytes(10, f.domain.value);
  for (const auto& a : f.attribute_proto) o.message(11, a);
  for (const auto& v : body.value_info) o.message(12, v);
  if (f.overload.has) o.bytes(13, f.overload.value);
  for (const auto& e : f.metadata_props) o.message(14, e);
  o.extra(f.extra);
}

template <class Out>
void emit(Out& o, const TrainingInfo& t) {
  if (t.initialization) o.message(1, *t.initialization);
  if (t.algorithm) o.message(2, *t.algorithm);
  for (const auto& e : t.initialization_binding) o.message(3, e);
  for (const auto& e : t.update_binding) o.message(4, e);
  o.extra(t.extra);
}

template <class Out>
void emit(Out& o, const Model& m) {
  if (m.ir_version.has) o.varint(1, uint64_t(m.ir_version.value));
  if (m.producer_name.has) o.bytes(2, m.producer_name.value);
  if (m.producer_version.has) o.bytes(3, m.producer_version.value);
  if (m.domain.has) o.bytes(4, m.domain.value);
  if (m.model_version.has) o.varint(5, uint64_t(m.model_version.value));
  if (m.doc_string.has) o.bytes(6, m.doc_string.value);
  if (m.graph) o.message(7, *m.graph);
  for (const auto& x : m.opset_import) o.message(8, x);
  for (const auto& e : m.metadata_props) o.message(14, e);
  for (const auto& t : m.training_info) o.message(20, t);
  for (const auto& f : m.functions) o.message(25, *f);
  o.extra(m.extra);
}

template <class Out>
void emit_external(Out& o, const Tensor& t, const Plan& plan, const Placement& p);

// Computes sizes and caches them in each message.
class Counter {
 public:
  explicit Counter(const Plan* plan) : plan_(plan) {}
  uint64_t n = 0;

  void varint(uint32_t f, uint64_t v) { n += varint_size(make_tag(f, kVarint)) + varint_size(v); }
  void fixed32(uint32_t f, float) { n += varint_size(make_tag(f, kFixed32)) + 4; }
  void bytes(uint32_t f, const std::string& s) { len_field(f, s.size()); }
  void bytes(uint32_t f, const void*, uint64_t len) { len_field(f, len); }
  void blob(uint32_t f, const Blob& b) { len_field(f, b.length); }
  template <class T>
  void packed(uint32_t f, const std::vector<T>& xs) {
    uint64_t k = 0;
    for (T x : xs) k += varint_size(uint64_t(int64_t(x)));
    len_field(f, k);
  }
  void extra(const RawFields& raw) {
    for (const auto& r : raw) n += r.size();
  }
  template <class M>
  void message(uint32_t f, const M& m) {
    Counter c(plan_);
    emit(c, m);
    m.cached_size = c.n;
    len_field(f, c.n);
  }
  const Placement* placement(const Tensor& t) const {
    if (!plan_) return nullptr;
    auto it = plan_->placed.find(&t);
    return it == plan_->placed.end() ? nullptr : &it->second;
  }
  void external(const Tensor& t, const Placement& p) { emit_external(*this, t, *plan_, p); }

 private:
  void len_field(uint32_t f, uint64_t len) { n += varint_size(make_tag(f, kLen)) + varint_size(len) + len; }
  const Plan* plan_;
};

// Streams bytes; message sizes come from a prior Counter pass.
class Writer {
 public:
  Writer(Sink& sink, const Plan* plan) : sink_(sink), plan_(plan) {}

  void varint(uint32_t f, uint64_t v) {
    tag(f, kVarint);
    put(v);
  }
  void fixed32(uint32_t f, float x) {
    tag(f, kFixed32);
    sink_.write(&x, 4);
  }
  void bytes(uint32_t f, const std::string& s) { bytes(f, s.data(), s.size()); }
  void bytes(uint32_t f, const void* p, uint64_t len) {
    tag(f, kLen);
    put(len);
    sink_.write(p, len);
  }
  void blob(uint32_t f, const Blob& b) {
    tag(f, kLen);
    put(b.length);
    sink_.write_blob(b);
  }
  template <class T>
  void packed(uint32_t f, const std::vector<T>& xs) {
    uint64_t k = 0;
    for (T x : xs) k += varint_size(uint64_t(int64_t(x)));
    tag(f, kLen);
    put(k);
    for (T x : xs) put(uint64_t(int64_t(x)));
  }
  void extra(const RawFields& raw) {
    for (const auto& r : raw) sink_.write(r.data(), r.size());
  }
  template <class M>
  void message(uint32_t f, const M& m) {
    tag(f, kLen);
    put(m.cached_size);
    emit(*this, m);
  }
  const Placement* placement(const Tensor& t) const {
    if (!plan_) return nullptr;
    auto it = plan_->placed.find(&t);
    return it == plan_->placed.end() ? nullptr : &it->second;
  }
  void external(const Tensor& t, const Placement& p) { emit_external(*this, t, *plan_, p); }

 private:
  void tag(uint32_t f, WireType w) { put(make_tag(f, w)); }
  void put(uint64_t v) {
    uint8_t b[10];
    sink_.write(b, put_varint(b, v));
  }
  Sink& sink_;
  const Plan* plan_;
};

// External-data entries of a placed tensor: location/offset/length rewritten,
// any other keys (checksum, ...) kept.
template <class Out>
void emit_external(Out& o, const Tensor& t, const Plan& plan, const Placement& p) {
  Entry fresh[3];
  fresh[0].key.set("location");
  fresh[0].value.set(plan.files[p.file]);
  fresh[1].key.set("offset");
  fresh[1].value.set(std::to_string(p.offset));
  fresh[2].key.set("length");
  fresh[2].value.set(std::to_string(t.raw_payload()->length));
  for (Entry& e : fresh) {
    Counter c(nullptr);
    emit(c, e);
    e.cached_size = c.n;
    o.message(13, e);
  }
  for (const auto& e : t.external_data) {
    const std::string& k = e.key.value;
    if (k != "location" && k != "offset" && k != "length") o.message(13, e);
  }
}

// ---------------------------------------------------------------- planning

uint64_t model_size(const Model& m, const Plan* plan) {
  Counter c(plan);
  emit(c, m);
  m.cached_size = c.n;
  return c.n;
}

std::string base_name(const std::string& path) {
  auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}
std::string dir_name(const std::string& path) {
  auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Tensors read from one big external file that the output keeps whole (most
// of its bytes still referenced) stay at their offsets, so that file is
// written as one clone or copy. Small files (onnx's one-file-per-tensor
// layout) and the rest are laid out afresh in one file.
constexpr uint64_t kWholeCopyMinBytes = 16 << 20;
constexpr uint64_t kNewTensorExternalMinBytes = 1 << 20;

std::unordered_map<const Buffer*, bool> whole_sources(const std::vector<const Tensor*>& external, const SaveOptions& opt) {
  std::unordered_map<const Buffer*, uint64_t> referenced;
  for (const Tensor* t : external)
    if (t->is_external() && t->external_bytes.buffer) referenced[t->external_bytes.buffer.get()] += t->external_bytes.length;
  std::unordered_map<const Buffer*, bool> whole;
  for (auto& [buf, bytes] : referenced)
    whole[buf] = opt.max_file_size == 0 && buf->size() >= kWholeCopyMinBytes && bytes * 10 >= buf->size() * 9;
  return whole;
}

Plan make_plan(const Model& m, ExternalMode mode, const SaveOptions& opt, const std::string& path) {
  Plan plan;
  if (mode == ExternalMode::kNone) return plan;
  const std::string location = opt.location.empty() ? base_name(path) + ".data" : opt.location;
  auto new_file = [&](const Buffer* whole) {
    plan.files.push_back(plan.files.empty() ? location : location + "." + std::to_string(plan.files.size()));
    plan.order.emplace_back();
    plan.whole_copy_of.push_back(whole);
  };

  // Keeping tensors where they were, a model with external data also sends
  // large new tensors there (a folded weight): its weights stay out of the
  // protobuf, as its author chose.
  const std::vector<Tensor*> tensors = m.all_tensors();
  const bool has_external = std::any_of(tensors.begin(), tensors.end(), [](const Tensor* t) { return t->is_external(); });
  auto goes_external = [&](const Tensor* t, uint64_t length) {
    if (t->is_external()) return true;
    if (mode == ExternalMode::kAll) return length >= opt.size_threshold;
    return has_external && length >= std::max<uint64_t>(opt.size_threshold, kNewTensorExternalMinBytes);
  };
  std::vector<const Tensor*> external;
  for (const Tensor* t : tensors) {
    const Blob* payload = t->raw_payload();
    if (payload && goes_external(t, payload->length)) external.push_back(t);
  }
  const auto whole = whole_sources(external, opt);
  std::unordered_map<const Buffer*, size_t> file_of_source;
  std::vector<const Tensor*> fresh;
  for (const Tensor* t : external) {
    const Buffer* src = t->is_external() ? t->external_bytes.buffer.get() : nullptr;
    if (!src || !whole.at(src)) {
      fresh.push_back(t);
      continue;
    }
    auto [it, added] = file_of_source.emplace(src, plan.files.size());
    if (added) new_file(src);
    plan.placed.emplace(t, Placement{it->second, t->external_bytes.offset});
    plan.order[it->second].push_back(t);
    plan.external_bytes += t->external_bytes.length;
  }

  uint64_t size = 0;
  bool open = false;  // a composed file is being filled
  for (const Tensor* t : fresh) {
    const uint64_t length = t->raw_payload()->length;
    const uint64_t align = length >= opt.align_threshold ? std::max<uint64_t>(opt.align, 1) : 16;
    auto aligned = [align](uint64_t end) { return (end + align - 1) / align * align; };
    if (!open || (opt.max_file_size && size > 0 && aligned(size) + length > opt.max_file_size)) {
      new_file(nullptr);
      size = 0;
      open = true;
    }
    uint64_t offset = aligned(size);
    plan.placed.emplace(t, Placement{plan.files.size() - 1, offset});
    plan.order.back().push_back(t);
    size = offset + length;
    plan.external_bytes += length;
  }
  return plan;
}

std::string temp_name(const std::string& dir, const std::string& name) {
  static std::atomic<uint64_t> counter{0};
  return dir + "/." + name + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

// A data file is a clone or one kernel-side copy of its source when it keeps
// that file whole; a hard link would be faster still, but onnx refuses to read
// external data through a file with several links.
void write_data_file(const Plan& plan, size_t file, const std::string& tmp_path) {
  if (const Buffer* source = plan.whole_copy_of[file]) {
    FileSink sink(tmp_path);
    if (sink.write_whole(source)) {
      sink.close();
      return;
    }
  }  // else the source was replaced since load: compose from the mapped bytes
  std::vector<const Tensor*> by_offset = plan.order[file];
  std::sort(by_offset.begin(), by_offset.end(),
            [&](const Tensor* a, const Tensor* b) { return plan.placed.at(a).offset < plan.placed.at(b).offset; });
  FileSink sink(tmp_path);
  uint64_t pos = 0;
  static const char kZeros[4096] = {};
  for (const Tensor* t : by_offset) {
    uint64_t offset = plan.placed.at(t).offset;
    Blob b = *t->raw_payload();
    if (offset < pos) {  // tensors sharing bytes in their source file: write what is not there yet
      uint64_t done = std::min(pos - offset, b.length);
      b.offset += done;
      b.length -= done;
      offset = pos;
    }
    while (pos < offset) {
      uint64_t k = std::min<uint64_t>(offset - pos, sizeof(kZeros));
      sink.write(kZeros, k);
      pos += k;
    }
    sink.write_blob(b);
    pos += b.length;
  }
  sink.close();
}

// Moves each temporary file into place, data files first and the model last.
// A file it replaces is kept under a backup name (a hard link) until all
// renames succeeded, so a failure halfway restores the previous output.
void commit_renames(const std::vector<std::pair<std::string, std::string>>& renames) {
  std::vector<std::pair<std::string, std::string>> done;  // (target, backup or "")
  auto roll_back = [&] {
    for (auto it = done.rbegin(); it != done.rend(); ++it) {
      if (!it->second.empty()) ::rename(it->second.c_str(), it->first.c_str());
      else ::unlink(it->first.c_str());
    }
    for (const auto& r : renames) ::unlink(r.first.c_str());
  };
  for (const auto& [tmp, target] : renames) {
    std::string backup = tmp + ".previous";
    if (::link(target.c_str(), backup.c_str()) != 0) backup.clear();  // no old file, or no hard links here
    if (::rename(tmp.c_str(), target.c_str()) != 0) {
      int err = errno;
      if (!backup.empty()) ::unlink(backup.c_str());
      roll_back();
      throw ModelError("cannot move " + tmp + " to " + target + ": " + std::strerror(err));
    }
    done.emplace_back(target, backup);
  }
  for (const auto& d : done)
    if (!d.second.empty()) ::unlink(d.second.c_str());
}

}  // namespace

template <class M>
std::string serialize_one(const M& message) {
  Counter c(nullptr);
  emit(c, message);
  std::string out;
  out.reserve(c.n);
  StringSink sink(out);
  Writer w(sink, nullptr);
  emit(w, message);
  return out;
}

std::string serialize_tensor(const Tensor& t) { return serialize_one(t); }
std::string serialize_attribute(const Attribute& a) { return serialize_one(a); }

std::string serialize(const Model& m) {
  uint64_t n = model_size(m, nullptr);
  if (n > kProtobufLimit)
    throw ModelError("the model is " + std::to_string(n) + " bytes inline, past protobuf's 2 GB limit; save it with external data instead");
  std::string out;
  out.reserve(n);
  StringSink sink(out);
  Writer w(sink, nullptr);
  emit(w, m);
  return out;
}

std::string serialize_weightless(const Model& m, uint64_t threshold) {
  Plan plan;
  plan.files.push_back(kWeightlessLocation);
  // The offset is the tensor's index in all_tensors(), so that a copy rewritten
  // elsewhere can take its bytes back (LoadOptions::weights_from).
  const std::vector<Tensor*> tensors = m.all_tensors();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Blob* payload = tensors[i]->raw_payload();
    if (payload && payload->length > threshold) plan.placed[tensors[i]] = Placement{0, i};
  }
  uint64_t n = model_size(m, &plan);
  std::string out;
  out.reserve(n);
  StringSink sink(out);
  Writer w(sink, &plan);
  emit(w, m);
  return out;
}

SaveResult save_file(const Model& m, const std::string& path, const SaveOptions& opt) {
  SaveResult result;
  const std::string dir = dir_name(path);
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw ModelError("cannot save " + path + ": folder '" + dir + "' does not exist");
  if (!opt.location.empty() && (opt.location[0] == '/' || opt.location.find("..") != std::string::npos ||
                                opt.location.find('/') != std::string::npos))
    throw ModelError("external data location '" + opt.location + "' must be a plain file name beside the model");

  ExternalMode mode = opt.mode;
  Plan plan = make_plan(m, mode, opt, path);
  uint64_t size = model_size(m, &plan);
  if (size > kProtobufLimit && mode == ExternalMode::kKeep) {
    mode = ExternalMode::kAll;
    plan = make_plan(m, mode, opt, path);
    size = model_size(m, &plan);
    result.switched_to_external = true;
  }
  if (size > kProtobufLimit)
    throw ModelError("cannot save " + path + ": the model is " + std::to_string(size) +
                     " bytes, past protobuf's 2 GB limit; save with external data");

  // Everything goes to temporary names first; renames happen only once all
  // files are complete, so a failure leaves no half-written output behind.
  std::vector<std::pair<std::string, std::string>> renames;
  auto cleanup = [&] {
    for (auto& r : renames) ::unlink(r.first.c_str());
  };
  try {
    // A source may be one of the files replaced below: map every source file
    // first, so its old contents stay readable after the rename (and a source
    // that changed on disk since load fails here, before anything is written).
    for (const Tensor* t : m.all_tensors())
      if (const Blob* b = t->raw_payload(); b && b->buffer && b->length) b->buffer->data();
    for (size_t i = 0; i < plan.files.size(); ++i) {
      std::string tmp = temp_name(dir, plan.files[i]);
      renames.emplace_back(tmp, dir + "/" + plan.files[i]);
      write_data_file(plan, i, tmp);
    }
    std::string tmp = temp_name(dir, base_name(path));
    renames.emplace_back(tmp, path);
    FileSink sink(tmp);
    Writer w(sink, &plan);
    emit(w, m);
    sink.close();
  } catch (...) {
    cleanup();
    throw;
  }
  commit_renames(renames);
  result.model_bytes = size;
  result.data_files = plan.files;
  result.external_bytes = plan.external_bytes;
  return result;
}

}  // namespace pyonnxopt::proto
