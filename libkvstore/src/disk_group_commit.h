// Private to libkvstore: the disk tier's group commit (DiskCommit::kGrouped; see
// docs/disk-tier.md, "Group commit"). Records a Put has written and published
// (DiskEntryTable::Publish, not committed) are made durable together: one fdatasync
// per record file they were written to (no lock held), then one synced index batch
// under the tier's index lock. Its thread ("disk-commit") starts a commit once the
// oldest pending record has waited commit_delay_ms of the tier's clock.
#ifndef KVSTORE_SRC_DISK_GROUP_COMMIT_H_
#define KVSTORE_SRC_DISK_GROUP_COMMIT_H_

#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "disk_entry_table.h"
#include "disk_record_files.h"
#include "disk_tier_index.h"
#include "kvstore/disk_tier.h"
#include "kvstore/supervised_thread.h"

namespace kvt::internal {

// Thread-safe. Lock order: commit_mu_ (one commit at a time) before the tier's
// index_mu_ before the table's lock; queue_mu_ is a leaf (nothing is called with it
// held).
class DiskGroupCommit {
 public:
  // REQUIRES: table, files, index and index_mu outlive this object.
  DiskGroupCommit(const DiskTierOptions& options, DiskEntryTable* table, DiskRecordFiles* files,
                  DiskIndex* index, absl::Mutex* index_mu);
  ~DiskGroupCommit();  // Stop()

  // Starts the thread (kGrouped only).
  void Start();
  // Stops the thread and commits what is pending (kGrouped; logged on failure).
  void Stop() ABSL_LOCKS_EXCLUDED(commit_mu_);
  // Queues published record `gen` of `key` (DiskEntryTable::Publish, not committed) for
  // the next commit, with the replaced record's gen when its extent was deferred.
  void Add(const ChunkKey& key, uint64_t gen, std::optional<uint64_t> deferred_gen)
      ABSL_LOCKS_EXCLUDED(queue_mu_);
  // Makes every record added before the call durable. OK at once with kEachPut. On
  // failure the records stay readable and are retried by the next commit; a record whose
  // fdatasync failed is dropped (counted as an I/O error).
  absl::Status CommitPending() ABSL_LOCKS_EXCLUDED(commit_mu_);

 private:
  using Gen = DiskEntryTable::Gen;
  void Loop() ABSL_LOCKS_EXCLUDED(commit_mu_, queue_mu_);
  // Waits until something is queued and the oldest has waited `delay` (false once
  // stopping), or after a failed commit, `delay`.
  bool WaitForWork(Clock& clock, Clock::Duration delay) ABSL_LOCKS_EXCLUDED(queue_mu_);
  void Pause(Clock& clock, Clock::Duration delay) ABSL_LOCKS_EXCLUDED(queue_mu_);

  const DiskTierOptions& options_;
  const bool grouped_;
  DiskEntryTable* const table_;
  DiskRecordFiles* const files_;
  DiskIndex* const index_;
  absl::Mutex* const index_mu_;
  bool stopped_ = false;

  absl::Mutex commit_mu_ ABSL_ACQUIRED_BEFORE(queue_mu_);
  absl::Mutex queue_mu_;
  absl::CondVar queue_cv_;
  // Records published but not yet committed, in publish order; when the oldest was
  // queued; extents of committed records replaced by queued ones (released once the
  // commit covering the replacement is durable).
  std::vector<Gen> pending_ ABSL_GUARDED_BY(queue_mu_);
  Clock::TimePoint first_pending_ ABSL_GUARDED_BY(queue_mu_);
  std::vector<Gen> deferred_ ABSL_GUARDED_BY(queue_mu_);
  bool stop_ ABSL_GUARDED_BY(queue_mu_) = false;
  SupervisedThread thread_;  // "disk-commit"
};

}  // namespace kvt::internal

#endif  // KVSTORE_SRC_DISK_GROUP_COMMIT_H_
