#include "extent_allocator.h"

#include <iterator>

namespace kvt::internal {

void ExtentAllocator::AddFree(uint32_t file_id, File& f, uint64_t offset, uint64_t length) {
  f.free[offset] = length;
  if (fit_ == Fit::kBest) by_size_.emplace(length, file_id, offset);
}

void ExtentAllocator::EraseFree(uint32_t file_id, File& f,
                                std::map<uint64_t, uint64_t>::iterator it) {
  if (fit_ == Fit::kBest) by_size_.erase({it->second, file_id, it->first});
  f.free.erase(it);
}

void ExtentAllocator::AddFile(uint32_t file_id, uint64_t size) {
  RemoveFile(file_id);
  File& f = files_[file_id];
  f.size = size;
  if (size > 0) AddFree(file_id, f, 0, size);
  free_bytes_ += size;
  total_bytes_ += size;
}

void ExtentAllocator::RemoveFile(uint32_t file_id) {
  auto it = files_.find(file_id);
  if (it == files_.end()) return;
  for (const auto& [off, len] : it->second.free) {
    free_bytes_ -= len;
    if (fit_ == Fit::kBest) by_size_.erase({len, file_id, off});
  }
  total_bytes_ -= it->second.size;
  files_.erase(it);
}

uint64_t ExtentAllocator::FileSize(uint32_t file_id) const {
  auto it = files_.find(file_id);
  return it == files_.end() ? 0 : it->second.size;
}

std::optional<Extent> ExtentAllocator::Allocate(uint64_t length, uint64_t align) {
  if (length == 0 || align == 0) return std::nullopt;
  // Where a free extent [off, off + len) can hold `length` bytes at a multiple of align.
  auto place = [&](uint64_t off, uint64_t len) -> std::optional<uint64_t> {
    const uint64_t at = (off + align - 1) / align * align;
    if (at - off > len || len - (at - off) < length) return std::nullopt;
    return at;
  };
  std::optional<Extent> found;
  if (fit_ == Fit::kBest) {
    for (auto s = by_size_.lower_bound({length, 0, 0}); s != by_size_.end() && !found; ++s) {
      if (auto at = place(std::get<2>(*s), std::get<0>(*s))) {
        found = Extent{std::get<1>(*s), *at, length};
      }
    }
  } else {
    for (auto& [fid, f] : files_) {
      for (const auto& [off, len] : f.free) {
        if (auto at = place(off, len)) {
          found = Extent{fid, *at, length};
          break;
        }
      }
      if (found) break;
    }
  }
  if (!found || !Claim(*found)) return std::nullopt;
  return found;
}

bool ExtentAllocator::Claim(const Extent& e) {
  auto fit = files_.find(e.file_id);
  if (fit == files_.end() || e.length == 0) return false;
  File& f = fit->second;
  auto it = f.free.upper_bound(e.offset);
  if (it == f.free.begin()) return false;
  --it;
  const uint64_t off = it->first, len = it->second;
  if (e.offset + e.length > off + len) return false;
  EraseFree(e.file_id, f, it);
  if (e.offset > off) AddFree(e.file_id, f, off, e.offset - off);
  if (off + len > e.offset + e.length) {
    AddFree(e.file_id, f, e.offset + e.length, off + len - (e.offset + e.length));
  }
  free_bytes_ -= e.length;
  return true;
}

void ExtentAllocator::Free(const Extent& e) {
  auto fit = files_.find(e.file_id);
  if (fit == files_.end() || e.length == 0) return;
  File& f = fit->second;
  uint64_t off = e.offset, len = e.length;
  auto next = f.free.lower_bound(off);
  if (next != f.free.end() && next->first == off + len) {
    len += next->second;
    auto after = std::next(next);
    EraseFree(e.file_id, f, next);
    next = after;
  }
  if (next != f.free.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      off = prev->first;
      len += prev->second;
      EraseFree(e.file_id, f, prev);
    }
  }
  AddFree(e.file_id, f, off, len);
  free_bytes_ += e.length;
}

}  // namespace kvt::internal
