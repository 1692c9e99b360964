// TieredStore: ordered tiers (0 = fastest, e.g. host → disk → remote) composed into
// one cache. Put lands in tier 0 and is written down asynchronously; Get searches
// top-down and promotes hits into tier 0; a tier-0 eviction demotes to the next tier
// when the record is not already there; Lookup answers without moving data and can
// pin what it promises under a lease with a deadline.
#ifndef KVSTORE_TIERED_STORE_H_
#define KVSTORE_TIERED_STORE_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvstore/tier.h"
#include "kvstore/types.h"

namespace kvt {

struct TieredStoreOptions {
  // How long a Lookup's pins live if no Load releases them.
  std::chrono::milliseconds lease_timeout{10000};
  // Write puts down to lower tiers (tiers 1..n-1 except remote when false below).
  bool write_through = true;
  // Also write puts through to a remote tier (kRemote) when present.
  bool write_through_remote = true;
  // Bytes of write-back queued before Put blocks (back-pressure); 0 = unlimited.
  uint64_t max_pending_write_bytes = 1ull << 30;

  absl::Status Validate() const;
};

using LeaseId = uint64_t;
inline constexpr LeaseId kNoLease = 0;

struct LookupResult {
  // Number of leading keys present in some tier.
  size_t num_leading_hits = 0;
  // Per leading hit, the index of the fastest tier holding it (size == num_leading_hits).
  std::vector<int> tier_index;
  std::vector<TierKind> tier_kind;
  // Lease pinning the leading hits, when pinning was requested; kNoLease otherwise.
  LeaseId lease = kNoLease;
};

struct GetInfo {
  int tier_index = -1;  // where the record was found
  bool promoted = false;
};

// Counters since creation plus current gauges of the write-back machinery.
struct TieredStoreStats {
  uint64_t hits = 0;                // Get found the key in some tier
  uint64_t misses = 0;              // Get found it nowhere
  uint64_t promotions = 0;          // hits below tier 0 copied into tier 0
  uint64_t demotions_queued = 0;    // evicted records queued for the next tier
  uint64_t demotions_dropped = 0;   // evicted records dropped (queue over 2x the limit)
  uint64_t demotions_skipped = 0;   // evicted records the next tier already held
  uint64_t writebacks = 0;          // successful Puts into lower tiers by the background thread
  uint64_t writeback_errors = 0;    // failed Puts into lower tiers (the record stays above)
  uint64_t writebacks_skipped = 0;  // write-throughs whose record had left tier 0 first
  uint64_t writes_dropped = 0;      // write-backs not queued because the thread is dead
  uint64_t integrity_errors = 0;    // lower-tier records that failed VerifyChunk (erased there)
  uint64_t pending_write_bytes = 0; // bytes queued or being written now
};

// Thread-safe.
//
// Construction, e.g. host memory over disk:
//   std::vector<std::unique_ptr<Tier>> tiers;
//   tiers.push_back(*HostTier::Create({.capacity_bytes = 8ull << 30}));
//   tiers.push_back(std::move(disk_tier));
//   auto store = TieredStore::Create(std::move(tiers), TieredStoreOptions{});
// The store installs itself as the EvictionListener of every tier but the last.
//
// Threads and locks: one supervised background thread ("write-back") performs the
// queued write-through Puts and demotions in FIFO order and reaps expired leases.
// An eviction listener only copies the record into the queue (never blocks, never
// calls into a tier). The store never calls into a tier while holding its own locks.
// If the thread dies (an exception escaped a tier), healthy() turns false, the death
// is logged, Put still lands in tier 0 but is no longer written down
// (stats().writes_dropped), and Flush no longer waits.
class TieredStore {
 public:
  // REQUIRES: at least one tier. The store owns the tiers.
  static absl::StatusOr<std::unique_ptr<TieredStore>> Create(
      std::vector<std::unique_ptr<Tier>> tiers, const TieredStoreOptions& options);
  ~TieredStore();  // drains the write-back queue

  // Stores a record (header checked) in tier 0 and queues it for the lower tiers
  // (per write_through / write_through_remote). Blocks while more than
  // max_pending_write_bytes are queued. When tier 0 answers ResourceExhausted (record
  // larger than tier 0, or tier 0 all pinned) and there is a lower tier, the record is
  // queued for the lower tiers only and Put returns OK (a Get misses until it lands).
  // InvalidArgument/DataLoss/FailedPrecondition for a bad record (nothing stored).
  absl::Status Put(std::span<const std::byte> record);

  // Copies the record of `key` into `out`, searching top-down; a hit below tier 0 is
  // promoted. NotFound on a miss; OutOfRange if `out` is too small. A record whose
  // write is still in flight is either complete or a miss, never partial.
  // A hit below tier 0 is checked with VerifyChunk before it is returned or promoted;
  // a failing record is erased from that tier, counted, and the search continues.
  // Other tier errors (Unavailable, I/O) count as a miss in that tier.
  absl::StatusOr<uint64_t> Get(const ChunkKey& key, std::span<std::byte> out,
                               GetInfo* info = nullptr);
  // Allocating variant.
  absl::StatusOr<std::vector<std::byte>> Get(const ChunkKey& key, GetInfo* info = nullptr);

  // Leading hits and their tiers without moving data (no promotion, no LRU touch).
  // With `pin`, pins the leading hits in the tier each was found in until
  // ReleaseLease or lease_timeout; a key that left its tier between the presence
  // check and the pin ends the leading run there (the result is never optimistic).
  // lease == kNoLease when nothing was pinned. Reaps expired leases first.
  LookupResult Lookup(std::span<const ChunkKey> keys, bool pin = false);
  // Releases a lease's pins (no-op for an unknown or expired lease).
  void ReleaseLease(LeaseId lease);
  // Record bytes of the distinct (tier, chunk) pairs pinned by live leases, after
  // reaping expired ones (a chunk pinned by several leases counts once).
  uint64_t pinned_bytes();
  // Leases that expired without a release, since creation.
  uint64_t expired_leases() const;

  // Erases `key` from every tier.
  absl::Status Erase(const ChunkKey& key);
  // Blocks until every queued write-back has completed (or failed and been counted).
  void Flush();

  size_t num_tiers() const;
  Tier& tier(size_t index);

  // False once the background write-back thread has died (see class comment).
  bool healthy() const;
  TieredStoreStats stats() const;

 private:
  class Impl;
  explicit TieredStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvt

#endif  // KVSTORE_TIERED_STORE_H_
