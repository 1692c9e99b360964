// Private to libkvstore: the disk tier's records in memory (docs/disk-tier.md): one entry
// per stored record, keyed by its chunk key, with what the table keeps in step with the
// entries: the bytes their extents use, how many are not yet durable, and whose
// last-access times are not yet in the index.
#ifndef KVSTORE_SRC_DISK_RECORD_MAP_H_
#define KVSTORE_SRC_DISK_RECORD_MAP_H_

#include <cstdint>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "disk_tier_index.h"

namespace kvt::internal {

// Not thread-safe: the DiskEntryTable guards it with its lock.
class DiskRecordMap {
 public:
  struct Entry {
    IndexEntry idx;
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
  // (key, gen) names one stored record.
  using Gen = std::pair<ChunkKey, uint64_t>;

  // Enters `en` for `key` (REQUIRES: absent) as a new record; returns its gen.
  uint64_t Insert(const ChunkKey& key, Entry en);
  // Puts back an entry Detach returned, as it was (its gen kept; an eviction undone).
  void Restore(const ChunkKey& key, const Entry& en);
  // Removes `key`'s entry (REQUIRES: present) and returns it.
  Entry Detach(const ChunkKey& key);

  // nullptr when absent; valid until the next Insert, Restore or Detach.
  Entry* Find(const ChunkKey& key);
  const Entry* Find(const ChunkKey& key) const;
  // Record `gen` of `key`; nullptr when replaced or gone.
  Entry* FindCurrent(const ChunkKey& key, uint64_t gen);
  bool Contains(const ChunkKey& key) const { return map_.contains(key); }
  // The keys of the records stored in record file `file_id`.
  std::vector<ChunkKey> KeysInFile(uint32_t file_id) const;

  // A client read stamped `key`'s last-access time: it is written to the index later.
  // Returns how many records have such a time waiting.
  size_t MarkAccessed(const ChunkKey& key);
  // The committed records' last-access times not yet written to the index (taken).
  std::vector<std::pair<ChunkKey, IndexEntry>> TakeDirtyAccess();

  // --- group commit (DiskCommit::kGrouped)
  // The record files of the records still current among `pending`.
  std::set<uint32_t> FilesOf(std::span<const Gen> pending) const;
  // Marks the current, uncommitted records of `pending` committed (an entry that
  // replaces one from here on keeps its extent reserved) and appends them to `entries`
  // (the index entries to write) and `written`, except those stored in `failed_files`:
  // their keys are returned, their entries left as they are.
  std::vector<ChunkKey> MarkCommitted(std::span<const Gen> pending,
                                      const std::set<uint32_t>& failed_files,
                                      std::vector<std::pair<ChunkKey, IndexEntry>>& entries,
                                      std::vector<Gen>& written);
  // Splits the replaced records' extents `deferred` into those the index no longer
  // points at once `written` is durable (their key's current entry is written by it,
  // or their key is gone) and those that wait for a later commit (replaced again by an
  // entry it does not cover).
  void SplitDeferred(std::span<const Gen> deferred, std::span<const Gen> written,
                     std::vector<Gen>& to_free, std::vector<Gen>& still_deferred) const;
  // `n` records a commit marked committed are durable.
  void CommitDone(uint64_t n) { uncommitted_ -= n; }
  // The commit of `written` failed: those still current are uncommitted again and
  // returned (to retry).
  std::vector<Gen> Uncommit(std::span<const Gen> written);

  size_t size() const { return map_.size(); }
  bool empty() const { return map_.empty(); }
  // The padded bytes of all entries.
  uint64_t used_bytes() const { return used_bytes_; }
  // The padded bytes of pinned entries.
  uint64_t pinned_bytes() const;
  // Entries written but not yet durable (committed == false, or in a commit under way).
  uint64_t uncommitted() const { return uncommitted_; }

 private:
  absl::flat_hash_map<ChunkKey, Entry> map_;
  absl::flat_hash_set<ChunkKey> dirty_access_;
  uint64_t next_gen_ = 1;
  uint64_t used_bytes_ = 0;
  uint64_t uncommitted_ = 0;
};

}  // namespace kvt::internal

#endif  // KVSTORE_SRC_DISK_RECORD_MAP_H_
