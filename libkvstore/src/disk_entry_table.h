// Private to libkvstore: the disk tier's in-memory record table (docs/disk-tier.md).
//
// Keeps the stored records (DiskRecordMap), the space of their files (DiskSpace) and the
// cache policy's order in step under one lock, through each Put, read, eviction, expiry,
// erase, lost file and group commit, and counts them (DiskTierCounters). It does no I/O
// and writes no index: DiskTier orders each index write with the table change that goes
// with it (its index_mu_, taken before this table's lock), and DiskGroupCommit makes
// published records durable.
#ifndef KVSTORE_SRC_DISK_ENTRY_TABLE_H_
#define KVSTORE_SRC_DISK_ENTRY_TABLE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "disk_record_map.h"
#include "disk_space.h"
#include "disk_tier_counters.h"
#include "disk_tier_index.h"
#include "kvstore/cache_policy.h"
#include "kvstore/clock.h"
#include "kvstore/disk_tier.h"
#include "uring_file.h"

namespace kvt::internal {

// Thread-safe; mu_ is taken after the tier's index_mu_ and before nothing else.
class DiskEntryTable {
 public:
  // One stored record: its index entry, extent, gen, pins, readers, committed.
  using Entry = DiskRecordMap::Entry;
  using Detached = std::pair<ChunkKey, Entry>;

  DiskEntryTable(const DiskTierOptions& options, std::unique_ptr<CachePolicy> policy);

  // --- Open: the files found and the index entries kept.
  void AddFile(uint32_t file_id, uint64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  void SetNextFileId(uint32_t id) ABSL_LOCKS_EXCLUDED(mu_);
  // Claims each entry's extent in order and enters those that claim (the policy told
  // oldest access first); returns the raw index keys of those whose extent overlaps
  // another record's (to drop).
  struct Recovered {
    std::string raw;
    ChunkKey key;
    IndexEntry idx;
  };
  std::vector<std::string> Recover(std::vector<Recovered> entries) ABSL_LOCKS_EXCLUDED(mu_);
  void CountDroppedOnOpen(uint64_t n) ABSL_LOCKS_EXCLUDED(mu_);

  // --- Put
  // The policy's admission; a declined record is counted (admission_rejects).
  bool Admit(const CacheEntryInfo& info, AdmitReason reason) ABSL_LOCKS_EXCLUDED(mu_);
  std::optional<Extent> Allocate(uint64_t padded) ABSL_LOCKS_EXCLUDED(mu_);
  // What makes room for `padded` bytes when Allocate found none: an extent (free now),
  // a new record file to create (id, size within capacity), or unpinned victims in the
  // policy's order, detached from the table (their index entries are the caller's to
  // delete); ResourceExhausted when every record is pinned.
  struct Room {
    std::optional<Extent> extent;
    uint32_t new_file_id = 0;
    uint64_t new_file_bytes = 0;
    std::vector<Detached> victims;
  };
  absl::StatusOr<Room> MakeRoom(uint64_t padded) ABSL_LOCKS_EXCLUDED(mu_);
  // No more record files (the filesystem is full): counted (enospc); true when the tier
  // then has no space at all.
  bool StopNewFiles() ABSL_LOCKS_EXCLUDED(mu_);
  // Victims whose index deletion failed go back where they were (the policy was never
  // told of their removal).
  void Reattach(std::vector<Detached>& victims) ABSL_LOCKS_EXCLUDED(mu_);
  // Their index entries are deleted: the policy forgets them (unless put again).
  void Evicted(std::span<const ChunkKey> keys) ABSL_LOCKS_EXCLUDED(mu_);
  // Frees the victims' extents (each when its last reader is done) and counts them.
  void ReleaseVictims(std::vector<Detached>& victims) ABSL_LOCKS_EXCLUDED(mu_);
  // Enters a written record (readable from now on), replacing the key's entry; pins
  // follow the key. Unavailable when its record file was dropped meanwhile (lost). Not
  // `committed`: the caller hands `gen` to the group commit, with `deferred_gen` when it
  // replaced a committed record (whose extent the index still points at: kept until
  // the commit covering the new one is durable).
  struct Published {
    uint64_t gen = 0;
    std::optional<uint64_t> deferred_gen;
  };
  absl::StatusOr<Published> Publish(const ChunkKey& key, const IndexEntry& e, uint64_t padded,
                                    bool committed, uint64_t bounced) ABSL_LOCKS_EXCLUDED(mu_);
  bool HasFile(uint32_t file_id) const ABSL_LOCKS_EXCLUDED(mu_);
  // The write failed: frees the extent and counts the error.
  void PutFailed(const Extent& ext, const absl::Status& s) ABSL_LOCKS_EXCLUDED(mu_);
  // An I/O error (ResourceExhausted also counts as enospc).
  void CountIoError(const absl::Status& s) ABSL_LOCKS_EXCLUDED(mu_);

  // --- Get
  struct Read {
    IndexEntry idx;
    uint64_t gen = 0;
    bool flush_access = false;  // enough last-access times are dirty to flush
  };
  // Registers a reader of `key` (its extent stays until EndRead). A client read counts
  // the use (or the miss, NotFound) and stamps the access time. OutOfRange when
  // out_bytes is too small.
  absl::StatusOr<Read> BeginRead(const ChunkKey& key, uint64_t out_bytes, bool client_read)
      ABSL_LOCKS_EXCLUDED(mu_);
  void EndRead(const ChunkKey& key, uint64_t gen, const absl::Status& s, bool client_read,
               uint64_t record_bytes) ABSL_LOCKS_EXCLUDED(mu_);
  // A whole record read from a file: `copied` bytes (the read and its bounce copies).
  void CountRecordRead(uint64_t copied) ABSL_LOCKS_EXCLUDED(mu_);
  void CountVictimReads(uint64_t n) ABSL_LOCKS_EXCLUDED(mu_);

  // --- removal (the caller deletes the index entries, then Release)
  // Record `gen` of `key`, detached; nullopt when replaced or gone already.
  std::optional<Entry> DetachIf(const ChunkKey& key, uint64_t gen) ABSL_LOCKS_EXCLUDED(mu_);
  // nullopt when absent; FailedPrecondition when pinned.
  absl::StatusOr<std::optional<Entry>> DetachForErase(const ChunkKey& key) ABSL_LOCKS_EXCLUDED(mu_);
  bool AnyExpired() const ABSL_LOCKS_EXCLUDED(mu_);
  // The unpinned, unread records whose TTL ran out (CachePolicy::VisitExpired).
  std::vector<Detached> DetachExpired() ABSL_LOCKS_EXCLUDED(mu_);
  // After their index deletion: frees the extents when it succeeded (counted as expired
  // when `expired`), else counts one I/O error and leaks them until the next Open (the
  // index may still point at them).
  void Release(std::span<const Entry> entries, const absl::Status& index_delete, bool expired)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A record file removed behind the tier's back: forgets it and drops its entries
  // (counted as integrity errors); returns their keys.
  std::vector<ChunkKey> DropFile(uint32_t file_id) ABSL_LOCKS_EXCLUDED(mu_);

  // --- group commit (DiskCommit::kGrouped); (key, gen) names one published record
  using Gen = DiskRecordMap::Gen;
  // The record files of the records still current among `pending`.
  std::set<uint32_t> FilesOf(std::span<const Gen> pending) const ABSL_LOCKS_EXCLUDED(mu_);
  struct CommitPlan {
    std::vector<std::pair<ChunkKey, IndexEntry>> entries;  // to write
    std::vector<Gen> written;
    std::vector<Gen> to_free;         // replaced records' extents, free once written
    std::vector<Gen> still_deferred;  // replaced records' extents for a later commit
    std::vector<ChunkKey> dropped;    // to delete from the index
  };
  // Under the tier's index_mu_, after the files' fdatasync: marks the current records
  // of `pending` committed; drops those of `failed_files` (never indexed). An extent of
  // `deferred` may go once the index no longer points at it.
  CommitPlan PrepareCommit(std::span<const Gen> pending, std::span<const Gen> deferred,
                           const std::set<uint32_t>& failed_files, const absl::Status& sync_status)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The index batch is durable.
  void CommitDone(const CommitPlan& plan) ABSL_LOCKS_EXCLUDED(mu_);
  // It failed: the records stay readable, uncommitted; returns those to retry.
  std::vector<Gen> CommitFailed(const CommitPlan& plan, const absl::Status& s)
      ABSL_LOCKS_EXCLUDED(mu_);

  // --- the rest of Tier
  // fn(i, entry) for each key present, under the table's lock.
  void Find(std::span<const ChunkKey> keys,
            const std::function<void(size_t, const IndexEntry&)>& fn) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // The committed entries' last-access times not yet written to the index (taken).
  std::vector<std::pair<ChunkKey, IndexEntry>> TakeDirtyAccess() ABSL_LOCKS_EXCLUDED(mu_);
  // Pins `key` (a use); an empty handle (a miss) when absent. Released through Unpin.
  PinHandle Pin(const ChunkKey& key) ABSL_LOCKS_EXCLUDED(mu_);
  TierStats stats() const ABSL_LOCKS_EXCLUDED(mu_);
  // DiskTierExtraStats without files and the index's fields.
  DiskTierExtraStats extra_stats() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  static void Unpin(void* self, const ChunkKey& key);
  // Unlinks `key`'s entry (REQUIRES: present) and tells the policy (OnRemove with
  // `reason`); nullopt = eviction victims: the policy is told once their index entries
  // are gone.
  Entry DetachLocked(const ChunkKey& key, std::optional<RemoveReason> reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees the extent of a detached entry now, or when its last reader finishes.
  void ReleaseExtentLocked(const Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishReadLocked(const ChunkKey& key, uint64_t gen) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint64_t capacity_bytes_;
  const uint32_t access_flush_batch_;
  const std::shared_ptr<Clock> clock_;

  mutable absl::Mutex mu_;
  DiskRecordMap records_ ABSL_GUARDED_BY(mu_);
  // Admission and victim order over records_' keys.
  const std::unique_ptr<CachePolicy> policy_ ABSL_PT_GUARDED_BY(mu_);
  DiskSpace space_ ABSL_GUARDED_BY(mu_);
  DiskTierCounters counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvt::internal

#endif  // KVSTORE_SRC_DISK_ENTRY_TABLE_H_
