// ShmRegion: a shared-memory mapping for the same-host fast path between a kvtier
// client and kvtierd (docs/daemon.md, "Shared memory").
//
// The daemon creates the region with memfd_create (so nothing is left behind in
// /dev/shm if it is killed) and tells the client the path /proc/<daemon pid>/fd/<fd>;
// the client opens that path O_RDWR and maps it MAP_SHARED. Only a process of the
// same user (or one allowed to ptrace the daemon) can open it. Payload bytes then move
// through the mapping; control stays on gRPC.
#ifndef KVSTORE_SHM_REGION_H_
#define KVSTORE_SHM_REGION_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/statusor.h"

namespace kvt {

// Not thread-safe for Create/Open/destruction; the mapped bytes may be used from any
// thread (synchronisation of their contents is the caller's business).
class ShmRegion {
 public:
  // Creates an anonymous memfd region of `bytes` (rounded up to 4096) and maps it.
  // InvalidArgument for 0 bytes; Internal/ResourceExhausted from the system calls.
  static absl::StatusOr<std::unique_ptr<ShmRegion>> Create(uint64_t bytes, const std::string& name);
  // Opens and maps an existing region by path (e.g. "/proc/123/fd/7"). The file must be
  // at least `bytes` long. NotFound/PermissionDenied/Internal from the system calls.
  static absl::StatusOr<std::unique_ptr<ShmRegion>> Open(const std::string& path, uint64_t bytes);
  ~ShmRegion();
  ShmRegion(const ShmRegion&) = delete;
  ShmRegion& operator=(const ShmRegion&) = delete;

  std::byte* data() const { return data_; }
  uint64_t size() const { return size_; }
  std::span<std::byte> bytes() const { return {data_, static_cast<size_t>(size_)}; }
  // Path another process of the same user opens to map this region (Create only).
  const std::string& path() const { return path_; }

  // True when [offset, offset + length) lies inside the region (overflow-safe).
  bool Contains(uint64_t offset, uint64_t length) const {
    return offset <= size_ && length <= size_ - offset;
  }

 private:
  ShmRegion(int fd, std::byte* data, uint64_t size, std::string path)
      : fd_(fd), data_(data), size_(size), path_(std::move(path)) {}
  int fd_;
  std::byte* data_;
  uint64_t size_;
  std::string path_;
};

}  // namespace kvt

#endif  // KVSTORE_SHM_REGION_H_
