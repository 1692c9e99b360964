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
      space_(options.capacity_bytes, options.file_bytes) {}

// ---------------------------------------------------------------- bookkeeping

DiskEntryTable::Entry DiskEntryTable::DetachLocked(const ChunkKey& key,
                                                   std::optional<RemoveReason> reason) {
  if (reason) policy_->OnRemove(key, *reason);
  return records_.Detach(key);
}

void DiskEntryTable::ReleaseExtentLocked(const Entry& e) {
  space_.Release(Extent{e.idx.file_id, e.idx.offset, e.padded}, e.gen, e.readers);
}

void DiskEntryTable::FinishReadLocked(const ChunkKey& key, uint64_t gen) {
  if (Entry* e = records_.FindCurrent(key, gen); e != nullptr) {
    --e->readers;
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
    records_.Insert(key, en);
  }
  return overlapping;
}

void DiskEntryTable::CountDroppedOnOpen(uint64_t n) {
  absl::MutexLock l(&mu_);
  counters_.DroppedOnOpen(n);
}

// ---------------------------------------------------------------- Put

bool DiskEntryTable::Admit(const CacheEntryInfo& info, AdmitReason reason) {
  absl::MutexLock l(&mu_);
  if (policy_->Admit(info, reason)) return true;
  counters_.AdmissionRejected();
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
    const Entry* e = records_.Find(key);
    if (e == nullptr || e->pins > 0) return true;
    freed += e->padded;
    picked.push_back(key);
    return freed < padded;
  });
  for (const ChunkKey& k : picked) {
    Entry en = DetachLocked(k, std::nullopt);
    space_.HoldEvicting(en.gen, en.readers);
    room.victims.emplace_back(k, en);
  }
  if (room.victims.empty()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "disk tier full: ", padded, " bytes needed, ", space_.free_bytes(), " free of ",
        capacity_bytes_, ", and all ", records_.size(), " chunks are pinned"));
  }
  return room;
}

bool DiskEntryTable::StopNewFiles() {
  absl::MutexLock l(&mu_);
  counters_.NoMoreFiles();
  space_.StopNewFiles();
  return records_.empty() && space_.total_bytes() == 0;
}

void DiskEntryTable::Reattach(std::vector<Detached>& victims) {
  absl::MutexLock l(&mu_);
  // The policy still holds them where they were (it is told of evictions only once
  // their index entries are deleted).
  for (auto& [key, en] : victims) {
    en.readers = space_.TakeEvicting(en.gen);
    records_.Restore(key, en);
  }
}

void DiskEntryTable::Evicted(std::span<const ChunkKey> keys) {
  absl::MutexLock l(&mu_);
  // A key put again meanwhile (kGrouped publishes without index_mu_) is held again.
  for (const ChunkKey& k : keys) {
    if (!records_.Contains(k)) policy_->OnRemove(k, RemoveReason::kEvicted);
  }
}

void DiskEntryTable::ReleaseVictims(std::vector<Detached>& victims) {
  absl::MutexLock l(&mu_);
  for (auto& [key, en] : victims) {
    en.readers = space_.TakeEvicting(en.gen);
    ReleaseExtentLocked(en);
  }
  counters_.Evicted(victims.size());
}

absl::StatusOr<DiskEntryTable::Published> DiskEntryTable::Publish(const ChunkKey& key,
                                                                  const IndexEntry& e,
                                                                  uint64_t padded, bool committed,
                                                                  uint64_t bounced) {
  absl::MutexLock l(&mu_);
  if (!space_.HasFile(e.file_id)) {
    return absl::UnavailableError("record file removed during the write");
  }
  Entry en{.idx = e, .padded = padded, .committed = committed};
  Published published;
  if (const Entry* old = records_.Find(key); old != nullptr) {
    en.pins = old->pins;  // pins follow the key
    Entry o = DetachLocked(key, RemoveReason::kReplaced);
    if (!committed && o.committed) {
      // The index still points at the old extent until the new entry is committed.
      ++o.readers;
      published.deferred_gen = o.gen;
    }
    ReleaseExtentLocked(o);
  }
  published.gen = records_.Insert(key, en);
  policy_->OnInsert(
      CacheEntryInfo{.key = key, .parent = e.parent, .ns = e.ns, .record_bytes = e.record_bytes});
  counters_.Put(e.record_bytes, bounced);
  return published;
}

bool DiskEntryTable::HasFile(uint32_t file_id) const {
  absl::MutexLock l(&mu_);
  return space_.HasFile(file_id);
}

void DiskEntryTable::PutFailed(const Extent& ext, const absl::Status& s) {
  absl::MutexLock l(&mu_);
  space_.Free(ext);
  counters_.IoError(s);
}

void DiskEntryTable::CountIoError(const absl::Status& s) {
  absl::MutexLock l(&mu_);
  counters_.IoError(s);
}

// ---------------------------------------------------------------- Get

absl::StatusOr<DiskEntryTable::Read> DiskEntryTable::BeginRead(const ChunkKey& key,
                                                               uint64_t out_bytes,
                                                               bool client_read) {
  absl::MutexLock l(&mu_);
  Entry* found = records_.Find(key);
  if (found == nullptr) {
    if (client_read) {
      counters_.Miss();
      policy_->OnMiss(key);
    }
    return absl::NotFoundError(absl::StrCat("chunk ", key.ToHex(), " not on disk"));
  }
  Entry& en = *found;
  if (out_bytes < en.idx.record_bytes) {
    return absl::OutOfRangeError(absl::StrCat("chunk ", key.ToHex(), " needs ", en.idx.record_bytes,
                                              " bytes, buffer has ", out_bytes));
  }
  Read r;
  if (client_read) {
    en.idx.last_access_ms = ClockOrSystem(clock_).UnixMillis();
    policy_->OnAccess(key);
    r.flush_access = records_.MarkAccessed(key) >= access_flush_batch_;
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
  counters_.ReadEnded(s, client_read, record_bytes);
}

void DiskEntryTable::CountRecordRead(uint64_t copied) {
  absl::MutexLock l(&mu_);
  counters_.RecordRead(copied);
}

void DiskEntryTable::CountVictimReads(uint64_t n) {
  absl::MutexLock l(&mu_);
  counters_.VictimReads(n);
}

// ---------------------------------------------------------------- removal

std::optional<DiskEntryTable::Entry> DiskEntryTable::DetachIf(const ChunkKey& key, uint64_t gen) {
  absl::MutexLock l(&mu_);
  if (records_.FindCurrent(key, gen) == nullptr) return std::nullopt;
  return DetachLocked(key, RemoveReason::kErased);
}

absl::StatusOr<std::optional<DiskEntryTable::Entry>> DiskEntryTable::DetachForErase(
    const ChunkKey& key) {
  absl::MutexLock l(&mu_);
  const Entry* e = records_.Find(key);
  if (e == nullptr) return std::nullopt;
  if (e->pins > 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("chunk ", key.ToHex(), " is pinned (", e->pins, " pins)"));
  }
  return DetachLocked(key, RemoveReason::kErased);
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
    const Entry* e = records_.Find(key);
    if (e == nullptr || e->pins > 0 || e->readers > 0) continue;
    dropped.emplace_back(key, DetachLocked(key, RemoveReason::kExpired));
  }
  return dropped;
}

void DiskEntryTable::Release(std::span<const Entry> entries, const absl::Status& index_delete,
                             bool expired) {
  absl::MutexLock l(&mu_);
  if (!index_delete.ok()) {
    counters_.IoError();
    return;
  }
  if (expired) counters_.Expired(entries.size());
  for (const Entry& e : entries) ReleaseExtentLocked(e);
}

std::vector<ChunkKey> DiskEntryTable::DropFile(uint32_t file_id) {
  absl::MutexLock l(&mu_);
  space_.RemoveFile(file_id);
  std::vector<ChunkKey> dropped = records_.KeysInFile(file_id);
  counters_.FileLost(dropped.size());
  // The extents belonged to the lost file: nothing to free.
  for (const ChunkKey& key : dropped) DetachLocked(key, RemoveReason::kErased);
  return dropped;
}

// ---------------------------------------------------------------- group commit

std::set<uint32_t> DiskEntryTable::FilesOf(std::span<const Gen> pending) const {
  absl::MutexLock l(&mu_);
  return records_.FilesOf(pending);
}

DiskEntryTable::CommitPlan DiskEntryTable::PrepareCommit(std::span<const Gen> pending,
                                                         std::span<const Gen> deferred,
                                                         const std::set<uint32_t>& failed_files,
                                                         const absl::Status& sync_status) {
  absl::MutexLock l(&mu_);
  CommitPlan plan;
  // Marked now: a Put that replaces one from here on keeps its extent reserved.
  for (const ChunkKey& key :
       records_.MarkCommitted(pending, failed_files, plan.entries, plan.written)) {
    // Its bytes may not be on the device: never index them; the record is gone.
    counters_.IoError(sync_status);
    ReleaseExtentLocked(DetachLocked(key, RemoveReason::kErased));
    plan.dropped.push_back(key);  // the index may still hold the entry it replaced
  }
  // An old extent may go once the index no longer points at it (eviction, erase and drop
  // delete the key's index entry under index_mu_).
  records_.SplitDeferred(deferred, plan.written, plan.to_free, plan.still_deferred);
  return plan;
}

void DiskEntryTable::CommitDone(const CommitPlan& plan) {
  absl::MutexLock l(&mu_);
  records_.CommitDone(plan.written.size());
  for (const auto& [key, gen] : plan.to_free) FinishReadLocked(key, gen);
  counters_.GroupCommitted(plan.entries.size());
}

std::vector<DiskEntryTable::Gen> DiskEntryTable::CommitFailed(const CommitPlan& plan,
                                                              const absl::Status& s) {
  absl::MutexLock l(&mu_);
  counters_.IoError(s);
  return records_.Uncommit(plan.written);
}

// ---------------------------------------------------------------- the rest of Tier

void DiskEntryTable::Find(std::span<const ChunkKey> keys,
                          const std::function<void(size_t, const IndexEntry&)>& fn) const {
  absl::MutexLock l(&mu_);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (const Entry* e = records_.Find(keys[i]); e != nullptr) fn(i, e->idx);
  }
}

std::vector<std::pair<ChunkKey, IndexEntry>> DiskEntryTable::TakeDirtyAccess() {
  absl::MutexLock l(&mu_);
  return records_.TakeDirtyAccess();
}

PinHandle DiskEntryTable::Pin(const ChunkKey& key) {
  absl::MutexLock l(&mu_);
  Entry* e = records_.Find(key);
  if (e == nullptr) {
    policy_->OnMiss(key);
    return PinHandle();
  }
  ++e->pins;
  policy_->OnAccess(key);  // a pin announces a read (tier.h)
  return PinHandle(&DiskEntryTable::Unpin, this, key, e->idx.record_bytes);
}

void DiskEntryTable::Unpin(void* self_ptr, const ChunkKey& key) {
  auto* self = static_cast<DiskEntryTable*>(self_ptr);
  absl::MutexLock l(&self->mu_);
  Entry* e = self->records_.Find(key);
  if (e != nullptr && e->pins > 0) --e->pins;
}

TierStats DiskEntryTable::stats() const {
  absl::MutexLock l(&mu_);
  TierStats st = counters_.tier();
  st.capacity_bytes = capacity_bytes_;
  st.used_bytes = records_.used_bytes();
  st.chunks = records_.size();
  st.pinned_bytes = records_.pinned_bytes();
  return st;
}

DiskTierExtraStats DiskEntryTable::extra_stats() const {
  absl::MutexLock l(&mu_);
  DiskTierExtraStats x = counters_.extra();
  x.file_bytes_total = space_.total_bytes();
  x.uncommitted = records_.uncommitted();
  return x;
}

}  // namespace kvt::internal
