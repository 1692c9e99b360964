// The disk tier's group commit (disk_group_commit.h, docs/disk-tier.md "Group commit").
#include "disk_group_commit.h"

#include <chrono>
#include <memory>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace kvt::internal {

DiskGroupCommit::DiskGroupCommit(const DiskTierOptions& options, DiskEntryTable* table,
                                 DiskRecordFiles* files, DiskIndex* index, absl::Mutex* index_mu)
    : options_(options),
      grouped_(options.commit == DiskCommit::kGrouped),
      table_(table),
      files_(files),
      index_(index),
      index_mu_(index_mu) {}

DiskGroupCommit::~DiskGroupCommit() { Stop(); }

void DiskGroupCommit::Start() {
  if (!grouped_) return;
  thread_.Start({.name = "disk-commit", .health = options_.health}, [this] { Loop(); });
}

void DiskGroupCommit::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (thread_.joinable()) {
    {
      absl::MutexLock l(&queue_mu_);
      stop_ = true;
      queue_cv_.SignalAll();
    }
    thread_.Join();
  }
  if (grouped_) {
    if (absl::Status s = CommitPending(); !s.ok()) {
      spdlog::warn("disk tier: final commit on close failed: {}", s.ToString());
    }
  }
}

void DiskGroupCommit::Add(const ChunkKey& key, uint64_t gen, std::optional<uint64_t> deferred_gen) {
  absl::MutexLock l(&queue_mu_);
  if (pending_.empty()) first_pending_ = ClockOrSystem(options_.clock).Now();
  pending_.emplace_back(key, gen);
  if (deferred_gen) deferred_.emplace_back(key, *deferred_gen);
  queue_cv_.Signal();
}

bool DiskGroupCommit::WaitForWork(Clock& clock, Clock::Duration delay) {
  absl::MutexLock l(&queue_mu_);
  while (pending_.empty() && !stop_) queue_cv_.Wait(&queue_mu_);
  if (stop_) return false;
  // The bounded wait: records written meanwhile join this commit.
  const Clock::TimePoint deadline = first_pending_ + delay;
  while (!stop_ && !clock.WaitUntil(queue_cv_, queue_mu_, deadline)) {
  }
  return true;
}

void DiskGroupCommit::Pause(Clock& clock, Clock::Duration delay) {
  absl::MutexLock l(&queue_mu_);
  clock.WaitUntil(queue_cv_, queue_mu_, clock.Now() + delay);
}

void DiskGroupCommit::Loop() {
  const Clock::Duration delay = std::chrono::milliseconds(options_.commit_delay_ms);
  Clock& clock = ClockOrSystem(options_.clock);
  while (true) {
    thread_.Beat();
    if (!WaitForWork(clock, delay)) return;  // Stop commits the rest
    if (absl::Status s = CommitPending(); !s.ok()) {
      spdlog::warn("disk tier: group commit failed (retried with the next): {}", s.ToString());
      // Do not spin on a persistent failure (e.g. the index's low-space refusal).
      Pause(clock, delay);
    }
  }
}

absl::Status DiskGroupCommit::CommitPending() {
  if (!grouped_) return absl::OkStatus();
  absl::MutexLock cl(&commit_mu_);
  std::vector<Gen> pending, deferred;
  {
    absl::MutexLock l(&queue_mu_);
    // Extents deferred for replacements that were removed since: freed even when
    // nothing is pending.
    if (pending_.empty() && deferred_.empty()) return absl::OkStatus();
    pending.swap(pending_);
    // Taken with the batch: each of these was deferred by a replacement in it (or in an
    // earlier one).
    deferred.swap(deferred_);
  }
  const std::set<uint32_t> file_ids = table_->FilesOf(pending);

  // 1. The data: one fdatasync per file, no tier lock held (puts and gets go on).
  std::set<uint32_t> failed_files;
  absl::Status sync_status;
  for (uint32_t id : file_ids) {
    std::shared_ptr<RecordFile> f = files_->Find(id);
    if (f == nullptr) continue;  // lost: its entries are dropped already
    if (absl::Status s = files_->Sync(*f); !s.ok()) {
      failed_files.insert(id);
      if (sync_status.ok()) sync_status = s;
    }
  }

  // 2. The index: one synced batch of every entry still current. index_mu_ keeps
  // evictions, erases and drops (which delete index entries) out until it is written.
  absl::MutexLock il(index_mu_);
  const DiskEntryTable::CommitPlan plan =
      table_->PrepareCommit(pending, deferred, failed_files, sync_status);
  absl::Status s =
      plan.entries.empty() ? absl::OkStatus() : index_->PutMany(plan.entries, /*sync=*/true);
  if (s.ok() && !plan.dropped.empty()) s = index_->Delete(plan.dropped, /*sync=*/true);
  {
    absl::MutexLock l(&queue_mu_);
    deferred_.insert(deferred_.end(), plan.still_deferred.begin(), plan.still_deferred.end());
  }
  if (!s.ok()) {
    // Not durable: the records stay readable and are retried by the next commit.
    std::vector<Gen> retry = table_->CommitFailed(plan, s);
    absl::MutexLock l(&queue_mu_);
    retry.insert(retry.end(), pending_.begin(), pending_.end());
    pending_.swap(retry);
    if (!pending_.empty()) first_pending_ = ClockOrSystem(options_.clock).Now();
    deferred_.insert(deferred_.end(), plan.to_free.begin(), plan.to_free.end());
    return absl::Status(
        s.code(), absl::StrCat("group commit of ", plan.entries.size(), " records: ", s.message()));
  }
  table_->CommitDone(plan);
  if (!sync_status.ok()) {
    return absl::Status(
        sync_status.code(),
        absl::StrCat("group commit: fdatasync failed, ", failed_files.size(),
                     " file(s)' uncommitted records dropped: ", sync_status.message()));
  }
  return absl::OkStatus();
}

}  // namespace kvt::internal
