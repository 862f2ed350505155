#include "proto/sink.h"

#include <fcntl.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/fs.h>  // FICLONE
#include <sys/ioctl.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "ir/model.h"

namespace pyonnxopt::proto {

FileSink::FileSink(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot create", errno);
  buf_.reserve(kBuffer);
}

FileSink::~FileSink() {
  if (fd_ >= 0) ::close(fd_);
  if (source_fd_ >= 0) ::close(source_fd_);
}

void FileSink::write(const void* p, size_t n) {
  if (buf_.size() + n > kBuffer) flush();
  if (n >= kBuffer) raw_write(static_cast<const uint8_t*>(p), n);
  else buf_.append(static_cast<const char*>(p), n);
}

void FileSink::write_blob(const ir::Blob& b) {
  int src = b.length >= kCopyThreshold ? source_fd(b.buffer.get()) : -1;
  if (src < 0) {  // memory, small, or the file was replaced: copy from the mapping
    write(b.data(), b.length);
    return;
  }
  flush();
  copy_range(src, b.offset, b.length);
}

bool FileSink::write_whole(const ir::Buffer* source) {
  int src = source_fd(source);
  if (src < 0) return false;
  flush();
#ifdef FICLONE
  if (::ioctl(fd_, FICLONE, src) == 0) {
    if (::lseek(fd_, 0, SEEK_END) < 0) fail("cannot seek in", errno);
    return true;
  }
#endif
  copy_range(src, 0, source->size());
  return true;
}

void FileSink::close() {
  flush();
  int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) fail("cannot finish writing", errno);
}

void FileSink::fail(const char* what, int err) {
  throw ir::ModelError(std::string(what) + " " + path_ + ": " + std::strerror(err));
}

void FileSink::flush() {
  if (!buf_.empty()) raw_write(reinterpret_cast<const uint8_t*>(buf_.data()), buf_.size());
  buf_.clear();
}

void FileSink::raw_write(const uint8_t* p, size_t n) {
  while (n) {
    ssize_t k = ::write(fd_, p, n);
    if (k < 0) {
      if (errno == EINTR) continue;
      fail("cannot write", errno);
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
}

// File-to-file copy: the kernel moves the bytes, our memory never holds them
// (Linux; elsewhere, and where the kernel cannot, through a 1 MiB buffer).
void FileSink::copy_range(int in, uint64_t offset, uint64_t length) {
#ifdef __linux__
  loff_t off = static_cast<loff_t>(offset);
  uint64_t left = length;
  while (left) {
    ssize_t k = ::copy_file_range(in, &off, fd_, nullptr, left, 0);
    if (k > 0) {
      left -= static_cast<uint64_t>(k);
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    // Not supported here (old kernel, some file systems), or the source ended early.
    if (k == 0 || errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP || errno == EPERM) {
      copy_by_reading(in, off, left);
      return;
    }
    fail("cannot copy into", errno);
  }
#else
  copy_by_reading(in, static_cast<int64_t>(offset), length);
#endif
}

void FileSink::copy_by_reading(int in, int64_t off, uint64_t left) {
  std::string chunk(kBuffer, '\0');
  while (left) {
    ssize_t k = ::pread(in, chunk.data(), std::min<uint64_t>(left, kBuffer), static_cast<off_t>(off));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) fail("source shrank while copying into", k < 0 ? errno : EIO);
    raw_write(reinterpret_cast<const uint8_t*>(chunk.data()), static_cast<size_t>(k));
    off += k;
    left -= static_cast<uint64_t>(k);
  }
}

int FileSink::source_fd(const ir::Buffer* b) {
  if (!b) return -1;
  if (b != source_) {
    if (source_fd_ >= 0) ::close(source_fd_);
    source_ = b;
    source_fd_ = b->open_source();
  }
  return source_fd_;
}

}  // namespace pyonnxopt::proto
