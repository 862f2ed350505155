// External data: each tensor's `location` is resolved against the model's
// folder, refused when it escapes it (absolute path, `..`, a symlink out)
// unless allowed, and its byte range is checked against the file's size. The
// file is opened for its size only; it is mapped on first access to the data.
#include <climits>
#include <cstdlib>
#include <map>
#include <system_error>

#include "proto/link.h"
#include "proto/writer.h"

namespace pyonnxopt::proto {
namespace {

using namespace ir;

std::string real_path(const std::string& p) {
  char buf[PATH_MAX];
  if (!::realpath(p.c_str(), buf)) return {};
  return buf;
}

bool parse_u64(const std::string& s, uint64_t& out) {
  if (s.empty() || s.size() > 20) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  out = v;
  return true;
}

class Resolver {
 public:
  Resolver(const Model& m, bool allow_outside) : model_(m), allow_outside_(allow_outside) {}

  void resolve(Tensor& t) {
    auto fail = [&](const std::string& what) {
      throw ModelError("tensor '" + t.name.value + "' external data: " + what);
    };
    const std::string location = t.external_key("location");
    if (location.empty()) fail("no 'location' entry");
    if (location.find('\0') != std::string::npos) fail("location contains a NUL byte");
    if (model_.base_dir.empty())
      fail("the model was loaded from bytes; pass base_dir to say where '" + location + "' is");
    const bool absolute = location[0] == '/';
    const std::string path = absolute ? location : model_.base_dir + "/" + location;
    if (!allow_outside_) {
      if (absolute) fail("location '" + location + "' is an absolute path; pass allow_external_outside=True to allow it");
      std::string base = base_real();
      std::string target = real_path(path);
      const std::string prefix = base == "/" ? base : base + "/";
      if (!target.empty() && target.compare(0, prefix.size(), prefix) != 0)
        fail("location '" + location + "' resolves outside the model's folder " + base +
             "; pass allow_external_outside=True to allow it");
    }
    std::shared_ptr<MappedFile> file = open(path, location, fail);
    uint64_t offset = 0, length = 0;
    const std::string off_s = t.external_key("offset"), len_s = t.external_key("length");
    if (!off_s.empty() && !parse_u64(off_s, offset)) fail("offset '" + off_s + "' is not a non-negative integer");
    if (offset > file->size())
      fail("offset " + std::to_string(offset) + " is past the end of '" + location + "' (" + std::to_string(file->size()) + " bytes)");
    if (len_s.empty()) length = file->size() - offset;
    else if (!parse_u64(len_s, length)) fail("length '" + len_s + "' is not a non-negative integer");
    if (length > file->size() - offset)
      fail("bytes " + std::to_string(offset) + ".." + std::to_string(offset + length) + " run past the end of '" +
           location + "' (" + std::to_string(file->size()) + " bytes)");
    uint64_t numel = 1;
    bool ok = true;
    for (int64_t d : t.dims) {
      if (d < 0 || (d && numel > UINT64_MAX / uint64_t(d))) ok = false;
      else numel *= uint64_t(d);
    }
    int64_t want = ok ? storage_bytes(t.data_type.value, numel) : kBytesOverflow;
    if (want == kBytesOverflow) fail("dimensions need more than 2^63 bytes");
    if (want >= 0 && uint64_t(want) != length && !t.segment.has)
      fail("has " + std::to_string(length) + " bytes, but " + dtype_name(t.data_type.value) + " dims need " + std::to_string(want));
    t.external_bytes = Blob{file, offset, length};
  }

 private:
  template <class Fail>
  std::shared_ptr<MappedFile> open(const std::string& path, const std::string& location, Fail fail) {
    auto it = files_.find(path);
    if (it != files_.end()) return it->second;
    std::shared_ptr<MappedFile> f;
    try {
      f = std::make_shared<MappedFile>(path);
    } catch (const std::system_error& e) {
      fail("cannot open '" + location + "': " + e.code().message() + " (looked in " + model_.base_dir + ")");
    }
    files_.emplace(path, f);
    return f;
  }

  const std::string& base_real() {
    if (base_real_.empty()) {
      base_real_ = real_path(model_.base_dir);
      if (base_real_.empty()) throw ModelError("cannot resolve the model folder '" + model_.base_dir + "'");
    }
    return base_real_;
  }

  const Model& model_;
  bool allow_outside_;
  std::string base_real_;
  std::map<std::string, std::shared_ptr<MappedFile>> files_;
};

}  // namespace

// The donor's bytes, where the donor keeps them (inline or its external file).
void adopt_weights(Tensor& t, const std::vector<Tensor*>& donors) {
  auto fail = [&](const std::string& what) { throw ModelError("tensor '" + t.name.value + "': " + what); };
  uint64_t index = 0;
  if (!parse_u64(t.external_key("offset"), index) || index >= donors.size())
    fail("refers to weight " + t.external_key("offset") + ", which the source model does not have");
  const Tensor& d = *donors[index];
  const Blob* payload = d.raw_payload();
  if (!payload || d.dims != t.dims || d.data_type.value != t.data_type.value)
    fail("its type or shape differs from the source model's tensor " + std::to_string(index));
  t.external_data = d.external_data;
  t.data_location = d.data_location;
  if (d.is_external()) {
    t.external_bytes = *payload;
  } else {
    t.has_raw_data = true;
    t.raw_data = *payload;
  }
}

void resolve_external_data(Model& model, const std::vector<Tensor*>& tensors, bool allow_outside,
                           const Model* weights_from) {
  Resolver r(model, allow_outside);
  std::vector<Tensor*> donors;
  if (weights_from) donors = weights_from->all_tensors();
  for (Tensor* t : tensors) {
    if (!t->is_external()) continue;
    if (weights_from && t->external_key("location") == kWeightlessLocation) adopt_weights(*t, donors);
    else r.resolve(*t);
  }
}

}  // namespace pyonnxopt::proto
