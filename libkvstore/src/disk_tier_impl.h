// Private to libkvstore: DiskTier's implementation class, shared by disk_tier.cc
// (data path) and disk_tier_open.cc (Open, file management, recovery).
#ifndef KVSTORE_SRC_DISK_TIER_IMPL_H_
#define KVSTORE_SRC_DISK_TIER_IMPL_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "disk_file_system.h"
#include "disk_tier_index.h"
#include "extent_allocator.h"
#include "kvstore/disk_tier.h"
#include "kvstore/supervised_thread.h"
#include "uring_file.h"

namespace kvt {

// One preallocated record file. Shared by readers so its fd outlives a concurrent
// removal (closed when the last holder lets go).
struct RecordFile {
  uint32_t id = 0;
  std::string path;
  int fd = -1;
  uint64_t size = 0;
  dev_t dev = 0;
  ino_t ino = 0;
  ~RecordFile();
};

class DiskTier::Impl {
 public:
  explicit Impl(const DiskTierOptions& options) : options_(options) {}
  ~Impl();

  // --- disk_tier_open.cc ---
  absl::Status Init();
  // Creates record file `id` of `size` bytes (open + fallocate + directory fsync).
  absl::StatusOr<std::shared_ptr<RecordFile>> CreateFile(uint32_t id, uint64_t size);
  absl::StatusOr<std::shared_ptr<RecordFile>> OpenFile(uint32_t id, const std::string& path,
                                                       bool create);
  // True when the file at f.path is still the inode the tier opened.
  static bool StillOnDisk(const RecordFile& f);
  // Drops every entry of a file removed behind the tier's back; new files replace it.
  void HandleLostFile(uint32_t file_id) ABSL_LOCKS_EXCLUDED(index_mu_, mu_);
  // Re-extends a file found truncated (entries in the lost range fail on their own Gets).
  void RepairTruncatedFile(const std::shared_ptr<RecordFile>& f);

  // --- disk_tier.cc ---
  absl::StatusOr<PutResult> Put(std::span<const std::byte> record, const PutContext& context);
  // `client_read` false: the store's own read (CopyForWriteBack, a peek): no hit, miss,
  // access time or policy use is recorded; integrity failures still are.
  absl::StatusOr<uint64_t> Get(const ChunkKey& key, std::span<std::byte> out,
                               bool client_read = true);
  std::vector<ChunkStat> Stat(std::span<const ChunkKey> keys);
  absl::Status Erase(const ChunkKey& key);
  absl::StatusOr<ListPage> List(const ListOptions& options);
  TierStats stats() const;
  DiskTierExtraStats extra_stats() const;
  PinHandle Pin(const ChunkKey& key);
  static void Unpin(void* self, const ChunkKey& key);
  absl::Status FlushAccessTimes() ABSL_LOCKS_EXCLUDED(index_mu_, mu_);

  // --- disk_tier_commit.cc (DiskCommit::kGrouped) ---
  // Starts the committer thread (kGrouped only).
  void StartCommitter() ABSL_LOCKS_EXCLUDED(mu_);
  // Stops it and commits what is pending (destruction).
  void StopCommitter() ABSL_LOCKS_EXCLUDED(commit_mu_, index_mu_, mu_);
  // Makes every record published before the call durable: fdatasync of their files
  // (no tier lock held), then one synced index batch under index_mu_.
  absl::Status CommitPending() ABSL_LOCKS_EXCLUDED(commit_mu_, index_mu_, mu_);
  void CommitLoop() ABSL_LOCKS_EXCLUDED(commit_mu_, index_mu_, mu_);

  struct Entry {
    internal::IndexEntry idx;
    uint64_t padded = 0;  // extent length on disk
    uint64_t gen = 0;     // unique per stored record
    uint32_t pins = 0;
    uint32_t readers = 0;
    // kGrouped: false until a commit has written (or is writing) its index entry. An
    // uncommitted entry's index entry is never written by anything else (last-access
    // flushes skip it), and an entry that replaces a committed one keeps the old extent
    // reserved until the next commit.
    bool committed = true;
  };
  // An entry removed while readers were copying it: its extent is freed by the last one.
  struct Doomed {
    internal::Extent extent;
    uint32_t readers = 0;
  };

  class RingLease;
  absl::StatusOr<std::unique_ptr<internal::IoRing>> AcquireRing() ABSL_LOCKS_EXCLUDED(ring_mu_);
  void ReleaseRing(std::unique_ptr<internal::IoRing> ring) ABSL_LOCKS_EXCLUDED(ring_mu_);

  // Reserves an extent of `padded` bytes: free space, else a new file, else eviction.
  // The records evicted are appended to `out` (read once) when it is not null.
  absl::StatusOr<internal::Extent> Reserve(uint64_t padded, std::vector<Victim>* out)
      ABSL_LOCKS_EXCLUDED(index_mu_, mu_);
  // Victims detached from the map whose index entries are already deleted: when `out`
  // is not null, reads each once (no lock held, no hash) into a buffer appended there;
  // then frees the extents.
  void FinishEviction(std::vector<std::pair<ChunkKey, Entry>> victims, std::vector<Victim>* out)
      ABSL_LOCKS_EXCLUDED(index_mu_, mu_);
  // Puts detached victims back (their index deletion failed); the policy, never told of
  // their removal, keeps them where they were.
  void ReattachLocked(std::vector<std::pair<ChunkKey, Entry>>& victims)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Unlinks an entry from the map and tells the policy (OnRemove with `reason`); returns
  // it. nullopt = eviction victims: the policy is told once their index entries are gone.
  Entry DetachLocked(absl::flat_hash_map<ChunkKey, Entry>::iterator it,
                     std::optional<RemoveReason> reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the records whose TTL ran out (CachePolicy::VisitExpired): index entries first
  // (synced), then their extents. Unpinned, unread records only.
  void DropExpired() ABSL_LOCKS_EXCLUDED(index_mu_, mu_);
  // Frees the extent of a detached entry now, or when its last reader finishes.
  void ReleaseExtentLocked(const Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishReadLocked(const ChunkKey& key, uint64_t gen) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops `key` from index and map if it is still record `gen` (after a failed verify).
  void DropEntry(const ChunkKey& key, uint64_t gen) ABSL_LOCKS_EXCLUDED(index_mu_, mu_);
  // Reads a whole record into out[0, e.record_bytes) (in_order sees the bytes as they
  // arrive), counting the read and its bounce copies (record_reads, copy_bytes).
  absl::Status ReadRecord(const internal::IndexEntry& e, const std::shared_ptr<RecordFile>& file,
                          std::span<std::byte> out, const internal::InOrderCallback& in_order)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Reads and verifies a whole record into out[0, e.record_bytes).
  absl::Status ReadVerified(const ChunkKey& key, const internal::IndexEntry& e,
                            const std::shared_ptr<RecordFile>& file, std::span<std::byte> out);
  static DiskFileRef Ref(const RecordFile& f) { return DiskFileRef{f.fd, f.id, f.path}; }

  const DiskTierOptions options_;
  // Record-file I/O: options_.file_system, else the real layer.
  const std::shared_ptr<DiskFileSystem> fs_ =
      options_.file_system ? options_.file_system : RealDiskFileSystem();
  std::unique_ptr<internal::DiskIndex> index_;
  internal::IoBackend backend_ = internal::IoBackend::kIoUring;
  std::atomic<bool> direct_io_{true};

  // Lock order: commit_mu_ before index_mu_ before mu_. commit_mu_ serializes commits.
  absl::Mutex commit_mu_ ABSL_ACQUIRED_BEFORE(index_mu_);
  // Lock order: index_mu_ before mu_. index_mu_ serializes every index write (and the
  // map change that goes with it) so the map and RocksDB change in the same order.
  absl::Mutex index_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  absl::flat_hash_map<ChunkKey, Entry> map_ ABSL_GUARDED_BY(mu_);
  // Admission and victim order over map_'s keys (set by Init).
  std::unique_ptr<CachePolicy> policy_ ABSL_PT_GUARDED_BY(mu_);
  absl::flat_hash_set<ChunkKey> dirty_access_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Doomed> doomed_ ABSL_GUARDED_BY(mu_);
  // gen -> readers still copying an entry detached for eviction and not yet released.
  absl::flat_hash_map<uint64_t, uint32_t> evicting_readers_ ABSL_GUARDED_BY(mu_);
  internal::ExtentAllocator alloc_ ABSL_GUARDED_BY(mu_);
  std::map<uint32_t, std::shared_ptr<RecordFile>> files_ ABSL_GUARDED_BY(mu_);
  uint32_t next_file_id_ ABSL_GUARDED_BY(mu_) = 0;
  // Set when fallocate reported ENOSPC: no new files; make room by eviction instead.
  bool no_more_files_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_gen_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t used_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  TierStats counters_ ABSL_GUARDED_BY(mu_);
  DiskTierExtraStats extra_ ABSL_GUARDED_BY(mu_);

  // kGrouped: records written and published but not yet committed (key, gen), in
  // publish order; the time the oldest was published; extents of committed entries
  // replaced by uncommitted ones (key, gen of the replaced entry: released through
  // FinishReadLocked once the commit that covers the replacement is durable).
  std::vector<std::pair<ChunkKey, uint64_t>> pending_ ABSL_GUARDED_BY(mu_);
  Clock::TimePoint first_pending_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<ChunkKey, uint64_t>> deferred_free_ ABSL_GUARDED_BY(mu_);
  bool stop_committer_ ABSL_GUARDED_BY(mu_) = false;
  // Entries written but not yet durable (committed == false, or in a commit under way).
  uint64_t uncommitted_ ABSL_GUARDED_BY(mu_) = 0;
  absl::CondVar commit_cv_;
  SupervisedThread committer_;  // "disk-commit"

  absl::Mutex ring_mu_;
  std::vector<std::unique_ptr<internal::IoRing>> rings_ ABSL_GUARDED_BY(ring_mu_);
};

}  // namespace kvt

#endif  // KVSTORE_SRC_DISK_TIER_IMPL_H_
