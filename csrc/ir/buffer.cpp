#include "ir/buffer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

namespace pyonnxopt::ir {

namespace {

// Opens without blocking (a FIFO would wait for a writer for ever) and
// accepts only regular files.
int open_regular(const std::string& path, struct stat& st) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), path);
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw std::system_error(err, std::generic_category(), path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw std::system_error(S_ISDIR(st.st_mode) ? EISDIR : EINVAL, std::generic_category(), path + " is not a regular file");
  }
  return fd;
}

}  // namespace

MappedFile::MappedFile(std::string path) : path_(std::move(path)) {
  struct stat st;
  ::close(open_regular(path_, st));
  size_ = static_cast<uint64_t>(st.st_size);
  device_ = static_cast<uint64_t>(st.st_dev);
  inode_ = static_cast<uint64_t>(st.st_ino);
}

MappedFile::~MappedFile() {
  if (addr_) ::munmap(addr_, size_);
}

int MappedFile::open_source() const {
  struct stat st;
  int fd;
  try {
    fd = open_regular(path_, st);
  } catch (const std::system_error&) {
    return -1;
  }
  if (static_cast<uint64_t>(st.st_dev) != device_ || static_cast<uint64_t>(st.st_ino) != inode_ ||
      static_cast<uint64_t>(st.st_size) < size_) {
    ::close(fd);
    return -1;
  }
  return fd;
}

const uint8_t* MappedFile::data() const {
  std::call_once(mapped_once_, [this] {
    if (size_ == 0) return;
    struct stat st;
    int fd = open_regular(path_, st);
    // Another file now under this name, or this one shrunk: mapping it would
    // read the wrong bytes or fault (SIGBUS) past its end.
    if (static_cast<uint64_t>(st.st_ino) != inode_ || static_cast<uint64_t>(st.st_size) < size_) {
      ::close(fd);
      throw std::system_error(EIO, std::generic_category(), path_ + " changed on disk since the model was loaded");
    }
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    ::close(fd);
    if (p == MAP_FAILED) throw std::system_error(err, std::generic_category(), "mmap " + path_);
    addr_ = p;
  });
  return static_cast<const uint8_t*>(addr_);
}

}  // namespace pyonnxopt::ir
