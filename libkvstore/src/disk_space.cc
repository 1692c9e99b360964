// The disk tier's space: extents, new record files, extents still being read
// (disk_space.h).
#include "disk_space.h"

#include <algorithm>

namespace kvt::internal {

void DiskSpace::SetNextFileId(uint32_t id) { next_file_id_ = std::max(next_file_id_, id); }

std::optional<DiskSpace::NewFile> DiskSpace::NextFile(uint64_t padded) {
  const uint64_t room = capacity_bytes_ - alloc_.total_bytes();
  if (no_more_files_ || room < padded) return std::nullopt;
  return NewFile{next_file_id_++, std::min(file_bytes_, room)};
}

void DiskSpace::Release(const Extent& e, uint64_t gen, uint32_t readers) {
  if (readers > 0) {
    doomed_[gen] = Doomed{e, readers};
  } else {
    alloc_.Free(e);
  }
}

void DiskSpace::ReaderDone(uint64_t gen) {
  if (auto ev = evicting_readers_.find(gen); ev != evicting_readers_.end()) {
    if (--ev->second == 0) evicting_readers_.erase(ev);
    return;
  }
  auto d = doomed_.find(gen);
  if (d != doomed_.end() && --d->second.readers == 0) {
    alloc_.Free(d->second.extent);
    doomed_.erase(d);
  }
}

void DiskSpace::HoldEvicting(uint64_t gen, uint32_t readers) {
  if (readers > 0) evicting_readers_[gen] = readers;
}

uint32_t DiskSpace::TakeEvicting(uint64_t gen) {
  auto ev = evicting_readers_.find(gen);
  if (ev == evicting_readers_.end()) return 0;
  const uint32_t readers = ev->second;
  evicting_readers_.erase(ev);
  return readers;
}

}  // namespace kvt::internal
