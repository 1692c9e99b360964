#include "kvstore/shm_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace kvt {
namespace {

absl::Status ErrnoStatus(const char* what, const std::string& subject, int err) {
  std::string msg = absl::StrFormat("%s(%s): %s", what, subject, std::strerror(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(msg);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(msg);
    case ENOMEM:
    case ENOSPC:
    case EMFILE:
    case ENFILE:
      return absl::ResourceExhaustedError(msg);
    default:
      return absl::InternalError(msg);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShmRegion>> ShmRegion::Create(uint64_t bytes,
                                                             const std::string& name) {
  if (bytes == 0) return absl::InvalidArgumentError("ShmRegion::Create: bytes must be > 0");
  const uint64_t size = (bytes + 4095) & ~uint64_t{4095};
  int fd = memfd_create(name.c_str(), MFD_CLOEXEC);
  if (fd < 0) return ErrnoStatus("memfd_create", name, errno);
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    int err = errno;
    close(fd);
    return ErrnoStatus("ftruncate", name, err);
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    close(fd);
    return ErrnoStatus("mmap", name, err);
  }
  std::string path = absl::StrFormat("/proc/%d/fd/%d", getpid(), fd);
  return std::unique_ptr<ShmRegion>(new ShmRegion(fd, static_cast<std::byte*>(p), size, path));
}

absl::StatusOr<std::unique_ptr<ShmRegion>> ShmRegion::Open(const std::string& path,
                                                           uint64_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("ShmRegion::Open: bytes must be > 0");
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open", path, errno);
  struct stat st;
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < bytes) {
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrFormat("ShmRegion::Open(%s): file is smaller than %d bytes", path, bytes));
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    close(fd);
    return ErrnoStatus("mmap", path, err);
  }
  return std::unique_ptr<ShmRegion>(new ShmRegion(fd, static_cast<std::byte*>(p), bytes, path));
}

ShmRegion::~ShmRegion() {
  if (data_ != nullptr) munmap(data_, size_);
  if (fd_ >= 0) close(fd_);
}

}  // namespace kvt
