// AbsenceRecord: why a key a store was offered is not held now (for `kvtier inspect`).
//
// The tiers of one store share one record. Each tier notes, per key, the moments it
// declines a record (its CachePolicy's admission) or stops holding one (eviction, TTL
// expiry, an explicit erase); the store's Lookup reads the last note of a key no tier
// holds (LookupOptions::explain_misses). A replaced record is still held: not noted.
//
// What a note means. A key's entry is its last decline or removal in any tier, so for a
// key held by no tier it is the event that left it nowhere: "evicted" from the disk tier
// (the bottom), "evicted" from host memory with no tier below holding it (its demotion
// was dropped, or there is no tier below), "rejected" by every tier that was offered it
// since (`rejected_by`), "expired" by a tier's TTL, "erased" by an operator's eviction.
// Records dropped for failing verification, and files lost behind the disk tier's back,
// are not noted (the key may then show an older reason). Nothing is persisted: a new
// process starts with an empty record.
//
// Bounded: at most `max_entries` keys; when full, the key noted longest ago is
// forgotten (a key noted again moves to the newest end). A key with no entry is
// kNotStored while the record has forgotten nothing (every decline and removal since it
// began is in it, so the key was never offered, or is lost in a way not noted), and
// kNoRecord once it has (an old entry may have been forgotten).
//
// Memory: one hash slot (40 bytes: key, namespace, ring position, reason, tier, mask;
// plus 1 control byte) at a load of 7/16..7/8, plus a 16-byte ring slot per entry: at
// most kMaxBytesPerEntry (128) bytes per entry, grown as keys are noted (about 100 at
// kDefaultEntries = 16384: 1.6 MiB).
//
// Thread-safe. Its lock is a leaf: tiers call Note* under their own locks, and nothing
// is called with it held. A note is one hash update (amortized O(1); the table never
// holds more than max_entries keys).
#ifndef KVSTORE_ABSENCE_RECORD_H_
#define KVSTORE_ABSENCE_RECORD_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kvstore/cache_policy.h"
#include "kvstore/tier.h"
#include "kvstore/types.h"

namespace kvt {

// Why a key is not held. Values travel in the wire protocol (proto MissReason = value +
// 1) and the CLI's --json: never renumber.
enum class AbsenceReason : uint8_t {
  kNoRecord = 0,   // no entry, and the record has forgotten entries: unknown
  kNotStored = 1,  // no entry, and the record has forgotten none: not offered since it began
  kRejected = 2,   // declined by the admission of each tier in `rejected_by`
  kEvicted = 3,    // evicted from `tier` to make room, and held by no other tier
  kExpired = 4,    // dropped by `tier`'s TTL
  kErased = 5,     // erased by an explicit evict (kvtier evict, the Evict RPC)
};
// "no_record", "not_stored", "rejected", "evicted", "expired", "erased".
std::string_view AbsenceReasonName(AbsenceReason reason);

// A key's last note (AbsenceRecord::Find).
struct Absence {
  AbsenceReason reason = AbsenceReason::kNoRecord;
  TierKind tier = TierKind::kHost;  // the tier of the last note (kRejected..kErased)
  // kRejected: bit (1 << TierKind) of each tier that declined it since it last left a
  // tier (host memory, then the disk below it, for a write-through).
  uint8_t rejected_by = 0;
};

class AbsenceRecord {
 public:
  static constexpr size_t kDefaultEntries = 16384;
  static constexpr size_t kMaxEntries = size_t{1} << 24;
  static constexpr size_t kMaxBytesPerEntry = 128;

  // InvalidArgument unless 1 <= max_entries <= kMaxEntries.
  static absl::StatusOr<std::shared_ptr<AbsenceRecord>> Create(size_t max_entries);

  // `tier` of kind `kind` declined the record of `key` (namespace `ns`).
  void NoteRejected(const ChunkKey& key, const NamespaceId& ns, TierKind kind);
  // `tier` of kind `kind` stopped holding `key` for `reason`; kReplaced is ignored (the
  // key is still held).
  void NoteRemoved(const ChunkKey& key, const NamespaceId& ns, TierKind kind, RemoveReason reason);

  // The last note of `key`; a key whose namespace `visible` rejects reads as one with
  // no entry (tenancy: another tenant's key reveals nothing). Null `visible` = every
  // namespace. Only meaningful for a key no tier holds (the caller checks that).
  Absence Find(const ChunkKey& key, const std::function<bool(const NamespaceId&)>& visible) const;

  size_t max_entries() const { return max_entries_; }
  // Keys with an entry now (<= max_entries()).
  size_t size() const;
  // Entries forgotten to stay within max_entries() since creation.
  uint64_t forgotten() const;
  // Heap bytes held now (hash table and ring), <= max_entries() * kMaxBytesPerEntry.
  size_t memory_bytes() const;

 private:
  explicit AbsenceRecord(size_t max_entries) : max_entries_(max_entries) {}

  struct Entry {
    NamespaceId ns;
    uint32_t pos = 0;  // the ring slot of its last note
    AbsenceReason reason = AbsenceReason::kNoRecord;
    TierKind tier = TierKind::kHost;
    uint8_t rejected_by = 0;
  };
  // Takes the next ring slot for `key` (forgetting the slot's owner when the ring is
  // full) and returns the key's entry, created when new.
  Entry& NoteLocked(const ChunkKey& key, const NamespaceId& ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_entries_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<ChunkKey, Entry> map_ ABSL_GUARDED_BY(mu_);
  // Keys in note order (oldest at next_ once full); a slot whose key was noted again
  // later is stale (its entry's pos names another slot) and forgets nothing.
  std::vector<ChunkKey> ring_ ABSL_GUARDED_BY(mu_);
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t forgotten_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kvt

#endif  // KVSTORE_ABSENCE_RECORD_H_
