// DiskTier group commit (DiskCommit::kGrouped): records written by Put are made durable
// by one commit per group: fdatasync of each record file they were written to, then one
// synced index batch. See docs/disk-tier.md ("Group commit").
#include <map>
#include <set>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "disk_tier_impl.h"
#include "spdlog/spdlog.h"

namespace kvt {

void DiskTier::Impl::StartCommitter() {
  if (options_.commit != DiskCommit::kGrouped) return;
  committer_.Start({.name = "disk-commit", .health = options_.health}, [this] { CommitLoop(); });
}

void DiskTier::Impl::StopCommitter() {
  if (committer_.joinable()) {
    {
      absl::MutexLock l(&mu_);
      stop_committer_ = true;
      commit_cv_.SignalAll();
    }
    committer_.Join();
  }
  if (options_.commit == DiskCommit::kGrouped && index_) {
    if (absl::Status s = CommitPending(); !s.ok()) {
      spdlog::warn("disk tier: final commit on close failed: {}", s.ToString());
    }
  }
}

void DiskTier::Impl::CommitLoop() {
  const Clock::Duration delay = std::chrono::milliseconds(options_.commit_delay_ms);
  Clock& clock = ClockOrSystem(options_.clock);
  while (true) {
    committer_.Beat();
    {
      absl::MutexLock l(&mu_);
      while (pending_.empty() && !stop_committer_) commit_cv_.Wait(&mu_);
      if (stop_committer_) return;  // StopCommitter commits the rest
      // The bounded wait: records written meanwhile join this commit.
      const Clock::TimePoint deadline = first_pending_ + delay;
      while (!stop_committer_ && !clock.WaitUntil(commit_cv_, mu_, deadline)) {
      }
    }
    if (absl::Status s = CommitPending(); !s.ok()) {
      spdlog::warn("disk tier: group commit failed (retried with the next): {}", s.ToString());
      // Do not spin on a persistent failure (e.g. the index's low-space refusal).
      absl::MutexLock l(&mu_);
      clock.WaitUntil(commit_cv_, mu_, clock.Now() + delay);
    }
  }
}

absl::Status DiskTier::Impl::CommitPending() {
  if (options_.commit != DiskCommit::kGrouped) return absl::OkStatus();
  absl::MutexLock cl(&commit_mu_);
  std::vector<std::pair<ChunkKey, uint64_t>> batch, deferred;
  std::map<uint32_t, std::shared_ptr<RecordFile>> files;
  {
    absl::MutexLock l(&mu_);
    // Extents deferred for replacements that were removed since: freed below even when
    // nothing is pending.
    if (pending_.empty() && deferred_free_.empty()) return absl::OkStatus();
    batch.swap(pending_);
    // Taken with the batch: each of these was deferred by a replacement in `batch`.
    deferred.swap(deferred_free_);
    for (const auto& [key, gen] : batch) {
      auto it = map_.find(key);
      if (it == map_.end() || it->second.gen != gen) continue;
      if (auto f = files_.find(it->second.idx.file_id); f != files_.end()) files.insert(*f);
    }
  }

  // 1. The data: one fdatasync per file, no tier lock held (puts and gets go on).
  std::set<uint32_t> failed_files;
  absl::Status sync_status;
  for (const auto& [id, f] : files) {
    if (absl::Status s = fs_->Sync(Ref(*f)); !s.ok()) {
      failed_files.insert(id);
      if (sync_status.ok()) sync_status = s;
    }
  }

  // 2. The index: one synced batch of every entry still current. index_mu_ keeps
  // evictions, erases and drops (which delete index entries) out until it is written.
  absl::MutexLock il(&index_mu_);
  std::vector<std::pair<ChunkKey, internal::IndexEntry>> entries;
  std::vector<std::pair<ChunkKey, uint64_t>> written, to_free;
  std::vector<ChunkKey> dropped;
  {
    absl::MutexLock l(&mu_);
    for (const auto& [key, gen] : batch) {
      auto it = map_.find(key);
      if (it == map_.end() || it->second.gen != gen || it->second.committed) continue;
      if (failed_files.count(it->second.idx.file_id) > 0) {
        // Its bytes may not be on the device: never index them; the record is gone.
        ++counters_.io_errors;
        if (absl::IsResourceExhausted(sync_status)) ++extra_.enospc;
        ReleaseExtentLocked(DetachLocked(it, RemoveReason::kErased));
        dropped.push_back(key);  // the index may still hold the entry it replaced
        continue;
      }
      // Marked now: a Put that replaces it from here on keeps this extent reserved.
      it->second.committed = true;
      entries.emplace_back(key, it->second.idx);
      written.emplace_back(key, gen);
    }
    // An old extent may go once the index no longer points at it: its key's current
    // entry is written by this commit, or its key was removed (eviction, erase and drop
    // delete the key's index entry under index_mu_). Else (replaced again meanwhile by
    // a put this commit does not cover) it waits for a later commit.
    absl::flat_hash_set<ChunkKey> committing;
    for (const auto& w : written) committing.insert(w.first);
    for (const auto& d : deferred) {
      auto it = map_.find(d.first);
      const bool free_now =
          it == map_.end() || (committing.contains(d.first) && it->second.committed);
      (free_now ? to_free : deferred_free_).push_back(d);
    }
  }
  absl::Status s = entries.empty() ? absl::OkStatus() : index_->PutMany(entries, /*sync=*/true);
  if (s.ok() && !dropped.empty()) s = index_->Delete(dropped, /*sync=*/true);
  absl::MutexLock l(&mu_);
  if (!s.ok()) {
    // Not durable: the records stay readable and are retried by the next commit.
    ++counters_.io_errors;
    if (absl::IsResourceExhausted(s)) ++extra_.enospc;
    std::vector<std::pair<ChunkKey, uint64_t>> retry;
    for (const auto& [key, gen] : written) {
      auto it = map_.find(key);
      if (it == map_.end() || it->second.gen != gen) {
        --uncommitted_;  // replaced meanwhile (detached as committed)
        continue;
      }
      it->second.committed = false;
      retry.emplace_back(key, gen);
    }
    retry.insert(retry.end(), pending_.begin(), pending_.end());
    pending_.swap(retry);
    if (!pending_.empty()) first_pending_ = ClockOrSystem(options_.clock).Now();
    deferred_free_.insert(deferred_free_.end(), to_free.begin(), to_free.end());
    return absl::Status(
        s.code(), absl::StrCat("group commit of ", entries.size(), " records: ", s.message()));
  }
  uncommitted_ -= written.size();
  for (const auto& [key, gen] : to_free) FinishReadLocked(key, gen);
  if (!entries.empty()) {
    ++extra_.group_commits;
    extra_.group_committed_records += entries.size();
  }
  if (!sync_status.ok()) {
    return absl::Status(
        sync_status.code(),
        absl::StrCat("group commit: fdatasync failed, ", failed_files.size(),
                     " file(s)' uncommitted records dropped: ", sync_status.message()));
  }
  return absl::OkStatus();
}

}  // namespace kvt
