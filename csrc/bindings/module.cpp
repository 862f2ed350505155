// pyonnxopt._core: the only file that includes pybind11. Python sees the IR
// through cheap handles that keep their model alive; tensor bytes cross as
// read-only numpy views over the mapped file, without a copy.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <set>
#include <system_error>

#include "fold/kernels.h"
#include "ir/model.h"
#include "match/pattern.h"
#include "passes/bypass.h"
#include "passes/known_values.h"
#include "passes/pass.h"
#include "proto/reader.h"
#include "proto/type_info.h"
#include "proto/wire.h"
#include "proto/writer.h"

namespace py = pybind11;
using namespace pyonnxopt;

namespace {

using ModelPtr = std::shared_ptr<ir::Model>;

// Handles: a model reference plus a pointer into it. Removed nodes and values
// stay allocated until the model dies, so a handle never dangles.
template <class T>
struct Ref {
  ModelPtr model;
  T* ptr;
  bool operator==(const Ref& o) const { return ptr == o.ptr; }
};
using GraphRef = Ref<ir::Graph>;
using NodeRef = Ref<ir::Node>;
using ValueRef = Ref<ir::Value>;
using TensorRef = Ref<ir::Tensor>;
using FunctionRef = Ref<ir::Function>;

template <class T>
py::object ref_or_none(const ModelPtr& m, T* p) {
  if (!p) return py::none();
  return py::cast(Ref<T>{m, p});
}

template <class T>
std::vector<Ref<T>> refs(const ModelPtr& m, const std::vector<T*>& xs) {
  std::vector<Ref<T>> out;
  out.reserve(xs.size());
  for (T* x : xs) out.push_back(Ref<T>{m, x});
  return out;
}

// Names are UTF-8 by the spec, but a file may hold any bytes: decode them so
// that reading a name never raises (undecodable bytes become surrogates).
py::str text(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "surrogateescape");
  if (!o) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

py::object opt_str(const ir::Opt<std::string>& o) { return o.has ? py::object(text(o.value)) : py::none(); }
py::object opt_int(const ir::Opt<int64_t>& o) { return o.has ? py::cast(o.value) : py::none(); }

py::dict entries(const std::vector<ir::Entry>& es) {
  py::dict d;
  for (const auto& e : es) d[text(e.key.value)] = text(e.value.value);
  return d;
}

const char* numpy_dtype(int32_t t) {
  switch (t) {
    case 1: return "<f4";
    case 2: return "u1";
    case 3: return "i1";
    case 4: return "<u2";
    case 5: return "<i2";
    case 6: return "<i4";
    case 7: return "<i8";
    case 9: return "?";
    case 10: return "<f2";
    case 11: return "<f8";
    case 12: return "<u4";
    case 13: return "<u8";
    case 14: return "<c8";
    case 15: return "<c16";
    default: return nullptr;
  }
}

// A read-only numpy view over a Blob; the capsule keeps the buffer alive.
// numpy refuses dims whose nonzero ones multiply past what it can address,
// an empty array too ([0, 2^56] say): a malformed file's, said as ours.
void check_numpy_dims(const std::vector<int64_t>& dims, uint64_t itemsize) {
  uint64_t bytes = itemsize;
  for (int64_t d : dims) {
    if (d < 0 || (d && __builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes)) ||
        bytes > static_cast<uint64_t>(PY_SSIZE_T_MAX))
      throw ir::ModelError("tensor dims multiply past what an array can hold (" + std::to_string(d) + " among them)");
  }
}

py::array blob_array(const ir::Blob& blob, const char* dtype, const std::vector<int64_t>& dims) {
  py::dtype dt(dtype);
  check_numpy_dims(dims, static_cast<uint64_t>(dt.itemsize()));
  uint64_t numel = 1;
  for (int64_t d : dims) numel *= static_cast<uint64_t>(d);
  // Never let numpy read past the bytes: load checks this, set_raw too.
  if (blob.length != numel * static_cast<uint64_t>(dt.itemsize()))
    throw ir::ModelError("tensor has " + std::to_string(blob.length) + " bytes of data, its dims need " +
                         std::to_string(numel * static_cast<uint64_t>(dt.itemsize())));
  std::vector<py::ssize_t> shape(dims.begin(), dims.end());
  auto* keep = new std::shared_ptr<const ir::Buffer>(blob.buffer);
  py::capsule base(keep, [](void* p) { delete static_cast<std::shared_ptr<const ir::Buffer>*>(p); });
  const void* data = blob.data();
  static const uint64_t kEmpty = 0;
  py::array arr(dt, shape, data ? data : &kEmpty, base);
  py::detail::array_proxy(arr.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return arr;
}

// The tensor as numpy when it maps onto a numpy dtype; None otherwise (the
// Python layer then converts through onnx.numpy_helper).
py::object tensor_numpy(const ir::Tensor& t) {
  const char* dt = numpy_dtype(t.data_type.value);
  if (!dt || t.segment.has) return py::none();
  check_numpy_dims(t.dims, static_cast<uint64_t>(py::dtype(dt).itemsize()));
  uint64_t numel = 1;
  for (int64_t d : t.dims) numel *= static_cast<uint64_t>(d);
  if (const ir::Blob* b = t.raw_payload()) return blob_array(*b, dt, t.dims);
  auto copy_of = [&](const auto& vec, const char* src_dtype) -> py::object {
    if (vec.size() != numel) return py::none();
    py::array a(py::dtype(src_dtype), {static_cast<py::ssize_t>(vec.size())}, vec.data());
    return a.attr("astype")(py::dtype(dt)).attr("reshape")(py::cast(t.dims));
  };
  switch (t.data_type.value) {
    case 1: case 14:
      if (t.float_data.size() == 0 && numel) return py::none();
      {
        std::string bytes(reinterpret_cast<const char*>(t.float_data.data()), t.float_data.size());
        return blob_array(ir::Blob::owned(std::move(bytes)), dt, t.dims);
      }
    case 11: case 15:
      if (t.double_data.size() == 0 && numel) return py::none();
      {
        std::string bytes(reinterpret_cast<const char*>(t.double_data.data()), t.double_data.size());
        return blob_array(ir::Blob::owned(std::move(bytes)), dt, t.dims);
      }
    case 7: return copy_of(t.int64_data, "<i8");
    case 12: case 13: return copy_of(t.uint64_data, "<u8");
    case 2: case 3: case 4: case 5: case 6: case 9: return copy_of(t.int32_data, "<i4");
    case 10: {
      // float16 in int32_data holds the bit patterns.
      if (t.int32_data.size() != numel) return py::none();
      py::array a(py::dtype("<i4"), {static_cast<py::ssize_t>(numel)}, t.int32_data.data());
      return a.attr("astype")(py::dtype("<u2")).attr("view")(py::dtype(dt)).attr("reshape")(py::cast(t.dims));
    }
    default: return py::none();
  }
}

py::object attribute_value(const ModelPtr& m, const ir::Attribute& a) {
  if (a.ref_attr_name.has) return py::make_tuple("ref", a.ref_attr_name.value);
  switch (static_cast<ir::AttrType>(a.type.value)) {
    case ir::AttrType::kFloat: return py::cast(a.f.value);
    case ir::AttrType::kInt: return py::cast(a.i.value);
    case ir::AttrType::kString: return py::bytes(a.s.value);
    case ir::AttrType::kTensor: return ref_or_none(m, a.t.get());
    case ir::AttrType::kGraph: return ref_or_none(m, a.g.get());
    case ir::AttrType::kFloats: return py::cast(a.floats);
    case ir::AttrType::kInts: return py::cast(a.ints);
    case ir::AttrType::kStrings: {
      py::list l;
      for (const auto& s : a.strings) l.append(py::bytes(s));
      return l;
    }
    case ir::AttrType::kTensors: {
      py::list l;
      for (const auto& t : a.tensors) l.append(TensorRef{m, t.get()});
      return l;
    }
    case ir::AttrType::kGraphs: {
      py::list l;
      for (const auto& g : a.graphs) l.append(GraphRef{m, g.get()});
      return l;
    }
    default: return py::none();
  }
}

// The bytes of `data`, checked to hold exactly `dims` elements of `data_type`.
std::string checked_data(const char* what, int32_t data_type, const std::vector<int64_t>& dims, const py::bytes& data) {
  std::string bytes = data;
  uint64_t numel = 1;
  for (int64_t d : dims) {
    if (d < 0) throw py::value_error("negative dimension");
    numel *= static_cast<uint64_t>(d);
  }
  int64_t want = ir::storage_bytes(data_type, numel);
  if (want < 0 || static_cast<uint64_t>(want) != bytes.size())
    throw py::value_error(std::string(what) + ": " + std::to_string(bytes.size()) + " bytes do not hold " +
                          std::to_string(numel) + " elements of " + ir::dtype_name(data_type));
  return bytes;
}

py::dict type_dict(const ir::ValueInfo* info) {
  py::dict d;
  if (!info || !info->type.has) return d;
  proto::TypeDesc t;
  try {
    t = proto::decode_type(info->type.value);
  } catch (const proto::ParseError& e) {  // checked at load; only a bug gets here
    throw ir::ModelError(std::string("value '") + info->name.value + "' has a malformed type: " + e.what());
  }
  d["kind"] = t.kind;
  d["text"] = text(t.text);
  if (t.kind == "tensor" || t.kind == "sparse_tensor") {
    d["elem_type"] = t.elem_type;
    if (t.has_shape) {
      py::list dims;
      for (const auto& dim : t.dims) {
        if (dim.has_value) dims.append(dim.value);
        else if (!dim.param.empty()) dims.append(text(dim.param));
        else dims.append(py::none());
      }
      d["shape"] = dims;
    } else {
      d["shape"] = py::none();
    }
  }
  return d;
}

// A node of `g` with its op and inputs set, not yet in the graph.
ir::Node* unlinked_node(ir::Graph& g, const std::string& op_type, const std::vector<std::optional<ValueRef>>& inputs,
                        const std::string& name, const std::string& domain) {
  ir::Node* node = g.new_node();
  node->op_type.set(op_type);
  if (!name.empty()) node->name.set(name);
  if (!domain.empty()) node->domain.set(domain);
  for (const auto& v : inputs) node->inputs.push_back(v ? v->ptr : nullptr);
  return node;
}

// A Python value as an attribute: int/bool, float, str/bytes, a list of
// ints, floats or strs, or ("tensor", data_type, dims, bytes).
ir::Attribute make_attribute(const std::string& name, const py::handle& value) {
  ir::Attribute a;
  a.name.set(name);
  auto set_type = [&](ir::AttrType t) { a.type.set(int32_t(t)); };
  if (py::isinstance<py::bool_>(value) || py::isinstance<py::int_>(value)) {
    set_type(ir::AttrType::kInt);
    a.i.set(value.cast<int64_t>());
  } else if (py::isinstance<py::float_>(value)) {
    set_type(ir::AttrType::kFloat);
    a.f.set(value.cast<float>());
  } else if (py::isinstance<py::str>(value) || py::isinstance<py::bytes>(value)) {
    set_type(ir::AttrType::kString);
    a.s.set(value.cast<std::string>());
  } else if (py::isinstance<py::tuple>(value) && py::len(value) == 4 && py::isinstance<py::str>(value[py::int_(0)]) &&
             value[py::int_(0)].cast<std::string>() == "tensor") {
    const auto data_type = value[py::int_(1)].cast<int32_t>();
    auto dims = value[py::int_(2)].cast<std::vector<int64_t>>();
    std::string bytes = checked_data("set_attribute", data_type, dims, value[py::int_(3)].cast<py::bytes>());
    set_type(ir::AttrType::kTensor);
    a.t = std::make_unique<ir::Tensor>();
    a.t->dims = std::move(dims);
    a.t->data_type.set(data_type);
    a.t->set_raw(ir::Blob::owned(std::move(bytes)));
  } else if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
    bool all_int = true, all_str = true;
    for (const auto& x : value) {
      all_int = all_int && (py::isinstance<py::int_>(x) || py::isinstance<py::bool_>(x));
      all_str = all_str && py::isinstance<py::str>(x);
    }
    if (all_int) {
      set_type(ir::AttrType::kInts);
      for (const auto& x : value) a.ints.push_back(x.cast<int64_t>());
    } else if (all_str) {
      set_type(ir::AttrType::kStrings);
      for (const auto& x : value) a.strings.push_back(x.cast<std::string>());
    } else {
      set_type(ir::AttrType::kFloats);
      for (const auto& x : value) a.floats.push_back(x.cast<float>());
    }
  } else {
    throw py::type_error("attribute " + name + ": cannot store a " + std::string(py::str(py::type::of(value))));
  }
  return a;
}

// A copy of a plain attribute (subgraphs and sparse tensors are refused).
ir::Attribute copy_attribute(const ir::Attribute& a, const ir::Node& owner) {
  if (a.g || !a.graphs.empty() || a.sparse_tensor || !a.sparse_tensors.empty())
    throw py::value_error("copy_attributes: " + owner.display_name() + " attribute " + a.name.value +
                          " holds a subgraph or sparse tensor");
  ir::Attribute c;
  c.name = a.name;
  c.ref_attr_name = a.ref_attr_name;
  c.doc_string = a.doc_string;
  c.type = a.type;
  c.f = a.f;
  c.i = a.i;
  c.s = a.s;
  if (a.t) c.t = std::make_unique<ir::Tensor>(*a.t);
  c.tp = a.tp;
  c.floats = a.floats;
  c.ints = a.ints;
  c.strings = a.strings;
  for (const auto& t : a.tensors) c.tensors.push_back(std::make_unique<ir::Tensor>(*t));
  c.type_protos = a.type_protos;
  c.extra = a.extra;
  return c;
}

// A pattern from the list of element dicts that pyonnxopt/fusion/pattern.py builds.
match::Pattern make_pattern(const py::list& elements) {
  match::Pattern p;
  for (const auto& h : elements) {
    const py::dict d = h.cast<py::dict>();
    match::Element& e = p.elements.emplace_back();
    auto get = [&](const char* key) { return d.contains(key) ? py::object(d[key]) : py::object(py::none()); };
    e.kind = d["kind"].cast<std::string>() == "op" ? match::Element::Kind::kOp : match::Element::Kind::kValue;
    e.name = d["name"].cast<std::string>();
    if (!get("op_types").is_none()) e.op_types = d["op_types"].cast<std::vector<std::string>>();
    if (!get("domain").is_none()) e.domain = d["domain"].cast<std::string>();
    if (!get("inputs").is_none()) e.inputs = d["inputs"].cast<std::vector<int>>();
    if (!get("commutative").is_none()) e.commutative = d["commutative"].cast<bool>();
    if (!get("exclusive").is_none()) e.exclusive = d["exclusive"].cast<bool>();
    if (!get("output_index").is_none()) e.output_index = d["output_index"].cast<int>();
    if (!get("constant").is_none()) e.constant = d["constant"].cast<bool>();
    if (!get("optional").is_none()) e.optional = d["optional"].cast<bool>();
    if (!get("dtype").is_none()) e.dtype = d["dtype"].cast<int32_t>();
    if (!get("rank").is_none()) e.rank = d["rank"].cast<int>();
    if (!get("scalar").is_none()) e.scalar = d["scalar"].cast<bool>();
    if (!get("value").is_none()) {
      e.has_value = true;
      e.value = d["value"].cast<double>();
    }
    if (!get("attrs").is_none()) {
      for (const auto& ah : d["attrs"].cast<py::list>()) {
        const py::dict ad = ah.cast<py::dict>();
        match::AttrConstraint& c = e.attrs.emplace_back();
        c.name = ad["name"].cast<std::string>();
        const ir::Attribute a = make_attribute(c.name, ad["value"]);
        c.type = ir::AttrType(a.type.value);
        if (a.i.has) c.ints = {a.i.value};
        if (a.f.has) c.floats = {double(a.f.value)};
        if (a.s.has) c.s = a.s.value;
        if (c.type == ir::AttrType::kInts) c.ints = a.ints;
        if (c.type == ir::AttrType::kFloats) c.floats.assign(a.floats.begin(), a.floats.end());
        if (c.type == ir::AttrType::kStrings || c.type == ir::AttrType::kTensor)
          throw py::value_error("pattern attribute " + c.name + ": only ints, floats, strings and int/float lists");
        c.absent_ok = ad.contains("absent_ok") && ad["absent_ok"].cast<bool>();
      }
    }
  }
  std::string why = p.validate();
  if (!why.empty()) throw py::value_error("pattern: " + why);
  return p;
}

proto::LoadOptions load_options(const std::string& base_dir, bool allow_outside) {
  proto::LoadOptions o;
  o.base_dir = base_dir;
  o.allow_external_outside = allow_outside;
  return o;
}

// A rule's closest near misses over its variants (Graph.find_matches).
struct NearMisses {
  ModelPtr model;
  match::NearMissBook book;
};

// Each match's bindings in element order: Nodes for ops, Values (or None) for values.
py::list bindings_of(const GraphRef& g, const match::Pattern& p, const std::vector<match::Match>& found) {
  py::list matches;
  for (const auto& m : found) {
    py::list bound;
    for (size_t e = 0; e < p.elements.size(); ++e) {
      if (p.elements[e].kind == match::Element::Kind::kOp)
        bound.append(NodeRef{g.model, m.nodes[e]});
      else
        bound.append(ref_or_none(g.model, m.values[e]));
    }
    matches.append(bound);
  }
  return matches;
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "pyonnxopt native core: ONNX wire-format reader/writer and graph IR";

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ir::ModelError& e) {
      py::object cls = py::module_::import("pyonnxopt.errors").attr("ModelError");
      const std::string msg = e.what();
      PyObject* m = PyUnicode_DecodeUTF8(msg.data(), static_cast<Py_ssize_t>(msg.size()), "replace");
      PyErr_SetObject(cls.ptr(), m);
      Py_XDECREF(m);
    } catch (const std::system_error& e) {  // a file changed or vanished under a loaded model
      PyErr_SetString(PyExc_OSError, e.what());
    }
  });

  py::class_<ir::Model, ModelPtr>(m, "Model")
      .def_property(
          "ir_version", [](const ir::Model& x) { return opt_int(x.ir_version); },
          [](ir::Model& x, int64_t v) { x.ir_version.set(v); })
      .def_property_readonly("model_version", [](const ir::Model& x) { return opt_int(x.model_version); })
      .def_property_readonly("producer_name", [](const ir::Model& x) { return opt_str(x.producer_name); })
      .def_property_readonly("producer_version", [](const ir::Model& x) { return opt_str(x.producer_version); })
      .def_property_readonly("domain", [](const ir::Model& x) { return opt_str(x.domain); })
      .def_property_readonly("doc_string", [](const ir::Model& x) { return opt_str(x.doc_string); })
      .def_property_readonly("metadata_props", [](const ir::Model& x) { return entries(x.metadata_props); })
      .def_property_readonly("opset_imports",
                             [](const ir::Model& x) {
                               std::vector<std::pair<std::string, int64_t>> out;
                               for (const auto& o : x.opset_import) out.emplace_back(o.domain.value, o.version.value);
                               py::list l;
                               for (auto& [d, v] : out) l.append(py::make_tuple(text(d), v));
                               return l;
                             })
      .def("set_opset_import",
           [](ir::Model& x, const std::string& domain, int64_t version) {
             for (auto& o : x.opset_import)
               if (o.domain.value == domain) {
                 o.version.set(version);
                 return;
               }
             ir::OpsetId& o = x.opset_import.emplace_back();
             o.domain.set(domain);
             o.version.set(version);
           },
           "Imports `domain` at `version` (replacing the version it had).")
      .def_property_readonly("path", [](const ir::Model& x) { return text(x.path); })
      .def_property_readonly("base_dir", [](const ir::Model& x) { return text(x.base_dir); })
      .def_property_readonly("graph", [](const ModelPtr& x) { return ref_or_none(x, x->graph.get()); })
      .def_property_readonly("functions",
                             [](const ModelPtr& x) {
                               std::vector<FunctionRef> out;
                               for (auto& f : x->functions) out.push_back(FunctionRef{x, f.get()});
                               return out;
                             })
      .def_property_readonly("training_info_count", [](const ir::Model& x) { return x.training_info.size(); })
      .def("all_graphs", [](const ModelPtr& x) { return refs(x, x->all_graphs()); },
           "Every graph: main, nested subgraphs, function bodies, training graphs.")
      .def("all_tensors", [](const ModelPtr& x) { return refs(x, x->all_tensors()); },
           "Every tensor: initializers, sparse parts, attribute tensors.")
      .def("external_files",
           [](const ir::Model& x) {
             std::set<std::string> files;
             for (const ir::Tensor* t : x.all_tensors()) {
               if (!t->is_external()) continue;
               if (auto* f = dynamic_cast<const ir::MappedFile*>(t->external_bytes.buffer.get())) files.insert(f->path());
             }
             return std::vector<std::string>(files.begin(), files.end());
           })
      .def("check_invariants", [](const ir::Model& x) { return ir::check_invariants(x); })
      .def(
          "run_pass",
          [](ir::Model& x, const std::string& name, uint64_t fold_size_limit, bool allow_lossy,
             bool remove_training_residue) {
            const passes::Pass* p = passes::find(name);
            if (!p) throw py::key_error("no native pass '" + name + "'");
            passes::PassOptions options;
            options.fold_size_limit = fold_size_limit;
            options.allow_lossy = allow_lossy;
            options.remove_training_residue = remove_training_residue;
            passes::PassStats st;
            {
              py::gil_scoped_release nogil;
              st = p->run(x, options);
            }
            py::dict d;
            d["nodes_removed"] = st.nodes_removed;
            d["nodes_added"] = st.nodes_added;
            d["initializers_removed"] = st.initializers_removed;
            d["value_info_removed"] = st.value_info_removed;
            d["functions_removed"] = st.functions_removed;
            py::list removed;
            for (const auto& r : st.removed) removed.append(text(r));
            d["removed"] = removed;
            py::list refused;
            for (const auto& r : st.refused) refused.append(text(r));
            d["refused"] = refused;
            py::list rewrites;
            for (const auto& r : st.rewrites) {
              py::list consumed, produced;
              for (const auto& c : r.consumed) consumed.append(text(c));
              for (const auto& c : r.produced) produced.append(text(c));
              py::dict rec;
              rec["what"] = text(r.what);
              rec["consumed"] = consumed;
              rec["produced"] = produced;
              rewrites.append(rec);
            }
            d["rewrites"] = rewrites;
            d["modified"] = st.modified();
            return d;
          },
          py::arg("name"), py::arg("fold_size_limit") = uint64_t(1) << 20, py::arg("allow_lossy") = false,
          py::arg("remove_training_residue") = false, "Runs one native pass with the pipeline's options; returns what it changed.")
      .def("serialize_weightless",
           [](const ir::Model& x, uint64_t threshold) {
             std::string s;
             {
               py::gil_scoped_release nogil;
               s = proto::serialize_weightless(x, threshold);
             }
             return py::bytes(s);
           },
           py::arg("threshold") = 1024,
           "The model with tensors over `threshold` bytes as references to a file that does not exist (for shape inference).")
      .def("serialize",
           [](const ir::Model& x) {
             std::string s;
             {
               py::gil_scoped_release nogil;
               s = proto::serialize(x);
             }
             return py::bytes(s);
           })
      .def(
          "save",
          [](const ir::Model& x, const std::string& path, const std::string& mode, const std::string& location,
             uint64_t size_threshold, uint64_t align, uint64_t align_threshold, uint64_t max_file_size) {
            proto::SaveOptions o;
            if (mode == "keep") o.mode = proto::ExternalMode::kKeep;
            else if (mode == "all") o.mode = proto::ExternalMode::kAll;
            else if (mode == "none") o.mode = proto::ExternalMode::kNone;
            else throw py::value_error("mode must be 'keep', 'all' or 'none'");
            o.location = location;
            o.size_threshold = size_threshold;
            o.align = align;
            o.align_threshold = align_threshold;
            o.max_file_size = max_file_size;
            proto::SaveResult r;
            {
              py::gil_scoped_release nogil;
              r = proto::save_file(x, path, o);
            }
            py::dict d;
            d["model_bytes"] = r.model_bytes;
            d["data_files"] = r.data_files;
            d["external_bytes"] = r.external_bytes;
            d["switched_to_external"] = r.switched_to_external;
            return d;
          },
          py::arg("path"), py::arg("mode") = "keep", py::arg("location") = "", py::arg("size_threshold") = 1024,
          py::arg("align") = 4096, py::arg("align_threshold") = 1 << 20, py::arg("max_file_size") = 0);

  py::class_<NearMisses>(m, "NearMisses")
      .def(py::init<>())
      .def("__len__", [](const NearMisses& n) { return n.book.entries.size(); })
      .def("items",
           [](const NearMisses& n) {
             py::list out;
             for (const auto& e : n.book.entries) out.append(py::make_tuple(NodeRef{n.model, e.anchor}, text(e.reason)));
             return out;
           },
           "(root node, reason) for each root with a near miss, in the order they came.");
  py::class_<GraphRef>(m, "Graph")
      .def("__eq__", &GraphRef::operator==)
      .def("__hash__", [](const GraphRef& g) { return std::hash<const void*>()(g.ptr); })
      .def_property_readonly("name", [](const GraphRef& g) { return text(g.ptr->name.value); })
      .def_property_readonly("is_function_body", [](const GraphRef& g) { return g.ptr->is_function_body; })
      .def_property_readonly("parent", [](const GraphRef& g) { return ref_or_none(g.model, g.ptr->parent); })
      .def_property_readonly("owner_node", [](const GraphRef& g) { return ref_or_none(g.model, g.ptr->owner_node); })
      .def_property_readonly("nodes",
                             [](const GraphRef& g) {
                               std::vector<NodeRef> out;
                               out.reserve(g.ptr->nodes.size());
                               for (ir::Node* n : g.ptr->nodes) out.push_back(NodeRef{g.model, n});
                               return out;
                             })
      .def("__len__", [](const GraphRef& g) { return g.ptr->nodes.size(); })
      .def_property_readonly("inputs",
                             [](const GraphRef& g) {
                               std::vector<ValueRef> out;
                               for (auto& v : g.ptr->inputs)
                                 if (v.value) out.push_back(ValueRef{g.model, v.value});
                               return out;
                             })
      .def_property_readonly("outputs",
                             [](const GraphRef& g) {
                               std::vector<ValueRef> out;
                               for (auto& v : g.ptr->outputs)
                                 if (v.value) out.push_back(ValueRef{g.model, v.value});
                               return out;
                             })
      .def_property_readonly("initializers",
                             [](const GraphRef& g) {
                               std::vector<TensorRef> out;
                               for (auto& t : g.ptr->initializers) out.push_back(TensorRef{g.model, t.get()});
                               return out;
                             })
      .def_property_readonly("sparse_initializer_count", [](const GraphRef& g) { return g.ptr->sparse_initializers.size(); })
      .def_property_readonly("values",
                             [](const GraphRef& g) {
                               std::vector<ValueRef> out;
                               for (ir::Value* v : g.ptr->values()) out.push_back(ValueRef{g.model, v});
                               return out;
                             })
      .def("value", [](const GraphRef& g, const std::string& name) { return ref_or_none(g.model, g.ptr->lookup(name)); },
           "The value of this name in this scope or an enclosing one, or None.")
      .def("topological_order", [](const GraphRef& g) { return refs(g.model, g.ptr->topological_order()); })
      .def("outer_references", [](const GraphRef& g) { return refs(g.model, g.ptr->outer_references()); })
      .def("count_symbols", [](const GraphRef& g) { return passes::count_symbols(*g.ptr); },
           "The dim symbols that may be 0 on some run: data-dependent counts (NonZero, TopK, ...; "
           "torch.export's u0). See passes/known_values.h.")
      .def("remove_node", [](const GraphRef& g, const NodeRef& n) { g.ptr->remove_node(n.ptr); })
      .def("remove_output", [](const GraphRef& g, size_t index) { g.ptr->remove_output(index); },
           "Drops graph output `index`; what only it read becomes dead code.")
      .def("unlist_initializer_inputs", [](const GraphRef& g) { return g.ptr->unlist_initializer_inputs(); },
           "Drops the graph inputs that name an initializer (IR 3 lists them all); returns how many.")
      .def("replace_all_uses", [](const GraphRef& g, const ValueRef& a, const ValueRef& b) { g.ptr->replace_all_uses(a.ptr, b.ptr); })
      .def("set_constant",
           [](const GraphRef& g, const ValueRef& v, int32_t data_type, std::vector<int64_t> dims, py::bytes data,
              bool as_node) {
             std::string bytes = checked_data("set_constant", data_type, dims, data);
             auto t = std::make_unique<ir::Tensor>();
             t->dims = std::move(dims);
             t->data_type.set(data_type);
             t->set_raw(ir::Blob::owned(std::move(bytes)));
             g.ptr->set_constant(v.ptr, std::move(t), as_node);
           },
           py::arg("value"), py::arg("data_type"), py::arg("dims"), py::arg("data"), py::arg("as_node") = false,
           "Makes a node output a constant under its own name (an initializer, or a Constant node with as_node).")
      .def("add_initializer",
           [](const GraphRef& g, const std::string& name, int32_t data_type, std::vector<int64_t> dims, py::bytes data) {
             std::string bytes = checked_data("add_initializer", data_type, dims, data);
             auto t = std::make_unique<ir::Tensor>();
             t->dims = std::move(dims);
             t->data_type.set(data_type);
             t->set_raw(ir::Blob::owned(std::move(bytes)));
             return ValueRef{g.model, g.ptr->add_initializer(name, std::move(t))};
           },
           py::arg("name"), py::arg("data_type"), py::arg("dims"), py::arg("data"),
           "A new initializer (the name must be free in this graph); returns its value.")
      .def("bypass",
           [](const GraphRef& g, const NodeRef& n, const ValueRef& in, const ValueRef& out) -> py::object {
             const char* why = passes::bypass(*g.ptr, n.ptr, in.ptr, out.ptr);
             return why ? py::object(py::str(why)) : py::object(py::none());
           },
           py::arg("node"), py::arg("input"), py::arg("output"),
           "Readers of `output` (of `node`) read `input`; the node goes. Graph output names are kept. "
           "Returns None, or why it refused (graph unchanged).")
      .def("unique_name", [](const GraphRef& g, const std::string& hint) { return text(g.ptr->unique_name(hint)); },
           "`hint`, or `hint_N`: a name no value in scope has.")
      .def("match",
           [](const GraphRef& g, const std::shared_ptr<match::Pattern>& p) {
             match::Matches found;
             {
               py::gil_scoped_release nogil;
               found = match::find_all(*g.ptr, *p);
             }
             py::list near;
             py::list matches = bindings_of(g, *p, found.found);
             for (const auto& n : found.near)
               near.append(py::make_tuple(NodeRef{g.model, n.anchor}, text(n.reason), n.depth, n.ops));
             return py::make_tuple(matches, near);
           },
           py::arg("pattern"),
           "Every match of a Pattern in this graph (bindings in element order) and the near misses "
           "(root node, reason, elements bound when it failed, how many of them ops).")
      .def("find_matches",
           [](const GraphRef& g, const std::shared_ptr<match::Pattern>& p, NearMisses* near, int min_ops) {
             if (near && near->model && near->model != g.model)
               throw py::value_error("these NearMisses hold another model's nodes");
             if (near) near->model = g.model;
             std::vector<match::Match> found;
             {
               py::gil_scoped_release nogil;
               found = match::find_matches(*g.ptr, *p, near ? &near->book : nullptr, min_ops);
             }
             return bindings_of(g, *p, found);
           },
           py::arg("pattern"), py::arg("near_misses") = nullptr, py::arg("min_ops") = 0,
           "match()'s matches; near misses with at least `min_ops` op elements go into `near_misses` where "
           "they bound more than the one it holds for their root (none are gathered without it).")
      .def("clear_value_info", [](const GraphRef& g) { return g.ptr->clear_value_info(); },
           "Drops every value_info entry; returns how many.")
      .def("set_value_type",
           [](const GraphRef& g, const ValueRef& v, py::bytes type) {
             std::string t = type;
             try {
               proto::decode_type(t);
             } catch (const proto::ParseError& e) {
               throw py::value_error(std::string("set_value_type: malformed TypeProto: ") + e.what());
             }
             g.ptr->set_value_type(v.ptr, std::move(t));
           },
           "Sets the TypeProto (serialized) describing a value.")
      .def("set_input",
           [](const GraphRef& g, const NodeRef& n, int index, std::optional<ValueRef> v) {
             n.ptr->graph->set_input(n.ptr, index, v ? v->ptr : nullptr);
           })
      .def(
          "add_node",
          [](const GraphRef& g, const std::string& op_type, const std::vector<std::optional<ValueRef>>& inputs,
             const std::vector<std::string>& outputs, const std::string& name, const std::string& domain,
             std::optional<NodeRef> before) {
            for (const auto& o : outputs)
              if (!o.empty() && g.ptr->find_local(o))
                throw ir::ModelError("value '" + o + "' is defined twice in graph '" + g.ptr->name.value + "'");
            ir::Node* node = unlinked_node(*g.ptr, op_type, inputs, name, domain);
            for (const auto& o : outputs) node->outputs.push_back(o.empty() ? nullptr : g.ptr->create_value(o));
            return NodeRef{g.model, g.ptr->add_node(node, before ? before->ptr : nullptr)};
          },
          py::arg("op_type"), py::arg("inputs"), py::arg("outputs"), py::arg("name") = "", py::arg("domain") = "",
          py::arg("before") = py::none())
      .def(
          "replace_node",
          [](const GraphRef& g, const NodeRef& old_node, const std::string& op_type,
             const std::vector<std::optional<ValueRef>>& inputs, const std::string& name, const std::string& domain) {
            return NodeRef{g.model, g.ptr->replace_node(old_node.ptr, unlinked_node(*g.ptr, op_type, inputs, name, domain))};
          },
          py::arg("node"), py::arg("op_type"), py::arg("inputs"), py::arg("name") = "", py::arg("domain") = "",
          "A new node in place of `node`, computing its outputs (same values, same names) from `inputs`.");

  py::class_<NodeRef>(m, "Node")
      .def("__eq__", &NodeRef::operator==)
      .def("__hash__", [](const NodeRef& n) { return std::hash<const void*>()(n.ptr); })
      .def("__repr__", [](const NodeRef& n) { return text("<Node " + n.ptr->display_name() + ">"); })
      .def_property_readonly("name", [](const NodeRef& n) { return text(n.ptr->name.value); })
      .def_property_readonly("op_type", [](const NodeRef& n) { return text(n.ptr->op_type.value); })
      .def_property_readonly("domain", [](const NodeRef& n) { return text(n.ptr->domain.value); })
      .def_property_readonly("removed", [](const NodeRef& n) { return n.ptr->removed; })
      .def_property("pinned", [](const NodeRef& n) { return n.ptr->pinned; },
                    [](const NodeRef& n, bool pinned) { n.ptr->pinned = pinned; },
                    "When set, no pass changes or removes this node.")
      .def_property_readonly("graph", [](const NodeRef& n) { return GraphRef{n.model, n.ptr->graph}; })
      .def_property_readonly("inputs",
                             [](const NodeRef& n) {
                               py::list l;
                               for (ir::Value* v : n.ptr->inputs) l.append(ref_or_none(n.model, v));
                               return l;
                             })
      .def_property_readonly("outputs",
                             [](const NodeRef& n) {
                               py::list l;
                               for (ir::Value* v : n.ptr->outputs) l.append(ref_or_none(n.model, v));
                               return l;
                             })
      .def_property_readonly("attributes",
                             [](const NodeRef& n) {
                               py::dict d;
                               for (const auto& a : n.ptr->attributes) d[text(a.name.value)] = attribute_value(n.model, a);
                               return d;
                             })
      .def_property_readonly("subgraphs", [](const NodeRef& n) { return refs(n.model, n.ptr->subgraphs()); })
      .def("set_attribute",
           [](const NodeRef& n, const std::string& name, const py::object& value) {
             ir::Attribute a = make_attribute(name, value);
             for (auto& old : n.ptr->attributes)
               if (old.name.value == name) {
                 old = std::move(a);
                 return;
               }
             n.ptr->attributes.push_back(std::move(a));
           },
           "Sets an attribute: int, float, str, a list of those, or (\"tensor\", data_type, dims, bytes).")
      .def("remove_attribute",
           [](const NodeRef& n, const std::string& name) {
             auto& as = n.ptr->attributes;
             for (auto it = as.begin(); it != as.end(); ++it)
               if (it->name.value == name) {
                 as.erase(it);
                 return true;
               }
             return false;
           })
      .def("copy_attributes",
           [](const NodeRef& n, const NodeRef& from) {
             for (const auto& a : from.ptr->attributes) n.ptr->attributes.push_back(copy_attribute(a, *from.ptr));
           },
           "Appends copies of another node's attributes (not subgraphs or sparse tensors).")
      .def("attribute_protos",
           [](const NodeRef& n) {
             py::list l;
             for (const auto& a : n.ptr->attributes) l.append(py::bytes(proto::serialize_attribute(a)));
             return l;
           },
           "Each attribute as a serialized AttributeProto.");

  py::class_<ValueRef>(m, "Value")
      .def("__eq__", &ValueRef::operator==)
      .def("__hash__", [](const ValueRef& v) { return std::hash<const void*>()(v.ptr); })
      .def("__repr__", [](const ValueRef& v) { return text("<Value '" + v.ptr->name + "'>"); })
      .def_property("name", [](const ValueRef& v) { return text(v.ptr->name); },
                    [](const ValueRef& v, const std::string& name) { v.ptr->graph->rename_value(v.ptr, name); })
      .def_property_readonly("graph", [](const ValueRef& v) { return GraphRef{v.model, v.ptr->graph}; })
      .def_property_readonly("producer", [](const ValueRef& v) { return ref_or_none(v.model, v.ptr->producer); })
      .def_property_readonly("producer_index", [](const ValueRef& v) { return v.ptr->producer_index; })
      .def_property_readonly("uses",
                             [](const ValueRef& v) {
                               std::vector<std::pair<NodeRef, int>> out;
                               for (const auto& u : v.ptr->uses) out.emplace_back(NodeRef{v.model, u.node}, u.index);
                               return out;
                             })
      .def_property_readonly("is_graph_input", [](const ValueRef& v) { return v.ptr->is_graph_input; })
      .def_property_readonly("is_graph_output", [](const ValueRef& v) { return v.ptr->is_graph_output(); })
      .def_property_readonly("initializer", [](const ValueRef& v) { return ref_or_none(v.model, v.ptr->initializer); })
      .def_property_readonly("type", [](const ValueRef& v) { return type_dict(v.ptr->info); })
      .def_property_readonly("type_proto", [](const ValueRef& v) -> py::object {
        const ir::ValueInfo* info = v.ptr->info;
        if (!info || !info->type.has) return py::none();
        return py::bytes(info->type.value);
      });

  py::class_<TensorRef>(m, "Tensor")
      .def("__eq__", &TensorRef::operator==)
      .def("__hash__", [](const TensorRef& t) { return std::hash<const void*>()(t.ptr); })
      .def("__repr__", [](const TensorRef& t) { return text("<Tensor '" + t.ptr->name.value + "'>"); })
      .def_property_readonly("name", [](const TensorRef& t) { return text(t.ptr->name.value); })
      .def_property_readonly("dims", [](const TensorRef& t) { return t.ptr->dims; })
      .def_property_readonly("data_type", [](const TensorRef& t) { return t.ptr->data_type.value; })
      .def_property_readonly("dtype_name", [](const TensorRef& t) { return std::string(ir::dtype_name(t.ptr->data_type.value)); })
      .def_property_readonly("is_external", [](const TensorRef& t) { return t.ptr->is_external(); })
      .def_property_readonly("external_location", [](const TensorRef& t) { return text(t.ptr->external_key("location")); })
      .def_property_readonly("nbytes",
                             [](const TensorRef& t) -> uint64_t {
                               if (const ir::Blob* b = t.ptr->raw_payload()) return b->length;
                               const ir::Tensor& x = *t.ptr;
                               uint64_t n = x.float_data.size() + x.double_data.size() + 4 * x.int32_data.size() +
                                            8 * (x.int64_data.size() + x.uint64_data.size());
                               for (const auto& s : x.string_data) n += s.size();
                               return n;
                             })
      .def("numpy_view", [](const TensorRef& t) { return tensor_numpy(*t.ptr); },
           "Read-only array without a copy where the bytes allow it; None when numpy has no such dtype.")
      .def("serialize",
           [](const TensorRef& t) {
             // The TensorProto alone, external data read in (for onnx.numpy_helper).
             ir::Tensor copy;
             copy.dims = t.ptr->dims;
             copy.data_type = t.ptr->data_type;
             copy.name = t.ptr->name;
             copy.float_data = t.ptr->float_data;
             copy.int32_data = t.ptr->int32_data;
             copy.string_data = t.ptr->string_data;
             copy.int64_data = t.ptr->int64_data;
             copy.double_data = t.ptr->double_data;
             copy.uint64_data = t.ptr->uint64_data;
             if (const ir::Blob* b = t.ptr->raw_payload()) {
               copy.raw_data = *b;
               copy.has_raw_data = true;
             }
             return py::bytes(proto::serialize_tensor(copy));
           })
      .def("set_raw",
           [](const TensorRef& t, int32_t data_type, std::vector<int64_t> dims, py::bytes data) {
             std::string bytes = checked_data("set_raw", data_type, dims, data);
             t.ptr->set_raw(ir::Blob::owned(std::move(bytes)));
             t.ptr->data_type.set(data_type);
             t.ptr->dims = std::move(dims);
           },
           "Replaces the tensor's data with new bytes (a new buffer; views of the old data stay valid).");

  py::class_<FunctionRef>(m, "Function")
      .def_property_readonly("name", [](const FunctionRef& f) { return text(f.ptr->name.value); })
      .def_property_readonly("domain", [](const FunctionRef& f) { return text(f.ptr->domain.value); })
      .def_property_readonly("attribute_names",
                             [](const FunctionRef& f) {
                               py::list l;
                               for (const auto& a : f.ptr->attribute) l.append(text(a));
                               return l;
                             })
      .def_property_readonly("body", [](const FunctionRef& f) { return GraphRef{f.model, f.ptr->body.get()}; });

  m.def(
      "load_file",
      [](const std::string& path, const std::string& base_dir, bool allow_outside) {
        std::unique_ptr<ir::Model> model;
        {
          py::gil_scoped_release nogil;
          model = proto::load_file(path, load_options(base_dir, allow_outside));
        }
        return ModelPtr(std::move(model));
      },
      py::arg("path"), py::arg("base_dir") = "", py::arg("allow_external_outside") = false);
  m.def(
      "load_bytes",
      [](py::bytes data, const std::string& base_dir, bool allow_outside, std::optional<ModelPtr> weights_from) {
        std::string copy = data;
        proto::LoadOptions options = load_options(base_dir, allow_outside);
        if (weights_from) options.weights_from = weights_from->get();
        std::unique_ptr<ir::Model> model;
        {
          py::gil_scoped_release nogil;
          model = proto::load_bytes(std::move(copy), options);
        }
        return ModelPtr(std::move(model));
      },
      py::arg("data"), py::arg("base_dir") = "", py::arg("allow_external_outside") = false,
      py::arg("weights_from") = py::none(),
      "`weights_from`: a model whose serialize_weightless() these bytes were made from (and rewritten); "
      "its weights are shared, not copied.");
  py::class_<match::Pattern, std::shared_ptr<match::Pattern>>(m, "Pattern")
      .def(py::init([](const py::list& elements) { return std::make_shared<match::Pattern>(make_pattern(elements)); }),
           "A pattern from element dicts (see pyonnxopt/fusion/pattern.py).")
      .def("__len__", [](const match::Pattern& p) { return p.elements.size(); })
      .def_property_readonly("ops", [](const match::Pattern& p) {
        return std::count_if(p.elements.begin(), p.elements.end(),
                             [](const match::Element& e) { return e.kind == match::Element::Kind::kOp; });
      }, "How many of the elements are ops.");
  m.attr("PROTOBUF_LIMIT") = proto::kProtobufLimit;
  m.def("fold_kernel_ops", [] { return fold::kernel_ops(); }, "Ops the native folding kernels evaluate.");
  m.def("native_passes", [] {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& p : passes::registry()) out.emplace_back(p->name(), p->description());
    return out;
  });
}
