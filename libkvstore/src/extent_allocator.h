// Private to libkvstore: the one extent allocator of the tiers. It hands out byte ranges
// of "files" (regions of address space): the DiskTier's record files (ids = file ids),
// the HostTier's arena (one file, id 0). Free space of each file is a map offset →
// length of disjoint, coalesced extents. Units: bytes; callers pass multiples of their
// alignment (4096 for the disk tier, HostTierOptions::alignment for the host tier).
#ifndef KVSTORE_SRC_EXTENT_ALLOCATOR_H_
#define KVSTORE_SRC_EXTENT_ALLOCATOR_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <tuple>

namespace kvt::internal {

struct Extent {
  uint32_t file_id = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
};

// Not thread-safe (each tier guards it with its lock).
class ExtentAllocator {
 public:
  enum class Fit : uint8_t {
    // The first free extent that fits, files in id order, offsets ascending (DiskTier:
    // fills low files first so high files can be dropped when capacity shrinks).
    kFirst,
    // The smallest free extent that fits, ties to the lowest (file, offset) (HostTier:
    // keeps large runs whole in one arena).
    kBest,
  };
  explicit ExtentAllocator(Fit fit = Fit::kFirst) : fit_(fit) {}

  // A new file whose bytes [0, size) are all free (replaces a file of the same id).
  void AddFile(uint32_t file_id, uint64_t size);
  // Forgets a file and its free extents (its allocated extents are the caller's).
  void RemoveFile(uint32_t file_id);
  bool HasFile(uint32_t file_id) const { return files_.count(file_id) != 0; }
  uint64_t FileSize(uint32_t file_id) const;

  // Takes `length` bytes by the allocator's Fit, starting at a multiple of `align`
  // (the part of a free extent before that offset stays free); nullopt when no free
  // extent can hold it (or length == 0 or align == 0).
  std::optional<Extent> Allocate(uint64_t length, uint64_t align = 1);
  // Marks [offset, offset+length) used. False (nothing changed) unless the range lies
  // wholly inside one free extent of a known file.
  bool Claim(const Extent& e);
  // Returns an extent to the free list, coalescing with its free neighbours (ignored
  // for a removed file). REQUIRES: `e` was allocated or claimed and not freed since.
  void Free(const Extent& e);

  uint64_t free_bytes() const { return free_bytes_; }
  uint64_t total_bytes() const { return total_bytes_; }

 private:
  struct File {
    uint64_t size = 0;
    std::map<uint64_t, uint64_t> free;  // offset → length
  };
  void AddFree(uint32_t file_id, File& f, uint64_t offset, uint64_t length);
  void EraseFree(uint32_t file_id, File& f, std::map<uint64_t, uint64_t>::iterator it);

  const Fit fit_;
  std::map<uint32_t, File> files_;
  // (length, file, offset) of every free extent; kept only for Fit::kBest.
  std::set<std::tuple<uint64_t, uint32_t, uint64_t>> by_size_;
  uint64_t free_bytes_ = 0;
  uint64_t total_bytes_ = 0;
};

}  // namespace kvt::internal

#endif  // KVSTORE_SRC_EXTENT_ALLOCATOR_H_
