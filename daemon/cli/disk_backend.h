// Offline backend: opens a disk tier directory (kvstore/disk_tier.h) directly, for when
// no kvtierd runs. The directory must already hold a disk tier (index/ and records/);
// it is never created. `dir` may also be a kvtierd data_dir (its tier lives in <dir>/disk). A
// directory in use by a running kvtierd cannot be opened (its RocksDB index is locked): use
// --daemon then.
#ifndef KVTIER_CLI_DISK_BACKEND_H_
#define KVTIER_CLI_DISK_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "backend.h"

namespace kvt::cli {

struct DiskBackendOptions {
  std::string dir;
  // Capacity to report (and open the tier with). 0 = the total size of the record files
  // already there. Never smaller than that total: DiskTier::Open deletes record files
  // beyond its capacity, so a smaller value is refused (InvalidArgument).
  uint64_t capacity_bytes = 0;
};

// NotFound when `dir` holds no disk tier; Unavailable when it is locked by another
// process; InvalidArgument for a capacity below the files already there.
absl::StatusOr<std::unique_ptr<CacheBackend>> OpenDiskBackend(const DiskBackendOptions& options);

}  // namespace kvt::cli

#endif  // KVTIER_CLI_DISK_BACKEND_H_
