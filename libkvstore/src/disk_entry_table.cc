// The disk tier's in-memory record table (disk_entry_table.h, docs/disk-tier.md).
#include "disk_entry_table.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kvt::internal {

DiskEntryTable::DiskEntryTable(const DiskTierOptions& options, std::unique_ptr<CachePolicy> policy)
    : capacity_bytes_(options.capacity_bytes),
      access_flush_batch_(options.access_flush_batch),
      clock_(options.clock),
      policy_(std::move(policy)),
      space_(options.capacity_bytes, options.file_bytes) {
  absl::MutexLock l(&mu_);
  counters_.capacity_bytes = capacity_bytes_;
}

// ---------------------------------------------------------------- bookkeeping

DiskEntryTable::Entry DiskEntryTable::DetachLocked(
    absl::flat_hash_map<ChunkKey, Entry>::iterator it, std::optional<RemoveReason> reason) {
  Entry e = it->second;
  if (!e.committed) --uncommitted_;
  if (reason) policy_->OnRemove(it->first, *reason);
  dirty_access_.erase(it->first);
  used_bytes_ -= e.padded;
  map_.erase(it);
  return e;
}

void DiskEntryTable::ReleaseExtentLocked(const Entry& e) {
  space_.Release(Extent{e.idx.file_id, e.idx.offset, e.padded}, e.gen, e.readers);
}

void DiskEntryTable::FinishReadLocked(const ChunkKey& key, uint64_t gen) {
  auto it = map_.find(key);
  if (it != map_.end() && it->second.gen == gen) {
    --it->second.readers;
    return;
  }
  space_.ReaderDone(gen);
}

// ---------------------------------------------------------------- Open

void DiskEntryTable::AddFile(uint32_t file_id, uint64_t bytes) {
  absl::MutexLock l(&mu_);
  space_.AddFile(file_id, bytes);
}

void DiskEntryTable::SetNextFileId(uint32_t id) {
  absl::MutexLock l(&mu_);
  space_.SetNextFileId(id);
}

std::vector<std::string> DiskEntryTable::Recover(std::vector<Recovered> entries) {
  absl::MutexLock l(&mu_);
  std::vector<std::string> overlapping;
  std::vector<std::pair<ChunkKey, Entry>> kept;
  for (Recovered& r : entries) {
    const uint64_t padded = RoundUpToIoAlign(r.idx.record_bytes);
    if (!space_.Claim(Extent{r.idx.file_id, r.idx.offset, padded})) {
      overlapping.push_back(std::move(r.raw));
      continue;
    }
    Entry en;
    en.idx = r.idx;
    en.padded = padded;
    kept.emplace_back(r.key, en);
  }
  // The policy learns of the records oldest access first (with "lru": the oldest is the
  // first victim).
  std::stable_sort(kept.begin(), kept.end(), [](const auto& a, const auto& b) {
    return a.second.idx.last_access_ms < b.second.idx.last_access_ms;
  });
  for (auto& [key, en] : kept) {
    policy_->OnInsert(CacheEntryInfo{
        .key = key, .parent = en.idx.parent, .ns = en.idx.ns, .record_bytes = en.idx.record_bytes});
    en.gen = next_gen_++;
    used_bytes_ += en.padded;
    map_.emplace(key, en);
  }
  return overlapping;
}

void DiskEntryTable::CountDroppedOnOpen(uint64_t n) {
  absl::MutexLock l(&mu_);
  extra_.dropped_on_open = n;
  counters_.integrity_errors += n;
}

// ---------------------------------------------------------------- Put

bool DiskEntryTable::Admit(const CacheEntryInfo& info, AdmitReason reason) {
  absl::MutexLock l(&mu_);
  if (policy_->Admit(info, reason)) return true;
  ++counters_.admission_rejects;
  return false;
}

std::optional<Extent> DiskEntryTable::Allocate(uint64_t padded) {
  absl::MutexLock l(&mu_);
  return space_.Allocate(padded);
}

absl::StatusOr<DiskEntryTable::Room> DiskEntryTable::MakeRoom(uint64_t padded) {
  absl::MutexLock l(&mu_);
  Room room;
  if (auto ext = space_.Allocate(padded)) {
    room.extent = *ext;
    return room;
  }
  if (std::optional<DiskSpace::NewFile> f = space_.NextFile(padded)) {
    room.new_file_id = f->id;
    room.new_file_bytes = f->bytes;
    return room;
  }
  // Evict unpinned chunks worth at least `padded` bytes, in the policy's order. (Keys of
  // another MakeRoom's victims, detached but not yet deleted from the index, are still
  // in the policy: skipped.)
  uint64_t freed = 0;
  std::vector<ChunkKey> picked;
  policy_->VisitVictims([&](const ChunkKey& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = map_.find(key);
    if (it == map_.end() || it->second.pins > 0) return true;
    freed += it->second.padded;
    picked.push_back(key);
    return freed < padded;
  });
  for (const ChunkKey& k : picked) {
    Entry en = DetachLocked(map_.find(k), std::nullopt);
    space_.HoldEvicting(en.gen, en.readers);
    room.victims.emplace_back(k, en);
  }
  if (room.victims.empty()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "disk tier full: ", padded, " bytes needed, ", space_.free_bytes(), " free of ",
        capacity_bytes_, ", and all ", map_.size(), " chunks are pinned"));
  }
  return room;
}

bool DiskEntryTable::StopNewFiles() {
  absl::MutexLock l(&mu_);
  ++extra_.enospc;
  space_.StopNewFiles();
  return map_.empty() && space_.total_bytes() == 0;
}

void DiskEntryTable::Reattach(std::vector<Detached>& victims) {
  absl::MutexLock l(&mu_);
  // The policy still holds them where they were (it is told of evictions only once
  // their index entries are deleted).
  for (auto& [key, en] : victims) {
    en.readers = space_.TakeEvicting(en.gen);
    used_bytes_ += en.padded;
    map_.emplace(key, en);
  }
}

void DiskEntryTable::Evicted(std::span<const ChunkKey> keys) {
  absl::MutexLock l(&mu_);
  // A key put again meanwhile (kGrouped publishes without index_mu_) is held again.
  for (const ChunkKey& k : keys) {
    if (!map_.contains(k)) policy_->OnRemove(k, RemoveReason::kEvicted);
  }
}

void DiskEntryTable::ReleaseVictims(std::vector<Detached>& victims) {
  absl::MutexLock l(&mu_);
  for (auto& [key, en] : victims) {
    en.readers = space_.TakeEvicting(en.gen);
    ReleaseExtentLocked(en);
  }
  counters_.evictions += victims.size();
}

absl::StatusOr<DiskEntryTable::Published> DiskEntryTable::Publish(const ChunkKey& key,
                                                                  const IndexEntry& e,
                                                                  uint64_t padded, bool committed,
                                                                  uint64_t bounced) {
  absl::MutexLock l(&mu_);
  if (!space_.HasFile(e.file_id)) {
    return absl::UnavailableError("record file removed during the write");
  }
  Entry en;
  en.idx = e;
  en.padded = padded;
  en.gen = next_gen_++;
  en.committed = committed;
  Published published{.gen = en.gen};
  if (auto old = map_.find(key); old != map_.end()) {
    en.pins = old->second.pins;  // pins follow the key
    Entry o = DetachLocked(old, RemoveReason::kReplaced);
    if (!committed && o.committed) {
      // The index still points at the old extent until the new entry is committed.
      ++o.readers;
      published.deferred_gen = o.gen;
    }
    ReleaseExtentLocked(o);
  }
  used_bytes_ += padded;
  map_.emplace(key, en);
  policy_->OnInsert(
      CacheEntryInfo{.key = key, .parent = e.parent, .ns = e.ns, .record_bytes = e.record_bytes});
  ++counters_.puts;
  counters_.bytes_in += e.record_bytes;
  counters_.copy_bytes += bounced;
  if (!committed) ++uncommitted_;
  return published;
}

bool DiskEntryTable::HasFile(uint32_t file_id) const {
  absl::MutexLock l(&mu_);
  return space_.HasFile(file_id);
}

void DiskEntryTable::PutFailed(const Extent& ext, const absl::Status& s) {
  absl::MutexLock l(&mu_);
  space_.Free(ext);
  ++counters_.io_errors;
  if (absl::IsResourceExhausted(s)) ++extra_.enospc;
}

void DiskEntryTable::CountIoError(const absl::Status& s) {
  absl::MutexLock l(&mu_);
  ++counters_.io_errors;
  if (absl::IsResourceExhausted(s)) ++extra_.enospc;
}

// ---------------------------------------------------------------- Get

absl::StatusOr<DiskEntryTable::Read> DiskEntryTable::BeginRead(const ChunkKey& key,
                                                               uint64_t out_bytes,
                                                               bool client_read) {
  absl::MutexLock l(&mu_);
  auto it = map_.find(key);
  if (it == map_.end()) {
    if (client_read) {
      ++counters_.misses;
      policy_->OnMiss(key);
    }
    return absl::NotFoundError(absl::StrCat("chunk ", key.ToHex(), " not on disk"));
  }
  Entry& en = it->second;
  if (out_bytes < en.idx.record_bytes) {
    return absl::OutOfRangeError(absl::StrCat("chunk ", key.ToHex(), " needs ", en.idx.record_bytes,
                                              " bytes, buffer has ", out_bytes));
  }
  Read r;
  if (client_read) {
    en.idx.last_access_ms = ClockOrSystem(clock_).UnixMillis();
    policy_->OnAccess(key);
    dirty_access_.insert(key);
    r.flush_access = dirty_access_.size() >= access_flush_batch_;
  }
  ++en.readers;
  r.idx = en.idx;
  r.gen = en.gen;
  return r;
}

void DiskEntryTable::EndRead(const ChunkKey& key, uint64_t gen, const absl::Status& s,
                             bool client_read, uint64_t record_bytes) {
  absl::MutexLock l(&mu_);
  FinishReadLocked(key, gen);
  if (s.ok()) {
    if (client_read) {
      ++counters_.hits;
      counters_.bytes_out += record_bytes;
    }
  } else {
    if (client_read) ++counters_.misses;
    if (absl::IsDataLoss(s)) {
      ++counters_.integrity_errors;
    } else {
      ++counters_.io_errors;
    }
  }
}

void DiskEntryTable::CountRecordRead(uint64_t copied) {
  absl::MutexLock l(&mu_);
  ++extra_.record_reads;
  counters_.copy_bytes += copied;
}

void DiskEntryTable::CountVictimReads(uint64_t n) {
  absl::MutexLock l(&mu_);
  extra_.victim_reads += n;
}

// ---------------------------------------------------------------- removal

std::optional<DiskEntryTable::Entry> DiskEntryTable::DetachIf(const ChunkKey& key, uint64_t gen) {
  absl::MutexLock l(&mu_);
  auto it = map_.find(key);
  if (it == map_.end() || it->second.gen != gen) return std::nullopt;
  return DetachLocked(it, RemoveReason::kErased);
}

absl::StatusOr<std::optional<DiskEntryTable::Entry>> DiskEntryTable::DetachForErase(
    const ChunkKey& key) {
  absl::MutexLock l(&mu_);
  auto it = map_.find(key);
  if (it == map_.end()) return std::nullopt;
  if (it->second.pins > 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("chunk ", key.ToHex(), " is pinned (", it->second.pins, " pins)"));
  }
  return DetachLocked(it, RemoveReason::kErased);
}

bool DiskEntryTable::AnyExpired() const {
  absl::MutexLock l(&mu_);
  bool any = false;
  policy_->VisitExpired(ClockOrSystem(clock_).Now(), [&](const ChunkKey&) { any = true; });
  return any;
}

std::vector<DiskEntryTable::Detached> DiskEntryTable::DetachExpired() {
  absl::MutexLock l(&mu_);
  std::vector<ChunkKey> expired;
  policy_->VisitExpired(ClockOrSystem(clock_).Now(),
                        [&](const ChunkKey& key) { expired.push_back(key); });
  std::vector<Detached> dropped;
  for (const ChunkKey& key : expired) {
    auto it = map_.find(key);
    if (it == map_.end() || it->second.pins > 0 || it->second.readers > 0) continue;
    dropped.emplace_back(key, DetachLocked(it, RemoveReason::kExpired));
  }
  return dropped;
}

void DiskEntryTable::Release(std::span<const Entry> entries, const absl::Status& index_delete,
                             bool expired) {
  absl::MutexLock l(&mu_);
  if (!index_delete.ok()) {
    ++counters_.io_errors;
    return;
  }
  if (expired) counters_.ttl_expired += entries.size();
  for (const Entry& e : entries) ReleaseExtentLocked(e);
}

std::vector<ChunkKey> DiskEntryTable::DropFile(uint32_t file_id) {
  absl::MutexLock l(&mu_);
  std::vector<ChunkKey> dropped;
  space_.RemoveFile(file_id);
  ++extra_.files_lost;
  for (auto it = map_.begin(); it != map_.end();) {
    auto cur = it++;
    if (cur->second.idx.file_id != file_id) continue;
    dropped.push_back(cur->first);
    ++counters_.integrity_errors;
    // The extent belonged to the lost file: nothing to free.
    DetachLocked(cur, RemoveReason::kErased);
  }
  return dropped;
}

// ---------------------------------------------------------------- group commit

std::set<uint32_t> DiskEntryTable::FilesOf(std::span<const Gen> pending) const {
  absl::MutexLock l(&mu_);
  std::set<uint32_t> ids;
  for (const auto& [key, gen] : pending) {
    auto it = map_.find(key);
    if (it != map_.end() && it->second.gen == gen) ids.insert(it->second.idx.file_id);
  }
  return ids;
}

DiskEntryTable::CommitPlan DiskEntryTable::PrepareCommit(std::span<const Gen> pending,
                                                         std::span<const Gen> deferred,
                                                         const std::set<uint32_t>& failed_files,
                                                         const absl::Status& sync_status) {
  absl::MutexLock l(&mu_);
  CommitPlan plan;
  for (const auto& [key, gen] : pending) {
    auto it = map_.find(key);
    if (it == map_.end() || it->second.gen != gen || it->second.committed) continue;
    if (failed_files.count(it->second.idx.file_id) > 0) {
      // Its bytes may not be on the device: never index them; the record is gone.
      ++counters_.io_errors;
      if (absl::IsResourceExhausted(sync_status)) ++extra_.enospc;
      ReleaseExtentLocked(DetachLocked(it, RemoveReason::kErased));
      plan.dropped.push_back(key);  // the index may still hold the entry it replaced
      continue;
    }
    // Marked now: a Put that replaces it from here on keeps this extent reserved.
    it->second.committed = true;
    plan.entries.emplace_back(key, it->second.idx);
    plan.written.emplace_back(key, gen);
  }
  // An old extent may go once the index no longer points at it: its key's current entry
  // is written by this commit, or its key was removed (eviction, erase and drop delete
  // the key's index entry under index_mu_). Else (replaced again meanwhile by a put this
  // commit does not cover) it waits for a later commit.
  absl::flat_hash_set<ChunkKey> committing;
  for (const auto& w : plan.written) committing.insert(w.first);
  for (const auto& d : deferred) {
    auto it = map_.find(d.first);
    const bool free_now =
        it == map_.end() || (committing.contains(d.first) && it->second.committed);
    (free_now ? plan.to_free : plan.still_deferred).push_back(d);
  }
  return plan;
}

void DiskEntryTable::CommitDone(const CommitPlan& plan) {
  absl::MutexLock l(&mu_);
  uncommitted_ -= plan.written.size();
  for (const auto& [key, gen] : plan.to_free) FinishReadLocked(key, gen);
  if (!plan.entries.empty()) {
    ++extra_.group_commits;
    extra_.group_committed_records += plan.entries.size();
  }
}

std::vector<DiskEntryTable::Gen> DiskEntryTable::CommitFailed(const CommitPlan& plan,
                                                              const absl::Status& s) {
  absl::MutexLock l(&mu_);
  ++counters_.io_errors;
  if (absl::IsResourceExhausted(s)) ++extra_.enospc;
  std::vector<Gen> retry;
  for (const auto& [key, gen] : plan.written) {
    auto it = map_.find(key);
    if (it == map_.end() || it->second.gen != gen) {
      --uncommitted_;  // replaced meanwhile (detached as committed)
      continue;
    }
    it->second.committed = false;
    retry.emplace_back(key, gen);
  }
  return retry;
}

// ---------------------------------------------------------------- the rest of Tier

void DiskEntryTable::Find(std::span<const ChunkKey> keys,
                          const std::function<void(size_t, const IndexEntry&)>& fn) const {
  absl::MutexLock l(&mu_);
  for (size_t i = 0; i < keys.size(); ++i) {
    auto it = map_.find(keys[i]);
    if (it != map_.end()) fn(i, it->second.idx);
  }
}

std::vector<std::pair<ChunkKey, IndexEntry>> DiskEntryTable::TakeDirtyAccess() {
  absl::MutexLock l(&mu_);
  std::vector<std::pair<ChunkKey, IndexEntry>> batch;
  batch.reserve(dirty_access_.size());
  for (const ChunkKey& k : dirty_access_) {
    auto it = map_.find(k);
    // An uncommitted record's index entry is written by its commit, after its fdatasync.
    if (it != map_.end() && it->second.committed) batch.emplace_back(k, it->second.idx);
  }
  dirty_access_.clear();
  return batch;
}

PinHandle DiskEntryTable::Pin(const ChunkKey& key) {
  absl::MutexLock l(&mu_);
  auto it = map_.find(key);
  if (it == map_.end()) {
    policy_->OnMiss(key);
    return PinHandle();
  }
  ++it->second.pins;
  policy_->OnAccess(key);  // a pin announces a read (tier.h)
  return PinHandle(&DiskEntryTable::Unpin, this, key, it->second.idx.record_bytes);
}

void DiskEntryTable::Unpin(void* self_ptr, const ChunkKey& key) {
  auto* self = static_cast<DiskEntryTable*>(self_ptr);
  absl::MutexLock l(&self->mu_);
  auto it = self->map_.find(key);
  if (it != self->map_.end() && it->second.pins > 0) --it->second.pins;
}

TierStats DiskEntryTable::stats() const {
  absl::MutexLock l(&mu_);
  TierStats st = counters_;
  st.capacity_bytes = capacity_bytes_;
  st.used_bytes = used_bytes_;
  st.chunks = map_.size();
  st.pinned_bytes = 0;
  for (const auto& [k, e] : map_) {
    if (e.pins > 0) st.pinned_bytes += e.padded;
  }
  return st;
}

DiskTierExtraStats DiskEntryTable::extra_stats() const {
  absl::MutexLock l(&mu_);
  DiskTierExtraStats x = extra_;
  x.file_bytes_total = space_.total_bytes();
  x.uncommitted = uncommitted_;
  return x;
}

}  // namespace kvt::internal
