// DiskTier: the local-disk level of the cache (docs/disk-tier.md).
//
// Records (kvstore/chunk_codec.h) live in preallocated record files
// `<dir>/records/rec-<id>.dat` (fallocate), each record at a 4096-aligned offset and
// padded with zeros to a multiple of 4096, written and read with io_uring on O_DIRECT
// descriptors (pieces of 1 MiB, `queue_depth` in flight). The index
// (key → file, offset, length, payload checksum, last access, namespace, parent,
// token count) is a RocksDB database in `<dir>/index`.
//
// Write order: the record is written and fdatasync'd BEFORE its index entry is written
// (RocksDB, synced WAL), so a record whose write was interrupted has no index entry and
// is never read back. With `commit = kEachPut` (default) Put returns after both, so every
// acknowledged Put survives a crash of the process or the machine. With `kGrouped` Put
// returns once the record is written (readable from then on) and a background commit
// makes it durable within `commit_delay_ms` (one fdatasync per file and one synced index
// batch for every record written meanwhile); Sync() waits for it. A crash loses at most
// the puts of the last commit window, never leaves a torn record indexed. Index deletions are
// synced before their extent is reused. Every Get re-verifies the record's header and payload
// checksum against the index; a record that fails (or whose file was truncated or deleted behind
// the tier's back) counts an integrity error, loses its index entry and reads as NotFound.
//
// Space: `capacity_bytes` bounds the total size of the record files (strict). Files are
// created on demand (file_bytes each, the last one smaller); when no extent fits and no
// file can be created (capacity reached, or fallocate says ENOSPC), unpinned records
// are evicted in the victim order of the tier's CachePolicy (DiskTierOptions::cache_policy;
// "lru" = least recently accessed first). used_bytes counts padded extents. A Put asked
// for its victims (PutContext::keep_victims) reads each victim once, after its index
// entry is deleted and before its extent is reused, into an aligned buffer it returns
// (no second read, no hash: the tier it is demoted to checks it as it checks every Put);
// otherwise victims are not read at all.
//
// Admission (CachePolicy::Admit) comes before any space is reserved: a declined record
// is not written and Put returns OK (counted in stats().admission_rejects). Get hits and
// Pin are uses; Get and Pin of an absent key are misses. Records whose TTL ran out
// (CachePolicy::VisitExpired) are dropped, unless pinned or being read, at the start of
// each Put (counted in stats().ttl_expired).
#ifndef KVSTORE_DISK_TIER_H_
#define KVSTORE_DISK_TIER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvstore/absence_record.h"
#include "kvstore/cache_policy.h"
#include "kvstore/clock.h"
#include "kvstore/health_registry.h"
#include "kvstore/tier.h"

namespace kvt {

// The record files' I/O layer (libkvstore/src/disk_file_system.h). Tests wrap the real
// one to inject faults (tests/kvstore/fault_injection_fs.h).
class DiskFileSystem;

// The I/O engine actually in use.
enum class DiskIoBackend : uint8_t { kIoUring = 0, kPread = 1 };
std::string_view DiskIoBackendName(DiskIoBackend backend);

// When a Put is durable (see the file comment).
enum class DiskCommit : uint8_t {
  kEachPut = 0,  // Put returns after fdatasync + synced index write of its own record
  kGrouped = 1,  // Put returns after the write; a group commit follows within commit_delay_ms
};

struct DiskTierOptions {
  // Directory owned by this tier (created if missing). Holds records/ and index/.
  std::string dir;
  // Bound on the total size of the record files, bytes. REQUIRES: multiple of 4096, > 0.
  uint64_t capacity_bytes = 0;
  // I/Os in flight per transfer. REQUIRES: 1..256.
  uint32_t queue_depth = 8;
  // Size of one I/O, bytes; larger records are split. REQUIRES: multiple of 4096.
  uint64_t io_bytes = 1ull << 20;
  // Size of each preallocated record file, bytes; a record never spans files, so this
  // is also the largest record the tier accepts. REQUIRES: multiple of 4096, > 0.
  uint64_t file_bytes = 1ull << 30;
  // Use pread/pwrite even where io_uring is allowed (tests, debugging).
  bool force_pread = false;
  // Open record files with O_DIRECT. When the filesystem refuses it (e.g. tmpfs) the
  // tier falls back to buffered I/O (still fdatasync'd) and logs a warning.
  bool direct_io = true;
  // On Open, read each indexed record's header (one 4 KiB read) and drop entries whose
  // record does not match. Payload checksums are verified on every Get regardless.
  bool verify_headers_on_open = true;
  // Free space, bytes, kept on the filesystem for the RocksDB index: index writes (and
  // so puts, evictions and erases) are refused with ResourceExhausted while less is
  // free, and no record file is created that would eat into it. The index then never
  // meets ENOSPC, which Debian's RocksDB does not survive (issue 11). 0 disables.
  uint64_t index_reserve_bytes = 16ull << 20;
  // Last-access times are kept in memory and written to the index in batches of this
  // many (and on destruction). REQUIRES: >= 1.
  uint32_t access_flush_batch = 256;
  // Durability of an acknowledged Put (DiskCommit). kGrouped trades the last
  // commit_delay_ms of acknowledged puts on a crash for one commit per group.
  DiskCommit commit = DiskCommit::kEachPut;
  // kGrouped: the longest a written record waits for its commit to start, ms.
  // REQUIRES: 1..60000.
  uint32_t commit_delay_ms = 10;
  // The layer every record-file allocate/write/sync/read goes through; null = the real
  // one (io_uring or pread, and the syscalls). Tests pass a fault-injecting wrapper.
  std::shared_ptr<DiskFileSystem> file_system;
  // Admission and eviction order (kvstore/cache_policy.h); "lru" = recency only. At Open
  // the policy is told of the indexed records oldest access first.
  CachePolicyOptions cache_policy;
  // When set, builds the policy instead of MakeCachePolicy(cache_policy, capacity_bytes).
  CachePolicyFactory cache_policy_factory;
  // Time of access stamps, of the group commit's delay and of the policy's TTL (when
  // cache_policy.clock is empty); null = SystemClock().
  std::shared_ptr<Clock> clock;
  // Where the group committer thread ("disk-commit") reports; null =
  // HealthRegistry::Default().
  std::shared_ptr<HealthRegistry> health;
  // Where the tier notes the records it declines, evicts, expires or erases
  // (kvstore/absence_record.h, shared by a store's tiers); null = not noted.
  std::shared_ptr<AbsenceRecord> absence;

  // OK, or InvalidArgument naming the field and the expected range.
  absl::Status Validate() const;
};

// Extra counters beyond TierStats.
struct DiskTierExtraStats {
  uint64_t files = 0;             // record files in use
  uint64_t file_bytes_total = 0;  // their total size (<= capacity_bytes)
  uint64_t dropped_on_open = 0;   // index entries dropped by Open's checks
  uint64_t files_lost = 0;        // record files found deleted behind the tier's back
  uint64_t enospc = 0;            // ENOSPC seen from fallocate/write/fdatasync or the index
  // An index write failed (e.g. ENOSPC that raced past index_reserve_bytes): the next
  // write, once space is back, reopens the index first (not DB::Resume(): see
  // docs/disk-tier.md). Until then puts fail.
  bool index_write_stopped = false;
  uint64_t index_reopens = 0;             // times the index was reopened after such an error
  uint64_t index_low_space_refusals = 0;  // index writes refused: free < index_reserve_bytes
  uint64_t group_commits = 0;             // kGrouped: commits that wrote index entries
  uint64_t group_committed_records = 0;   // kGrouped: records those commits made durable
  uint64_t uncommitted = 0;               // kGrouped: written records awaiting their commit
  uint64_t record_reads = 0;              // whole records read from the files (Gets and victims)
  uint64_t victim_reads = 0;  // of those, victims read to be returned from Put (unverified)
};

// Thread-safe. All methods may be called concurrently; I/O runs outside the tier's
// locks (a pool of io_uring instances, one per concurrent caller).
class DiskTier final : public Tier {
 public:
  // Opens (or creates) the tier in options.dir, rebuilding the allocator's free lists
  // and the LRU order from the index. InvalidArgument for bad options; Internal or
  // Unavailable when the directory or the RocksDB index cannot be opened (e.g. held by
  // another process).
  static absl::StatusOr<std::unique_ptr<DiskTier>> Open(const DiskTierOptions& options);
  // A TieredStore factory: Open(options).
  static TierFactory Factory(DiskTierOptions options);
  ~DiskTier() override;

  // "disk": durable, local, verifies every read, pinnable, evicts.
  TierCaps caps() const override;

  // See Tier::Put. Also ResourceExhausted for ENOSPC on write, with nothing stored;
  // ResourceExhausted when the record is larger than file_bytes or capacity_bytes.
  using Tier::Put;
  absl::StatusOr<PutResult> Put(std::span<const std::byte> record,
                                const PutContext& context) override;
  // See Tier::Get. The record is verified (header, key, namespace, length and payload
  // checksum against the index) before OK is returned; a record that fails is dropped,
  // counted (stats().integrity_errors) and answered DataLoss. On any error the contents
  // of `out` are unspecified. Fastest when out.data() is 4096-aligned (no bounce copy).
  absl::StatusOr<uint64_t> Get(const ChunkKey& key, std::span<std::byte> out) override;
  // Get for the store's own reads (a peek such as `kvtier ls --show-layout`): verified
  // like Get, but counts no hit or miss and changes no access time or policy order.
  absl::StatusOr<uint64_t> CopyForWriteBack(const ChunkKey& key, std::span<std::byte> out) override;
  std::vector<ChunkStat> Stat(std::span<const ChunkKey> keys) override;
  absl::Status Erase(const ChunkKey& key) override;
  // Ordered by key (the index's order); page_token = ToHex() of the last key of the
  // previous page. InvalidArgument for a bad page_size or page_token.
  absl::StatusOr<ListPage> List(const ListOptions& options) override;
  TierStats stats() const override;
  PinHandle Pin(const ChunkKey& key) override;

  DiskIoBackend backend() const;
  bool direct_io() const;
  DiskTierExtraStats extra_stats() const;
  // Writes batched last-access times to the index now.
  absl::Status FlushAccessTimes();
  // kGrouped: commits every record written before the call now (fdatasync of their
  // files, one synced index batch) and returns when they are durable. OK at once with
  // kEachPut. On failure (e.g. ResourceExhausted: the index's reserve) the records stay
  // readable and are retried by the next commit; a record whose fdatasync failed is
  // dropped (it reads as NotFound), counted in stats().io_errors.
  absl::Status Sync();

  class Impl;

 private:
  explicit DiskTier(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvt

#endif  // KVSTORE_DISK_TIER_H_
