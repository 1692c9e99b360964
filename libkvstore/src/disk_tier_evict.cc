// DiskTier eviction: reserving an extent (free space, a new record file, or evicting
// least-recently accessed chunks). See docs/disk-tier.md ("Write order", "Space and disk
// full", "Thread safety").
#include <algorithm>
#include <iterator>
#include <map>
#include <new>

#include "absl/strings/str_cat.h"
#include "disk_tier_impl.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/record_buffer.h"
#include "spdlog/spdlog.h"

namespace kvt {

using internal::Extent;

void DiskTier::Impl::ReattachLocked(std::vector<std::pair<ChunkKey, Entry>>& victims) {
  // The policy still holds them where they were (it is told of evictions only once
  // their index entries are deleted).
  for (auto& [key, en] : victims) {
    if (auto ev = evicting_readers_.find(en.gen); ev != evicting_readers_.end()) {
      en.readers = ev->second;
      evicting_readers_.erase(ev);
    } else {
      en.readers = 0;
    }
    used_bytes_ += en.padded;
    map_.emplace(key, en);
  }
}

void DiskTier::Impl::FinishEviction(std::vector<std::pair<ChunkKey, Entry>> victims,
                                    std::vector<Victim>* out) {
  if (out != nullptr) {
    // Read each record once for the caller (demotion) before its extent can be reused.
    // No tier lock is held: the extents stay reserved until the release below. No hash:
    // the tier it is demoted to checks it as it checks every Put (verified once).
    std::map<uint32_t, std::shared_ptr<RecordFile>> files;
    {
      absl::MutexLock l(&mu_);
      files = files_;
    }
    uint64_t reads = 0;
    for (const auto& [key, e] : victims) {
      auto f = files.find(e.idx.file_id);
      if (f == files.end()) continue;
      RecordBuffer buf;
      try {
        buf = RecordBuffer::Make(e.idx.record_bytes);
      } catch (const std::bad_alloc&) {
        continue;  // evicted without its bytes: not demoted
      }
      ++reads;
      if (!ReadRecord(e.idx, f->second, buf.span(), nullptr).ok()) continue;
      // A record whose header no longer decodes to its key is not handed on.
      auto h = DecodeChunkHeader(buf.span());
      if (!h.ok() || h->key != key || h->record_bytes() != e.idx.record_bytes) continue;
      out->push_back(Victim{key, std::move(buf)});
    }
    absl::MutexLock l(&mu_);
    extra_.victim_reads += reads;
  }
  absl::MutexLock l(&mu_);
  for (auto& [key, en] : victims) {
    if (auto ev = evicting_readers_.find(en.gen); ev != evicting_readers_.end()) {
      en.readers = ev->second;
      evicting_readers_.erase(ev);
    } else {
      en.readers = 0;
    }
    ReleaseExtentLocked(en);
  }
  counters_.evictions += victims.size();
}

absl::StatusOr<Extent> DiskTier::Impl::Reserve(uint64_t padded, std::vector<Victim>* out) {
  while (true) {
    {
      // Free space needs no index write: do not wait behind one (a group commit).
      absl::MutexLock l(&mu_);
      if (auto ext = alloc_.Allocate(padded)) return *ext;
    }
    std::vector<std::pair<ChunkKey, Entry>> victims;
    {
      absl::MutexLock il(&index_mu_);
      uint32_t new_id = 0;
      uint64_t new_size = 0;
      {
        absl::MutexLock l(&mu_);
        if (auto ext = alloc_.Allocate(padded)) return *ext;
        const uint64_t total = alloc_.total_bytes();
        const uint64_t room = options_.capacity_bytes - total;
        if (!no_more_files_ && room >= padded) {
          new_id = next_file_id_++;
          new_size = std::min(options_.file_bytes, room);
        } else {
          // Evict unpinned chunks worth at least `padded` bytes, in the policy's order.
          // (Keys of another Reserve's victims, detached but not yet deleted from the
          // index, are still in the policy: skipped.)
          uint64_t freed = 0;
          std::vector<ChunkKey> picked;
          policy_->VisitVictims([&](const ChunkKey& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
            auto it = map_.find(key);
            if (it == map_.end() || it->second.pins > 0) return true;
            freed += it->second.padded;
            picked.push_back(key);
            return freed < padded;
          });
          for (const ChunkKey& k : picked) {
            Entry en = DetachLocked(map_.find(k), std::nullopt);
            if (en.readers > 0) evicting_readers_[en.gen] = en.readers;
            victims.emplace_back(k, en);
          }
          if (victims.empty()) {
            return absl::ResourceExhaustedError(absl::StrCat(
                "disk tier full: ", padded, " bytes needed, ", alloc_.free_bytes(), " free of ",
                options_.capacity_bytes, ", and all ", map_.size(), " chunks are pinned"));
          }
        }
      }
      if (new_size > 0) {
        auto f = CreateFile(new_id, new_size);
        absl::MutexLock l(&mu_);
        if (f.ok()) {
          alloc_.AddFile(new_id, new_size);
          files_[new_id] = std::move(*f);
          continue;
        }
        if (absl::IsResourceExhausted(f.status())) {
          // The filesystem is full: live within the files we have, evicting as needed.
          ++extra_.enospc;
          no_more_files_ = true;
          spdlog::warn("disk tier: {}; no more record files, evicting instead",
                       f.status().ToString());
          if (map_.empty() && alloc_.total_bytes() == 0) return f.status();
          continue;
        }
        ++counters_.io_errors;
        return f.status();
      }
      std::vector<ChunkKey> keys;
      keys.reserve(victims.size());
      for (const auto& v : victims) keys.push_back(v.first);
      // Synced: the deletion is durable before the extents are reused.
      absl::Status s = index_->Delete(keys, /*sync=*/true);
      if (!s.ok()) {
        // Nothing was evicted: the victims stay (their index entries do), the put fails.
        absl::MutexLock l(&mu_);
        ReattachLocked(victims);
        ++counters_.io_errors;
        if (absl::IsResourceExhausted(s)) ++extra_.enospc;
        return absl::Status(s.code(), absl::StrCat("cannot evict ", keys.size(),
                                                   " chunks to make room: ", s.message()));
      }
      absl::MutexLock l(&mu_);
      // A key put again meanwhile (kGrouped publishes without index_mu_) is held again.
      for (const ChunkKey& k : keys) {
        if (!map_.contains(k)) policy_->OnRemove(k, RemoveReason::kEvicted);
      }
    }
    FinishEviction(std::move(victims), out);
  }
}

}  // namespace kvt
