// Private to libkvstore (and its tests): the file operations of the disk tier's record
// files, as one replaceable layer. DiskTier calls only these for record-file data
// (allocate, write, sync, read); the real layer is uring_file.h's IoRing plus the
// syscalls. Tests wrap it (tests/kvstore/fault_injection_fs.h, in the style of RocksDB's
// FaultInjectionTestFS) to inject errors, short reads, torn writes and slow I/O without
// hooks in the tier itself.
//
// Errors are absl::Status made by internal::ErrnoToStatus (the one place -errno
// becomes a Status): ENOSPC → ResourceExhausted, EIO → DataLoss, ...; a read that meets
// the end of the file early is OutOfRange.
#ifndef KVSTORE_SRC_DISK_FILE_SYSTEM_H_
#define KVSTORE_SRC_DISK_FILE_SYSTEM_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "absl/status/status.h"
#include "uring_file.h"

namespace kvt {

// One open record file, as the tier knows it. Borrowed for the duration of a call.
struct DiskFileRef {
  int fd = -1;
  uint32_t id = 0;  // record file id (rec-<id>.dat)
  std::string_view path;
};

// Thread-safe: the tier calls it from many threads at once (each with its own IoRing).
class DiskFileSystem {
 public:
  virtual ~DiskFileSystem() = default;

  // Makes the file `size` bytes long with its blocks allocated (fallocate; a sparse
  // ftruncate where the filesystem has no fallocate). ResourceExhausted for ENOSPC.
  virtual absl::Status Allocate(const DiskFileRef& f, uint64_t size) = 0;
  // Writes src at `offset`, zero-padded to a multiple of 4096 (IoRing::WriteAt).
  // REQUIRES: offset % 4096 == 0.
  virtual absl::Status Write(internal::IoRing& ring, const DiskFileRef& f, uint64_t offset,
                             std::span<const std::byte> src) = 0;
  // fdatasync.
  virtual absl::Status Sync(const DiskFileRef& f) = 0;
  // Reads `len` bytes at `offset` into dst[0, len) (IoRing::ReadAt): OutOfRange when the
  // file ends first. REQUIRES: offset % 4096 == 0, dst.size() >= len. `in_order`, when
  // set, sees the bytes in file order, exactly once, before OK is returned.
  virtual absl::Status Read(internal::IoRing& ring, const DiskFileRef& f, uint64_t offset,
                            uint64_t len, std::span<std::byte> dst,
                            const internal::InOrderCallback& in_order) = 0;
};

// The real layer (io_uring or pread as the ring says, and the syscalls). Shared, stateless.
std::shared_ptr<DiskFileSystem> RealDiskFileSystem();

}  // namespace kvt

#endif  // KVSTORE_SRC_DISK_FILE_SYSTEM_H_
