// The disk tier's records in memory (disk_record_map.h).
#include "disk_record_map.h"

namespace kvt::internal {

uint64_t DiskRecordMap::Insert(const ChunkKey& key, Entry en) {
  en.gen = next_gen_++;
  used_bytes_ += en.padded;
  if (!en.committed) ++uncommitted_;
  map_.emplace(key, en);
  return en.gen;
}

void DiskRecordMap::Restore(const ChunkKey& key, const Entry& en) {
  used_bytes_ += en.padded;
  map_.emplace(key, en);
}

DiskRecordMap::Entry DiskRecordMap::Detach(const ChunkKey& key) {
  auto it = map_.find(key);
  Entry e = it->second;
  if (!e.committed) --uncommitted_;
  dirty_access_.erase(key);
  used_bytes_ -= e.padded;
  map_.erase(it);
  return e;
}

DiskRecordMap::Entry* DiskRecordMap::Find(const ChunkKey& key) {
  auto it = map_.find(key);
  return it == map_.end() ? nullptr : &it->second;
}

const DiskRecordMap::Entry* DiskRecordMap::Find(const ChunkKey& key) const {
  auto it = map_.find(key);
  return it == map_.end() ? nullptr : &it->second;
}

DiskRecordMap::Entry* DiskRecordMap::FindCurrent(const ChunkKey& key, uint64_t gen) {
  Entry* e = Find(key);
  return e != nullptr && e->gen == gen ? e : nullptr;
}

std::vector<ChunkKey> DiskRecordMap::KeysInFile(uint32_t file_id) const {
  std::vector<ChunkKey> keys;
  for (const auto& [key, e] : map_) {
    if (e.idx.file_id == file_id) keys.push_back(key);
  }
  return keys;
}

size_t DiskRecordMap::MarkAccessed(const ChunkKey& key) {
  dirty_access_.insert(key);
  return dirty_access_.size();
}

std::vector<std::pair<ChunkKey, IndexEntry>> DiskRecordMap::TakeDirtyAccess() {
  std::vector<std::pair<ChunkKey, IndexEntry>> batch;
  batch.reserve(dirty_access_.size());
  for (const ChunkKey& k : dirty_access_) {
    auto it = map_.find(k);
    // An uncommitted record's index entry is written by its commit, after its fdatasync.
    if (it != map_.end() && it->second.committed) batch.emplace_back(k, it->second.idx);
  }
  dirty_access_.clear();
  return batch;
}

std::set<uint32_t> DiskRecordMap::FilesOf(std::span<const Gen> pending) const {
  std::set<uint32_t> ids;
  for (const auto& [key, gen] : pending) {
    auto it = map_.find(key);
    if (it != map_.end() && it->second.gen == gen) ids.insert(it->second.idx.file_id);
  }
  return ids;
}

std::vector<ChunkKey> DiskRecordMap::MarkCommitted(
    std::span<const Gen> pending, const std::set<uint32_t>& failed_files,
    std::vector<std::pair<ChunkKey, IndexEntry>>& entries, std::vector<Gen>& written) {
  std::vector<ChunkKey> failed;
  for (const auto& [key, gen] : pending) {
    Entry* e = FindCurrent(key, gen);
    if (e == nullptr || e->committed) continue;
    if (failed_files.count(e->idx.file_id) > 0) {
      failed.push_back(key);
      continue;
    }
    e->committed = true;
    entries.emplace_back(key, e->idx);
    written.emplace_back(key, gen);
  }
  return failed;
}

void DiskRecordMap::SplitDeferred(std::span<const Gen> deferred, std::span<const Gen> written,
                                  std::vector<Gen>& to_free,
                                  std::vector<Gen>& still_deferred) const {
  absl::flat_hash_set<ChunkKey> committing;
  for (const auto& w : written) committing.insert(w.first);
  for (const auto& d : deferred) {
    const Entry* e = Find(d.first);
    const bool free_now = e == nullptr || (committing.contains(d.first) && e->committed);
    (free_now ? to_free : still_deferred).push_back(d);
  }
}

std::vector<DiskRecordMap::Gen> DiskRecordMap::Uncommit(std::span<const Gen> written) {
  std::vector<Gen> retry;
  for (const auto& [key, gen] : written) {
    Entry* e = FindCurrent(key, gen);
    if (e == nullptr) {
      --uncommitted_;  // replaced meanwhile (detached as committed)
      continue;
    }
    e->committed = false;
    retry.emplace_back(key, gen);
  }
  return retry;
}

uint64_t DiskRecordMap::pinned_bytes() const {
  uint64_t bytes = 0;
  for (const auto& [k, e] : map_) {
    if (e.pins > 0) bytes += e.padded;
  }
  return bytes;
}

}  // namespace kvt::internal
