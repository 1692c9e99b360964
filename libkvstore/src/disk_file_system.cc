#include "disk_file_system.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "absl/strings/str_cat.h"

namespace kvt {
namespace {

class RealFs final : public DiskFileSystem {
 public:
  absl::Status Allocate(const DiskFileRef& f, uint64_t size) override {
    int err = ::fallocate(f.fd, 0, 0, static_cast<off_t>(size)) == 0 ? 0 : errno;
    if (err == EOPNOTSUPP) {
      // Filesystems without fallocate: a sparse file of the right size still works.
      err = ::ftruncate(f.fd, static_cast<off_t>(size)) == 0 ? 0 : errno;
    }
    if (err == 0) return absl::OkStatus();
    return internal::ErrnoToStatus(
        err, absl::StrCat("fallocate ", std::string(f.path), " to ", size, " bytes"));
  }
  absl::Status Write(internal::IoRing& ring, const DiskFileRef& f, uint64_t offset,
                     std::span<const std::byte> src) override {
    return ring.WriteAt(f.fd, offset, src);
  }
  absl::Status Sync(const DiskFileRef& f) override {
    if (::fdatasync(f.fd) == 0) return absl::OkStatus();
    return internal::ErrnoToStatus(errno, absl::StrCat("fdatasync ", std::string(f.path)));
  }
  absl::Status Read(internal::IoRing& ring, const DiskFileRef& f, uint64_t offset, uint64_t len,
                    std::span<std::byte> dst, const internal::InOrderCallback& in_order) override {
    return ring.ReadAt(f.fd, offset, len, dst, in_order);
  }
};

}  // namespace

std::shared_ptr<DiskFileSystem> RealDiskFileSystem() {
  static const std::shared_ptr<DiskFileSystem> fs = std::make_shared<RealFs>();
  return fs;
}

}  // namespace kvt
