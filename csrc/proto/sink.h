// Where serialized bytes go: a string, or a file written through a buffer,
// with file-backed tensor bytes moved by the kernel (copy_file_range, or a
// clone of a whole file where the file system shares blocks).
#pragma once

#include <cstdint>
#include <string>

#include "ir/buffer.h"

namespace pyonnxopt::proto {

class Sink {
 public:
  virtual ~Sink() = default;
  virtual void write(const void* p, size_t n) = 0;
  // Bytes of `blob`; a file-backed one may be copied in the kernel.
  virtual void write_blob(const ir::Blob& b) { write(b.data(), b.length); }
};

class StringSink : public Sink {
 public:
  explicit StringSink(std::string& out) : out_(out) {}
  void write(const void* p, size_t n) override { out_.append(static_cast<const char*>(p), n); }

 private:
  std::string& out_;
};

// Throws ir::ModelError naming the file on any I/O failure.
class FileSink : public Sink {
 public:
  explicit FileSink(const std::string& path);
  ~FileSink() override;
  FileSink(const FileSink&) = delete;
  FileSink& operator=(const FileSink&) = delete;

  void write(const void* p, size_t n) override;
  void write_blob(const ir::Blob& b) override;
  // The whole of `source` (into an empty file): a clone sharing its blocks
  // where the file system can (btrfs, XFS), else one kernel-side copy.
  // False when the source file was replaced since it was loaded.
  bool write_whole(const ir::Buffer* source);
  void close();

 private:
  static constexpr size_t kBuffer = 1 << 20;
  static constexpr uint64_t kCopyThreshold = 1 << 16;

  [[noreturn]] void fail(const char* what, int err);
  void flush();
  void raw_write(const uint8_t* p, size_t n);
  void copy_range(int in, uint64_t offset, uint64_t length);
  void copy_by_reading(int in, int64_t off, uint64_t left);
  int source_fd(const ir::Buffer* b);

  std::string path_;
  int fd_ = -1;
  std::string buf_;
  const ir::Buffer* source_ = nullptr;  // one open source at a time: data files go source by source
  int source_fd_ = -1;
};

}  // namespace pyonnxopt::proto
