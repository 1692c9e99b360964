// Private to libkvstore: the DiskTier's extent allocator over its record files.
// Free space of each file is a map offset → length of disjoint, coalesced extents.
// First fit, files in id order. Units: bytes; callers pass 4096-multiples.
#ifndef KVSTORE_SRC_DISK_TIER_ALLOC_H_
#define KVSTORE_SRC_DISK_TIER_ALLOC_H_

#include <cstdint>
#include <map>
#include <optional>

namespace kvt::internal {

struct Extent {
  uint32_t file_id = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
};

// Not thread-safe (DiskTier guards it with its lock).
class ExtentAllocator {
 public:
  // A new file whose bytes [0, size) are all free.
  void AddFile(uint32_t file_id, uint64_t size);
  // Forgets a file and its free extents (its allocated extents are the caller's).
  void RemoveFile(uint32_t file_id);
  bool HasFile(uint32_t file_id) const { return files_.count(file_id) != 0; }
  uint64_t FileSize(uint32_t file_id) const;

  std::optional<Extent> Allocate(uint64_t length);
  // Marks [offset, offset+length) used. False (nothing changed) unless the range lies
  // wholly inside one free extent of a known file.
  bool Claim(const Extent& e);
  // Returns an extent to the free list (ignored for a removed file).
  void Free(const Extent& e);

  uint64_t free_bytes() const { return free_bytes_; }
  uint64_t total_bytes() const { return total_bytes_; }

 private:
  struct File {
    uint64_t size = 0;
    std::map<uint64_t, uint64_t> free;  // offset → length
  };
  std::map<uint32_t, File> files_;
  uint64_t free_bytes_ = 0;
  uint64_t total_bytes_ = 0;
};

}  // namespace kvt::internal

#endif  // KVSTORE_SRC_DISK_TIER_ALLOC_H_
