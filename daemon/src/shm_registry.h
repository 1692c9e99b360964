// ShmRegistry: the shared-memory regions clients attached (ShmAttach), each owned by the
// tenant that attached it, and the check of a slice a Put or Get names in one.
//
// Region ids start at a random value per daemon start, so a client that still holds the
// id of a region of an earlier daemon process names no region of this one: "not
// attached", never another client's region.
#ifndef KVT_DAEMON_SHM_REGISTRY_H_
#define KVT_DAEMON_SHM_REGISTRY_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/config.h"
#include "kvstore/shm_region.h"
#include "proto/kvtier.pb.h"

namespace kvt::daemon {

// A slice of an attached region, checked: inside the region, and for a progressive
// transfer with its 64-byte aligned control block inside the region and outside the data.
// Holds the region mapped while it lives (a Detach meanwhile unmaps it only after).
struct ShmSliceRef {
  std::shared_ptr<ShmRegion> region;
  uint64_t offset = 0;
  uint64_t length = 0;
  bool progressive = false;
  uint64_t progress_offset = 0;  // the control block, when progressive

  std::byte* data() const { return region->data() + offset; }
  std::byte* progress_block() const { return region->data() + progress_offset; }
};

// Thread-safe.
class ShmRegistry {
 public:
  // Reads shm_enabled, shm_max_region_bytes, shm_max_regions, shm_first_region_id
  // (0 = random). REQUIRES: `config` outlives this object.
  explicit ShmRegistry(const DaemonConfig& config);

  struct Attached {
    uint64_t id = 0;
    std::string path;
    uint64_t bytes = 0;
  };
  // A new region of `bytes` for `tenant`. FailedPrecondition when shared memory is off,
  // InvalidArgument for a size outside 1 MiB .. shm_max_region_bytes, ResourceExhausted
  // when shm_max_regions are attached.
  absl::StatusOr<Attached> Attach(uint64_t bytes, const std::string& tenant);
  // NotFound unless `tenant` attached region `id`. The region is unmapped when the last
  // transfer using it ends.
  absl::Status Detach(uint64_t id, const std::string& tenant);
  // The slice `slice` names in a region of `tenant`; InvalidArgument naming the field
  // (an unknown or another tenant's region reads as "not attached").
  absl::StatusOr<ShmSliceRef> Resolve(const ::kvtier::v1::ShmSlice& slice,
                                      const std::string& tenant);
  size_t size() const;

 private:
  struct Entry {
    std::shared_ptr<ShmRegion> region;
    std::string tenant;
  };
  const DaemonConfig& config_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, Entry> regions_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace kvt::daemon

#endif  // KVT_DAEMON_SHM_REGISTRY_H_
