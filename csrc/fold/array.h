// A constant as the folding kernels see it: element type, dims and
// little-endian bytes, read from (and written back to) ir::Tensor.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ir/model.h"

namespace pyonnxopt::fold {

// ONNX TensorProto.DataType values the kernels compute on.
enum DType : int32_t {
  kFloat = 1, kUint8 = 2, kInt8 = 3, kUint16 = 4, kInt16 = 5, kInt32 = 6, kInt64 = 7, kString = 8,
  kBool = 9, kFloat16 = 10, kDouble = 11, kUint32 = 12, kUint64 = 13, kBFloat16 = 16,
};

struct Array {
  int32_t dtype = 0;
  std::vector<int64_t> dims;
  ir::Blob bytes;  // numel() elements; may be unaligned (a view into the model file)

  uint64_t numel() const;
  uint64_t nbytes() const { return bytes.length; }
  // Element `i` as T (T must be the element's own C++ type); a copy, so
  // unaligned bytes are fine.
  template <class T>
  T at(uint64_t i) const {
    T v;
    std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
    return v;
  }
  template <class T>
  std::vector<T> values() const {
    std::vector<T> out(numel());
    if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
    return out;
  }
  // Every element converted to int64 (integer and bool types only; throws
  // std::invalid_argument otherwise): for shapes, axes, indices.
  std::vector<int64_t> as_int64() const;

  static Array of_bytes(int32_t dtype, std::vector<int64_t> dims, std::string bytes);
  template <class T>
  static Array of(int32_t dtype, std::vector<int64_t> dims, const std::vector<T>& values) {
    std::string b(values.size() * sizeof(T), '\0');
    if (!values.empty()) std::memcpy(b.data(), values.data(), b.size());
    return of_bytes(dtype, std::move(dims), std::move(b));
  }
};

// Bytes per element of the types the kernels handle; 0 for the others
// (strings, sub-byte and 8-bit float types, complex).
size_t element_size(int32_t dtype);

// The tensor's data as an Array (raw_data, external data, or the typed
// fields), a view where the tensor stores raw bytes. Returns false, with
// `why`, for data kernels do not handle (strings, segments, sub-byte types)
// or that is malformed (byte count not matching dims).
bool to_array(const ir::Tensor& t, Array& out, std::string& why);
// A new tensor holding `a` as raw_data (named by the caller).
std::unique_ptr<ir::Tensor> to_tensor(const Array& a);

}  // namespace pyonnxopt::fold
