// Protobuf wire-format primitives: a bounds-checked reader over a byte span
// and the varint/size helpers the writer needs. Every read checks the span
// first, so malformed input raises ParseError instead of reading past the end.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>

namespace pyonnxopt::proto {

// Protobuf's recursion limit, in messages from the outermost one (depth 1).
constexpr int kMaxMessageDepth = 100;

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLen = 2, kStartGroup = 3, kEndGroup = 4, kFixed32 = 5 };

// A malformed byte stream; `offset` is relative to the start of the file.
struct ParseError : std::runtime_error {
  uint64_t offset;
  ParseError(const std::string& what, uint64_t off) : std::runtime_error(what), offset(off) {}
};

class WireReader {
 public:
  // `base` is the file offset of `data[0]`, used only in error messages.
  WireReader(const uint8_t* data, size_t size, uint64_t base) : p_(data), begin_(data), end_(data + size), base_(base) {}

  bool done() const { return p_ >= end_; }
  uint64_t offset() const { return base_ + static_cast<uint64_t>(p_ - begin_); }
  const uint8_t* pos() const { return p_; }

  uint64_t varint() {
    uint64_t result = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ >= end_) fail("truncated varint");
      uint8_t b = *p_++;
      result |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return result;
    }
    fail("varint longer than 10 bytes");
  }

  // Reads a tag; returns false at the end of the span.
  bool tag(uint32_t& field, WireType& wire) {
    if (done()) return false;
    const uint8_t* start = p_;
    uint64_t t = varint();
    if (p_ - start > 5) fail("tag longer than 5 bytes");  // protobuf reads a tag as a 32-bit varint
    field = static_cast<uint32_t>(t >> 3);
    uint32_t w = static_cast<uint32_t>(t & 7);
    if (field == 0 || (t >> 3) > 0x1fffffff) fail("invalid field number");
    if (w > kFixed32) fail("unsupported wire type " + std::to_string(w));
    wire = static_cast<WireType>(w);
    return true;
  }

  uint32_t fixed32() {
    need(4);
    uint32_t v;
    std::memcpy(&v, p_, 4);
    p_ += 4;
    return v;
  }

  uint64_t fixed64() {
    need(8);
    uint64_t v;
    std::memcpy(&v, p_, 8);
    p_ += 8;
    return v;
  }

  // A length-delimited payload as a view into the underlying bytes.
  std::string_view bytes() {
    uint64_t n = varint();
    if (n > static_cast<uint64_t>(end_ - p_)) fail("length " + std::to_string(n) + " runs past the end of its message");
    std::string_view out(reinterpret_cast<const char*>(p_), static_cast<size_t>(n));
    p_ += n;
    return out;
  }

  // Skips one field's payload and returns the whole field (tag included) as
  // raw bytes. `field` matters only for groups (deprecated, but protobuf keeps
  // them as unknown fields, so do we).
  std::string_view skip(const uint8_t* tag_start, WireType wire, uint32_t field = 0, int depth = 0) {
    switch (wire) {
      case kVarint: varint(); break;
      case kFixed64: need(8); p_ += 8; break;
      case kFixed32: need(4); p_ += 4; break;
      case kLen: bytes(); break;
      case kStartGroup: {
        if (depth >= kMaxMessageDepth) fail("groups nested deeper than protobuf's limit");
        uint32_t f;
        WireType w;
        for (;;) {
          const uint8_t* inner = p_;
          if (!tag(f, w)) fail("group " + std::to_string(field) + " is not closed");
          if (w == kEndGroup) {
            if (f != field) fail("group " + std::to_string(field) + " closed by field " + std::to_string(f));
            break;
          }
          skip(inner, w, f, depth + 1);
        }
        break;
      }
      default: fail("end of a group that was not opened");
    }
    return std::string_view(reinterpret_cast<const char*>(tag_start), static_cast<size_t>(p_ - tag_start));
  }

  [[noreturn]] void fail(const std::string& what) const { throw ParseError(what, offset()); }

 private:
  void need(size_t n) {
    if (static_cast<size_t>(end_ - p_) < n) fail("truncated fixed-width field");
  }
  const uint8_t* p_;
  const uint8_t* begin_;
  const uint8_t* end_;
  uint64_t base_;
};

inline size_t varint_size(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

inline size_t put_varint(uint8_t* out, uint64_t v) {
  size_t n = 0;
  while (v >= 0x80) {
    out[n++] = static_cast<uint8_t>(v | 0x80);
    v >>= 7;
  }
  out[n++] = static_cast<uint8_t>(v);
  return n;
}

inline uint64_t make_tag(uint32_t field, WireType wire) { return (static_cast<uint64_t>(field) << 3) | wire; }

}  // namespace pyonnxopt::proto
