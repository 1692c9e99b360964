// Private to libkvstore: the disk tier's space (docs/disk-tier.md, "Space and disk
// full"): the extents of its record files (ExtentAllocator, first fit), when a new file
// may be created (up to capacity_bytes, until the filesystem says ENOSPC), and when a
// record's extent may be reused: an extent whose record is gone but which readers are
// still copying is freed by the last of them.
#ifndef KVSTORE_SRC_DISK_SPACE_H_
#define KVSTORE_SRC_DISK_SPACE_H_

#include <cstdint>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "extent_allocator.h"

namespace kvt::internal {

// Not thread-safe: the DiskEntryTable guards it with its lock.
class DiskSpace {
 public:
  DiskSpace(uint64_t capacity_bytes, uint64_t file_bytes)
      : capacity_bytes_(capacity_bytes), file_bytes_(file_bytes) {}

  // A record file whose bytes [0, bytes) are free.
  void AddFile(uint32_t file_id, uint64_t bytes) { alloc_.AddFile(file_id, bytes); }
  // A file lost behind the tier's back: its extents are forgotten.
  void RemoveFile(uint32_t file_id) { alloc_.RemoveFile(file_id); }
  bool HasFile(uint32_t file_id) const { return alloc_.HasFile(file_id); }
  // Files get ids from here up.
  void SetNextFileId(uint32_t id);

  std::optional<Extent> Allocate(uint64_t padded) { return alloc_.Allocate(padded); }
  // Marks a recovered record's extent used; false when it overlaps another.
  bool Claim(const Extent& e) { return alloc_.Claim(e); }
  // Frees an extent nobody reads (a failed write's).
  void Free(const Extent& e) { alloc_.Free(e); }

  // When no free extent holds `padded` bytes: the id and size of the record file to
  // create (its size: file_bytes, or what is left of capacity_bytes), or nullopt when
  // none may be (capacity reached, or no more files): evict instead.
  struct NewFile {
    uint32_t id = 0;
    uint64_t bytes = 0;
  };
  std::optional<NewFile> NextFile(uint64_t padded);
  // The filesystem is full (fallocate said ENOSPC): no more files.
  void StopNewFiles() { no_more_files_ = true; }

  // The extent of record `gen` (detached from the table) may be reused once its
  // `readers` are done: now when there are none.
  void Release(const Extent& e, uint64_t gen, uint32_t readers);
  // A reader of detached record `gen` is done (frees a released extent after its last).
  void ReaderDone(uint64_t gen);
  // Eviction: victim `gen`, detached but not yet released, has `readers` copying it.
  void HoldEvicting(uint64_t gen, uint32_t readers);
  // Its readers still copying, now handed to Release (or back to the table).
  uint32_t TakeEvicting(uint64_t gen);

  uint64_t free_bytes() const { return alloc_.free_bytes(); }
  uint64_t total_bytes() const { return alloc_.total_bytes(); }

 private:
  const uint64_t capacity_bytes_;
  const uint64_t file_bytes_;
  ExtentAllocator alloc_;
  uint32_t next_file_id_ = 0;
  bool no_more_files_ = false;
  // gen -> an extent released while readers were copying it, and how many still are.
  struct Doomed {
    Extent extent;
    uint32_t readers = 0;
  };
  absl::flat_hash_map<uint64_t, Doomed> doomed_;
  // gen -> readers still copying a victim detached for eviction and not yet released.
  absl::flat_hash_map<uint64_t, uint32_t> evicting_readers_;
};

}  // namespace kvt::internal

#endif  // KVSTORE_SRC_DISK_SPACE_H_
