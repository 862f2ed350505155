// Byte storage behind tensors: memory-mapped files (mapped on first use) and
// owned memory. A Blob is a view into a Buffer that keeps the buffer alive, so
// tensor bytes are never copied on load.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace pyonnxopt::ir {

class Buffer {
 public:
  virtual ~Buffer() = default;
  // Pointer to the first byte; a file-backed buffer maps itself here on first use.
  virtual const uint8_t* data() const = 0;
  virtual uint64_t size() const = 0;
  // A file descriptor of the file holding these bytes at the same offsets
  // (the caller closes it), or -1 for memory or when that file was replaced
  // since it was opened.
  virtual int open_source() const { return -1; }
};

// A whole file, mapped read-only and lazily. The size is read at open time so
// bounds are checked without touching the data.
class MappedFile : public Buffer {
 public:
  // Throws std::system_error if the file cannot be opened or stat'ed.
  explicit MappedFile(std::string path);
  ~MappedFile() override;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const override;
  uint64_t size() const override { return size_; }
  int open_source() const override;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  uint64_t size_ = 0;
  uint64_t device_ = 0, inode_ = 0;  // identity, to notice a file replaced under the same path
  mutable std::once_flag mapped_once_;
  mutable void* addr_ = nullptr;
};

class OwnedBuffer : public Buffer {
 public:
  explicit OwnedBuffer(std::string bytes) : bytes_(std::move(bytes)) {}
  const uint8_t* data() const override { return reinterpret_cast<const uint8_t*>(bytes_.data()); }
  uint64_t size() const override { return bytes_.size(); }

 private:
  std::string bytes_;
};

// A byte range of a Buffer. An empty Blob (no buffer) is a valid zero-length view.
struct Blob {
  std::shared_ptr<const Buffer> buffer;
  uint64_t offset = 0;
  uint64_t length = 0;

  const uint8_t* data() const { return buffer && length ? buffer->data() + offset : nullptr; }
  static Blob owned(std::string bytes) {
    auto buf = std::make_shared<OwnedBuffer>(std::move(bytes));
    uint64_t n = buf->size();
    return Blob{std::move(buf), 0, n};
  }
};

}  // namespace pyonnxopt::ir
