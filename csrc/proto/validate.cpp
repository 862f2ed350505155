#include "proto/validate.h"

#include <initializer_list>
#include <string>

#include "proto/wire.h"

namespace pyonnxopt::proto {
namespace {

// A tiny schema: for each field number, what it must be. Fields not listed
// are unknown and skipped, as protobuf does.
enum class Kind {
  kVarint, kVarints /* repeated: packed or not */, kString,
  kType, kTensorType, kShape, kDim, kOpaque, kSeqOrOpt, kMap,  // TypeProto
  kSegment, kAnnotation, kStringEntry,
  kNodeDevice, kSharding, kIntIntList, kShardedDim, kSimpleShardedDim, kDevice,
};

struct FieldRule {
  uint32_t number;
  Kind kind;
};

void validate_as(Kind kind, WireReader& r, int depth);

[[noreturn]] void wrong_wire(WireReader& r, uint32_t f, WireType w, const char* expected) {
  r.fail("field " + std::to_string(f) + " has wire type " + std::to_string(w) + ", expected " + expected);
}

void validate_fields(WireReader& r, std::initializer_list<FieldRule> rules, int depth) {
  if (depth > kMaxMessageDepth) r.fail("messages nested deeper than protobuf's limit of " + std::to_string(kMaxMessageDepth));
  uint32_t f;
  WireType w;
  while (r.tag(f, w)) {
    const FieldRule* rule = nullptr;
    for (const auto& x : rules)
      if (x.number == f) rule = &x;
    if (!rule) {
      r.skip(r.pos(), w, f);
      continue;
    }
    if (rule->kind == Kind::kVarint || (rule->kind == Kind::kVarints && w != kLen)) {
      if (w != kVarint) wrong_wire(r, f, w, "varint");
      r.varint();
      continue;
    }
    if (w != kLen) wrong_wire(r, f, w, "length-delimited");
    std::string_view v = r.bytes();
    if (rule->kind == Kind::kString) continue;
    WireReader inner(reinterpret_cast<const uint8_t*>(v.data()), v.size(), r.offset() - v.size());
    if (rule->kind == Kind::kVarints) {
      while (!inner.done()) inner.varint();
      continue;
    }
    validate_as(rule->kind, inner, depth + 1);
  }
}

void validate_as(Kind kind, WireReader& r, int depth) {
  switch (kind) {
    case Kind::kType:
      validate_fields(r, {{1, Kind::kTensorType}, {4, Kind::kSeqOrOpt}, {5, Kind::kMap}, {6, Kind::kString},
                          {7, Kind::kOpaque}, {8, Kind::kTensorType}, {9, Kind::kSeqOrOpt}}, depth);
      break;
    case Kind::kTensorType: validate_fields(r, {{1, Kind::kVarint}, {2, Kind::kShape}}, depth); break;
    case Kind::kShape: validate_fields(r, {{1, Kind::kDim}}, depth); break;
    case Kind::kDim: validate_fields(r, {{1, Kind::kVarint}, {2, Kind::kString}, {3, Kind::kString}}, depth); break;
    case Kind::kOpaque: validate_fields(r, {{1, Kind::kString}, {2, Kind::kString}}, depth); break;
    case Kind::kSeqOrOpt: validate_fields(r, {{1, Kind::kType}}, depth); break;
    case Kind::kMap: validate_fields(r, {{1, Kind::kVarint}, {2, Kind::kType}}, depth); break;
    case Kind::kSegment: validate_fields(r, {{1, Kind::kVarint}, {2, Kind::kVarint}}, depth); break;
    case Kind::kAnnotation: validate_fields(r, {{1, Kind::kString}, {2, Kind::kStringEntry}}, depth); break;
    case Kind::kStringEntry: validate_fields(r, {{1, Kind::kString}, {2, Kind::kString}}, depth); break;
    case Kind::kNodeDevice:
      validate_fields(r, {{1, Kind::kString}, {2, Kind::kSharding}, {3, Kind::kVarint}}, depth);
      break;
    case Kind::kSharding:
      validate_fields(r, {{1, Kind::kString}, {2, Kind::kVarints}, {3, Kind::kIntIntList}, {4, Kind::kShardedDim}}, depth);
      break;
    case Kind::kIntIntList: validate_fields(r, {{1, Kind::kVarint}, {2, Kind::kVarints}}, depth); break;
    case Kind::kShardedDim: validate_fields(r, {{1, Kind::kVarint}, {2, Kind::kSimpleShardedDim}}, depth); break;
    case Kind::kSimpleShardedDim:
      validate_fields(r, {{1, Kind::kVarint}, {2, Kind::kString}, {3, Kind::kVarint}}, depth);
      break;
    case Kind::kDevice: validate_fields(r, {{1, Kind::kString}, {2, Kind::kVarint}, {3, Kind::kString}}, depth); break;
    default: break;
  }
}

void validate_bytes(Kind kind, std::string_view bytes, int depth) {
  WireReader r(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), 0);
  validate_as(kind, r, depth);
}

}  // namespace

void validate_type(std::string_view b, int depth) { validate_bytes(Kind::kType, b, depth); }
void validate_segment(std::string_view b, int depth) { validate_bytes(Kind::kSegment, b, depth); }
void validate_tensor_annotation(std::string_view b, int depth) { validate_bytes(Kind::kAnnotation, b, depth); }
void validate_node_device_configuration(std::string_view b, int depth) { validate_bytes(Kind::kNodeDevice, b, depth); }
void validate_device_configuration(std::string_view b, int depth) { validate_bytes(Kind::kDevice, b, depth); }

}  // namespace pyonnxopt::proto
