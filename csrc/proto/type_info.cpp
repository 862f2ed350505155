#include "proto/type_info.h"

#include "ir/model.h"
#include "proto/wire.h"

namespace pyonnxopt::proto {
namespace {

WireReader sub(std::string_view v) {
  return WireReader(reinterpret_cast<const uint8_t*>(v.data()), v.size(), 0);
}

Dim decode_dim(std::string_view bytes) {
  Dim d;
  WireReader r = sub(bytes);
  uint32_t f;
  WireType w;
  while (r.tag(f, w)) {
    if (f == 1 && w == kVarint) {
      d.has_value = true;
      d.value = static_cast<int64_t>(r.varint());
    } else if (f == 2 && w == kLen) {
      d.param = std::string(r.bytes());
    } else {
      r.skip(r.pos(), w, f);
    }
  }
  return d;
}

void decode_tensor(std::string_view bytes, TypeDesc& t) {
  WireReader r = sub(bytes);
  uint32_t f;
  WireType w;
  while (r.tag(f, w)) {
    if (f == 1 && w == kVarint) {
      t.elem_type = static_cast<int32_t>(r.varint());
    } else if (f == 2 && w == kLen) {
      t.has_shape = true;
      WireReader s = sub(r.bytes());
      uint32_t sf;
      WireType sw;
      while (s.tag(sf, sw)) {
        if (sf == 1 && sw == kLen) t.dims.push_back(decode_dim(s.bytes()));
        else s.skip(s.pos(), sw, sf);
      }
    } else {
      r.skip(r.pos(), w, f);
    }
  }
}

std::string tensor_text(const TypeDesc& t) {
  std::string s = ir::dtype_name(t.elem_type);
  if (!t.has_shape) return s;
  s += "[";
  for (size_t i = 0; i < t.dims.size(); ++i) {
    if (i) s += ",";
    const Dim& d = t.dims[i];
    s += d.has_value ? std::to_string(d.value) : d.param.empty() ? "?" : d.param;
  }
  return s + "]";
}

TypeDesc decode(std::string_view bytes, int depth) {
  TypeDesc t;
  t.kind = "unknown";
  if (depth > 32) return t;
  WireReader r = sub(bytes);
  uint32_t f;
  WireType w;
  while (r.tag(f, w)) {
    if (w != kLen) {
      r.skip(r.pos(), w, f);
      continue;
    }
    std::string_view v = r.bytes();
    switch (f) {
      case 1: t.kind = "tensor"; decode_tensor(v, t); t.text = tensor_text(t); break;
      case 8: t.kind = "sparse_tensor"; decode_tensor(v, t); t.text = "sparse " + tensor_text(t); break;
      case 4: case 9: {  // Sequence / Optional: elem_type = 1
        t.kind = f == 4 ? "sequence" : "optional";
        WireReader s = sub(v);
        uint32_t sf;
        WireType sw;
        std::string inner = "?";
        while (s.tag(sf, sw)) {
          if (sf == 1 && sw == kLen) inner = decode(s.bytes(), depth + 1).text;
          else s.skip(s.pos(), sw, sf);
        }
        t.text = (f == 4 ? "seq(" : "optional(") + inner + ")";
        break;
      }
      case 5: {  // Map: key_type = 1 (int32), value_type = 2
        t.kind = "map";
        WireReader s = sub(v);
        uint32_t sf;
        WireType sw;
        std::string key = "?", value = "?";
        while (s.tag(sf, sw)) {
          if (sf == 1 && sw == kVarint) key = ir::dtype_name(static_cast<int32_t>(s.varint()));
          else if (sf == 2 && sw == kLen) value = decode(s.bytes(), depth + 1).text;
          else s.skip(s.pos(), sw, sf);
        }
        t.text = "map(" + key + "," + value + ")";
        break;
      }
      case 7: t.kind = "opaque"; t.text = "opaque"; break;
      default: break;
    }
  }
  if (t.text.empty()) t.text = t.kind;
  return t;
}

}  // namespace

TypeDesc decode_type(std::string_view bytes) { return decode(bytes, 0); }

}  // namespace pyonnxopt::proto
