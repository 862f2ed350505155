// Decoding of TypeProto bytes (kept raw in the IR) into what passes and
// reports need: element type and dims of tensor types, a readable text for
// the others.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pyonnxopt::proto {

struct Dim {
  bool has_value = false;
  int64_t value = 0;
  std::string param;  // symbolic name; empty with !has_value means unknown
};

struct TypeDesc {
  std::string kind;  // "tensor", "sparse_tensor", "sequence", "map", "optional", "opaque", "unknown"
  int32_t elem_type = 0;  // tensor and sparse_tensor
  bool has_shape = false;
  std::vector<Dim> dims;
  std::string text;  // e.g. "float32[N,3,224,224]", "seq(tensor(int64))"
};

// Throws proto::ParseError on malformed bytes.
TypeDesc decode_type(std::string_view bytes);

}  // namespace pyonnxopt::proto
