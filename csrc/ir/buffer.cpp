#include "ir/buffer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

namespace pyonnxopt::ir {

const std::string& Buffer::file_path() const {
  static const std::string kEmpty;
  return kEmpty;
}

MappedFile::MappedFile(std::string path) : path_(std::move(path)) {
  int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), path_);
  struct stat st;
  int rc = ::fstat(fd, &st);
  int err = errno;
  ::close(fd);
  if (rc != 0) throw std::system_error(err, std::generic_category(), path_);
  if (!S_ISREG(st.st_mode)) throw std::system_error(EINVAL, std::generic_category(), path_ + " is not a regular file");
  size_ = static_cast<uint64_t>(st.st_size);
}

MappedFile::~MappedFile() {
  if (addr_ && addr_ != MAP_FAILED) ::munmap(addr_, size_);
}

bool MappedFile::is_mapped() const { return addr_ != nullptr; }

const uint8_t* MappedFile::data() const {
  std::call_once(mapped_once_, [this] {
    if (size_ == 0) return;
    int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw std::system_error(errno, std::generic_category(), path_);
    // A file that shrank since open would fault (SIGBUS) on access past its end.
    struct stat st;
    if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < size_) {
      ::close(fd);
      throw std::system_error(EIO, std::generic_category(), path_ + " shrank while in use");
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
