// Private to libkvstore: the DiskTier's RocksDB index (docs/disk-tier.md).
//
// RocksDB key   = 'c' + ChunkKey as 16 bytes big-endian (hi, then lo), so iteration
//                 order equals the order of ChunkKey::ToHex().
// RocksDB value = 73 bytes, little-endian, see EncodeIndexValue.
// rocksdb::Status becomes absl::Status in exactly one place: RocksToStatus().
#ifndef KVSTORE_SRC_DISK_TIER_INDEX_H_
#define KVSTORE_SRC_DISK_TIER_INDEX_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvstore/types.h"

namespace rocksdb {
class DB;
class Status;
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

// Thread-safe (RocksDB is). Ordering between writers is the caller's job.
class DiskIndex {
 public:
  static absl::StatusOr<std::unique_ptr<DiskIndex>> Open(const std::string& path);
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

 private:
  explicit DiskIndex(rocksdb::DB* db);
  std::unique_ptr<rocksdb::DB> db_;
};

}  // namespace kvt::internal

#endif  // KVSTORE_SRC_DISK_TIER_INDEX_H_
