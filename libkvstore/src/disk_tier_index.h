// Private to libkvstore: the DiskTier's RocksDB index (docs/disk-tier.md).
//
// RocksDB key   = 'c' + ChunkKey as 16 bytes big-endian (hi, then lo), so iteration
//                 order equals the order of ChunkKey::ToHex().
// RocksDB value = 73 bytes, little-endian, see EncodeIndexValue.
// rocksdb::Status becomes absl::Status in exactly one place: RocksToStatus().
#ifndef KVSTORE_SRC_DISK_TIER_INDEX_H_
#define KVSTORE_SRC_DISK_TIER_INDEX_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kvstore/types.h"

namespace rocksdb {
class DB;
class Status;
class WriteBatch;
}  // namespace rocksdb

namespace kvt::internal {

inline constexpr uint8_t kIndexValueVersion = 1;
inline constexpr size_t kIndexValueBytes = 73;

struct IndexEntry {
  uint32_t file_id = 0;
  uint64_t offset = 0;        // bytes, multiple of 4096
  uint64_t record_bytes = 0;  // unpadded record length
  uint64_t payload_checksum = 0;
  int64_t last_access_ms = 0;  // unix ms
  NamespaceId ns;
  ChunkKey parent;
  uint32_t token_count = 0;
};

absl::Status RocksToStatus(const rocksdb::Status& s, std::string_view context);

std::string EncodeIndexKey(const ChunkKey& key);
// DataLoss unless exactly 17 bytes with the chunk prefix.
absl::StatusOr<ChunkKey> DecodeIndexKey(std::string_view k);
std::string EncodeIndexValue(const IndexEntry& e);
// DataLoss unless kIndexValueBytes bytes of a known version.
absl::StatusOr<IndexEntry> DecodeIndexValue(std::string_view v);

struct DiskIndexStats {
  bool write_stopped = false;       // a write failed; the next one reopens the database
  uint64_t reopens = 0;             // times the database was reopened after a write error
  uint64_t failed_reopens = 0;      // reopen attempts that failed (retried on later writes)
  uint64_t low_space_refusals = 0;  // writes refused: free space below the reserve
};

// Free bytes for unprivileged writers on the filesystem holding `path` (statvfs).
absl::StatusOr<uint64_t> FreeBytes(const std::string& path);

// Thread-safe (RocksDB is). Ordering between writers is the caller's job.
//
// Free space: while the filesystem holding the index has less than `reserve_bytes`
// free, every write is refused with ResourceExhausted before it reaches RocksDB (see
// Write() in disk_tier_index.cc for why RocksDB must not meet ENOSPC). 0 disables.
//
// Write errors (should a filler race past the reserve): after a write fails with an
// I/O error the database is never written again; the next write (once free space is
// above the reserve) closes and reopens it (a new WAL; synced writes are replayed) and
// then goes through. While it cannot be reopened, writes fail with its status. RocksDB's
// info log goes to spdlog, never to a file (see disk_tier_index.cc).
class DiskIndex {
 public:
  static absl::StatusOr<std::unique_ptr<DiskIndex>> Open(const std::string& path,
                                                         uint64_t reserve_bytes);
  ~DiskIndex();

  // sync = the WAL is fsync'd before returning.
  absl::Status Put(const ChunkKey& key, const IndexEntry& e, bool sync);
  absl::Status Delete(std::span<const ChunkKey> keys, bool sync);
  absl::Status PutMany(std::span<const std::pair<ChunkKey, IndexEntry>> entries, bool sync);

  // Visits entries in key order starting at `start` (inclusive). Stops when fn returns
  // false. Undecodable entries are reported with ok=false so the caller can drop them.
  using Visitor = std::function<bool(std::string_view raw_key, absl::StatusOr<ChunkKey> key,
                                     absl::StatusOr<IndexEntry> entry)>;
  absl::Status Scan(const std::string& start_raw_key, const Visitor& fn);
  absl::Status DeleteRaw(std::span<const std::string> raw_keys, bool sync);

  DiskIndexStats stats() const;

 private:
  DiskIndex(rocksdb::DB* db, std::string path, uint64_t reserve_bytes);
  absl::Status CheckReserve(std::string_view what);
  absl::Status Write(rocksdb::WriteBatch* batch, bool sync, std::string_view what)
      ABSL_LOCKS_EXCLUDED(db_mu_);

  absl::Status Reopen(std::string_view what) ABSL_LOCKS_EXCLUDED(db_mu_);

  // Readers (writes, scans) share it; a reopen holds it exclusively.
  mutable absl::Mutex db_mu_;
  std::unique_ptr<rocksdb::DB> db_ ABSL_GUARDED_BY(db_mu_);
  const std::string path_;
  const uint64_t reserve_bytes_;
  std::atomic<bool> stopped_{false};
  std::atomic<uint64_t> low_space_refusals_{0};
  std::atomic<uint64_t> reopens_{0};
  std::atomic<uint64_t> failed_reopens_{0};
};

}  // namespace kvt::internal

#endif  // KVSTORE_SRC_DISK_TIER_INDEX_H_
