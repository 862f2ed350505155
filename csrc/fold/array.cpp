#include "fold/array.h"

#include <stdexcept>

namespace pyonnxopt::fold {

uint64_t Array::numel() const {
  uint64_t n = 1;
  for (int64_t d : dims) n *= static_cast<uint64_t>(d);
  return n;
}

size_t element_size(int32_t dtype) {
  switch (dtype) {
    case kUint8: case kInt8: case kBool: return 1;
    case kUint16: case kInt16: case kFloat16: case kBFloat16: return 2;
    case kFloat: case kInt32: case kUint32: return 4;
    case kInt64: case kDouble: case kUint64: return 8;
    default: return 0;
  }
}

std::vector<int64_t> Array::as_int64() const {
  const uint64_t n = numel();
  std::vector<int64_t> out(n);
  for (uint64_t i = 0; i < n; ++i) {
    switch (dtype) {
      case kInt64: out[i] = at<int64_t>(i); break;
      case kInt32: out[i] = at<int32_t>(i); break;
      case kInt16: out[i] = at<int16_t>(i); break;
      case kInt8: out[i] = at<int8_t>(i); break;
      case kUint8: case kBool: out[i] = at<uint8_t>(i); break;
      case kUint16: out[i] = at<uint16_t>(i); break;
      case kUint32: out[i] = at<uint32_t>(i); break;
      case kUint64: out[i] = static_cast<int64_t>(at<uint64_t>(i)); break;
      default: throw std::invalid_argument(std::string("expected integers, got ") + ir::dtype_name(dtype));
    }
  }
  return out;
}

Array Array::of_bytes(int32_t dtype, std::vector<int64_t> dims, std::string bytes) {
  Array a;
  a.dtype = dtype;
  a.dims = std::move(dims);
  a.bytes = ir::Blob::owned(std::move(bytes));
  return a;
}

namespace {

// Typed fields hold one element per entry, wider than the element itself
// (int32_data holds int8 ... float16 bit patterns): narrowed to raw bytes.
template <class Field>
std::string narrow(const std::vector<Field>& values, size_t size) {
  std::string out(values.size() * size, '\0');
  for (size_t i = 0; i < values.size(); ++i) std::memcpy(out.data() + i * size, &values[i], size);  // little-endian
  return out;
}

}  // namespace

bool to_array(const ir::Tensor& t, Array& out, std::string& why) {
  const int32_t dtype = t.data_type.value;
  const size_t size = element_size(dtype);
  if (!size) {
    why = std::string("tensor of type ") + ir::dtype_name(dtype);
    return false;
  }
  if (t.segment.has) {
    why = "segmented tensor";
    return false;
  }
  out.dtype = dtype;
  out.dims = t.dims;
  for (int64_t d : t.dims)
    if (d < 0) {
      why = "negative dim";
      return false;
    }
  const uint64_t expected = out.numel() * size;
  if (const ir::Blob* raw = t.raw_payload()) {
    out.bytes = *raw;
  } else if (dtype == kFloat) {
    out.bytes = ir::Blob::owned(std::string(reinterpret_cast<const char*>(t.float_data.data()), t.float_data.size()));
  } else if (dtype == kDouble) {
    out.bytes = ir::Blob::owned(std::string(reinterpret_cast<const char*>(t.double_data.data()), t.double_data.size()));
  } else if (dtype == kInt64) {
    out.bytes = ir::Blob::owned(narrow(t.int64_data, 8));
  } else if (dtype == kUint32 || dtype == kUint64) {
    out.bytes = ir::Blob::owned(narrow(t.uint64_data, size));
  } else {
    out.bytes = ir::Blob::owned(narrow(t.int32_data, size));
  }
  if (out.bytes.length != expected) {
    why = "data holds " + std::to_string(out.bytes.length) + " bytes, dims need " + std::to_string(expected);
    return false;
  }
  return true;
}

std::unique_ptr<ir::Tensor> to_tensor(const Array& a) {
  auto t = std::make_unique<ir::Tensor>();
  t->dims = a.dims;
  t->data_type.set(a.dtype);
  t->set_raw(a.bytes);
  return t;
}

}  // namespace pyonnxopt::fold
