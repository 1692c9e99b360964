// Private to libkvstore: DiskTier's implementation class, a facade over its parts: the
// record files and their I/O (disk_record_files.h), the RocksDB index
// (disk_tier_index.h), the in-memory record table (disk_entry_table.h) and the group
// commit (disk_group_commit.h). It orders each index write with the table change that
// goes with it. disk_tier.cc: the data path; disk_tier_open.cc: options and Open.
#ifndef KVSTORE_SRC_DISK_TIER_IMPL_H_
#define KVSTORE_SRC_DISK_TIER_IMPL_H_

#include <memory>
#include <span>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "disk_entry_table.h"
#include "disk_group_commit.h"
#include "disk_record_files.h"
#include "disk_tier_index.h"
#include "kvstore/disk_tier.h"

namespace kvt {

class DiskTier::Impl {
 public:
  explicit Impl(const DiskTierOptions& options) : options_(options), files_(options_) {}
  ~Impl();

  // --- disk_tier_open.cc: the policy, the files, the index, then the entries it keeps.
  absl::Status Init() ABSL_LOCKS_EXCLUDED(index_mu_);

  // --- disk_tier.cc
  absl::StatusOr<PutResult> Put(std::span<const std::byte> record, const PutContext& context);
  // `client_read` false: the store's own read (CopyForWriteBack, a peek): no hit, miss,
  // access time or policy use is recorded; integrity failures still are.
  absl::StatusOr<uint64_t> Get(const ChunkKey& key, std::span<std::byte> out,
                               bool client_read = true);
  std::vector<ChunkStat> Stat(std::span<const ChunkKey> keys);
  absl::Status Erase(const ChunkKey& key) ABSL_LOCKS_EXCLUDED(index_mu_);
  absl::StatusOr<ListPage> List(const ListOptions& options);
  DiskTierExtraStats extra_stats() const;
  absl::Status FlushAccessTimes() ABSL_LOCKS_EXCLUDED(index_mu_);
  absl::Status Sync() { return commit_->CommitPending(); }

  const DiskTierOptions options_;
  // Serializes every index write with the table change that goes with it, so the table
  // and RocksDB change in the same order. Lock order: the group commit's commit_mu_,
  // then index_mu_, then the table's lock.
  absl::Mutex index_mu_;
  internal::DiskRecordFiles files_;
  // Set by Init.
  std::unique_ptr<internal::DiskIndex> index_;
  std::unique_ptr<internal::DiskEntryTable> table_;
  std::unique_ptr<internal::DiskGroupCommit> commit_;

 private:
  // Reserves an extent of `padded` bytes: free space, else a new file, else eviction.
  // The records evicted are appended to `out` (read once) when it is not null.
  absl::StatusOr<internal::Extent> Reserve(uint64_t padded, std::vector<Victim>* out)
      ABSL_LOCKS_EXCLUDED(index_mu_);
  // Victims detached from the table whose index entries are already deleted: when `out`
  // is not null, reads each once (no lock held, no hash) into a buffer appended there;
  // then frees the extents.
  void FinishEviction(std::vector<internal::DiskEntryTable::Detached> victims,
                      std::vector<Victim>* out);
  // Drops the records whose TTL ran out: index entries first (synced), then extents.
  void DropExpired() ABSL_LOCKS_EXCLUDED(index_mu_);
  // Drops `key` from index and table if it is still record `gen` (after a failed verify).
  void DropEntry(const ChunkKey& key, uint64_t gen) ABSL_LOCKS_EXCLUDED(index_mu_);
  // Drops every entry of a file removed behind the tier's back; new files replace it.
  void HandleLostFile(uint32_t file_id) ABSL_LOCKS_EXCLUDED(index_mu_);
  // Reads a whole record (counted: record_reads, copy_bytes); verified unless `raw`.
  absl::Status ReadRecord(const ChunkKey& key, const internal::IndexEntry& e,
                          const internal::RecordFile& f, std::span<std::byte> out, bool raw);
};

}  // namespace kvt

#endif  // KVSTORE_SRC_DISK_TIER_IMPL_H_
