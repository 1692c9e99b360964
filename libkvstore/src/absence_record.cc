#include "kvstore/absence_record.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kvt {

std::string_view AbsenceReasonName(AbsenceReason reason) {
  switch (reason) {
    case AbsenceReason::kNoRecord:
      return "no_record";
    case AbsenceReason::kNotStored:
      return "not_stored";
    case AbsenceReason::kRejected:
      return "rejected";
    case AbsenceReason::kEvicted:
      return "evicted";
    case AbsenceReason::kExpired:
      return "expired";
    case AbsenceReason::kErased:
      return "erased";
  }
  return "no_record";
}

absl::StatusOr<std::shared_ptr<AbsenceRecord>> AbsenceRecord::Create(size_t max_entries) {
  if (max_entries < 1 || max_entries > kMaxEntries) {
    return absl::InvalidArgumentError(
        absl::StrCat("absence record: max_entries = ", max_entries, ", expected 1..", kMaxEntries));
  }
  return std::shared_ptr<AbsenceRecord>(new AbsenceRecord(max_entries));
}

AbsenceRecord::Entry& AbsenceRecord::NoteLocked(const ChunkKey& key, const NamespaceId& ns) {
  if (ring_.capacity() < max_entries_) ring_.reserve(max_entries_);
  const size_t pos = next_;
  next_ = next_ + 1 == max_entries_ ? 0 : next_ + 1;
  if (pos < ring_.size()) {
    // The ring is full: the slot's key is forgotten unless it was noted again since.
    const ChunkKey old = ring_[pos];
    if (old != key) {
      auto it = map_.find(old);
      if (it != map_.end() && it->second.pos == pos) {
        map_.erase(it);
        ++forgotten_;
      }
    }
    ring_[pos] = key;
  } else {
    ring_.push_back(key);
  }
  Entry& e = map_[key];
  e.ns = ns;
  e.pos = static_cast<uint32_t>(pos);
  return e;
}

void AbsenceRecord::NoteRejected(const ChunkKey& key, const NamespaceId& ns, TierKind kind) {
  const uint8_t bit = static_cast<uint8_t>(1u << static_cast<unsigned>(kind));
  absl::MutexLock lock(&mu_);
  Entry& e = NoteLocked(key, ns);
  // Declines since the key last left a tier add up (host memory, then the disk below).
  e.rejected_by =
      e.reason == AbsenceReason::kRejected ? static_cast<uint8_t>(e.rejected_by | bit) : bit;
  e.reason = AbsenceReason::kRejected;
  e.tier = kind;
}

void AbsenceRecord::NoteRemoved(const ChunkKey& key, const NamespaceId& ns, TierKind kind,
                                RemoveReason reason) {
  AbsenceReason why;
  switch (reason) {
    case RemoveReason::kEvicted:
      why = AbsenceReason::kEvicted;
      break;
    case RemoveReason::kExpired:
      why = AbsenceReason::kExpired;
      break;
    case RemoveReason::kErased:
      why = AbsenceReason::kErased;
      break;
    default:
      return;  // kReplaced: still held
  }
  absl::MutexLock lock(&mu_);
  Entry& e = NoteLocked(key, ns);
  e.reason = why;
  e.tier = kind;
  e.rejected_by = 0;
}

Absence AbsenceRecord::Find(const ChunkKey& key,
                            const std::function<bool(const NamespaceId&)>& visible) const {
  Entry e;
  bool found = false;
  uint64_t forgotten = 0;
  {
    absl::MutexLock lock(&mu_);
    forgotten = forgotten_;
    if (auto it = map_.find(key); it != map_.end()) {
      e = it->second;
      found = true;
    }
  }
  // `visible` runs without the lock (it may take the caller's own, e.g. a catalog's).
  if (!found || (visible && !visible(e.ns))) {
    return Absence{.reason = forgotten == 0 ? AbsenceReason::kNotStored : AbsenceReason::kNoRecord};
  }
  return Absence{.reason = e.reason, .tier = e.tier, .rejected_by = e.rejected_by};
}

size_t AbsenceRecord::size() const {
  absl::MutexLock lock(&mu_);
  return map_.size();
}

uint64_t AbsenceRecord::forgotten() const {
  absl::MutexLock lock(&mu_);
  return forgotten_;
}

size_t AbsenceRecord::memory_bytes() const {
  absl::MutexLock lock(&mu_);
  using Slot = absl::flat_hash_map<ChunkKey, Entry>::value_type;
  return map_.capacity() * (sizeof(Slot) + 1) + ring_.capacity() * sizeof(ChunkKey);
}

}  // namespace kvt
