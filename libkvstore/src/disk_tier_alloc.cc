#include "disk_tier_alloc.h"

#include <iterator>

namespace kvt::internal {

void ExtentAllocator::AddFile(uint32_t file_id, uint64_t size) {
  RemoveFile(file_id);
  File& f = files_[file_id];
  f.size = size;
  if (size > 0) f.free[0] = size;
  free_bytes_ += size;
  total_bytes_ += size;
}

void ExtentAllocator::RemoveFile(uint32_t file_id) {
  auto it = files_.find(file_id);
  if (it == files_.end()) return;
  for (const auto& [off, len] : it->second.free) free_bytes_ -= len;
  total_bytes_ -= it->second.size;
  files_.erase(it);
}

uint64_t ExtentAllocator::FileSize(uint32_t file_id) const {
  auto it = files_.find(file_id);
  return it == files_.end() ? 0 : it->second.size;
}

std::optional<Extent> ExtentAllocator::Allocate(uint64_t length) {
  if (length == 0) return std::nullopt;
  for (auto& [id, f] : files_) {
    for (auto it = f.free.begin(); it != f.free.end(); ++it) {
      if (it->second < length) continue;
      Extent e{id, it->first, length};
      const uint64_t rest = it->second - length;
      const uint64_t rest_off = it->first + length;
      f.free.erase(it);
      if (rest > 0) f.free[rest_off] = rest;
      free_bytes_ -= length;
      return e;
    }
  }
  return std::nullopt;
}

bool ExtentAllocator::Claim(const Extent& e) {
  auto fit = files_.find(e.file_id);
  if (fit == files_.end() || e.length == 0) return false;
  auto& free = fit->second.free;
  auto it = free.upper_bound(e.offset);
  if (it == free.begin()) return false;
  --it;
  const uint64_t off = it->first, len = it->second;
  if (e.offset + e.length > off + len) return false;
  free.erase(it);
  if (e.offset > off) free[off] = e.offset - off;
  if (off + len > e.offset + e.length) free[e.offset + e.length] = off + len - (e.offset + e.length);
  free_bytes_ -= e.length;
  return true;
}

void ExtentAllocator::Free(const Extent& e) {
  auto fit = files_.find(e.file_id);
  if (fit == files_.end() || e.length == 0) return;
  auto& free = fit->second.free;
  uint64_t off = e.offset, len = e.length;
  auto next = free.lower_bound(off);
  if (next != free.end() && next->first == off + len) {
    len += next->second;
    next = free.erase(next);
  }
  if (next != free.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      off = prev->first;
      len += prev->second;
      free.erase(prev);
    }
  }
  free[off] = len;
  free_bytes_ += e.length;
}

}  // namespace kvt::internal
