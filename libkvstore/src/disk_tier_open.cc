// DiskTier: options, Open (recovery from the index), record file management.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <map>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "disk_tier_impl.h"
#include "kvstore/chunk_codec.h"
#include "spdlog/spdlog.h"

namespace kvt {

namespace fs = std::filesystem;
using internal::ErrnoToStatus;
using internal::Extent;
using internal::IndexEntry;
using internal::RoundUpToIoAlign;

std::string_view DiskIoBackendName(DiskIoBackend backend) {
  return backend == DiskIoBackend::kIoUring ? "io_uring" : "pread";
}

absl::Status DiskTierOptions::Validate() const {
  if (dir.empty()) return absl::InvalidArgumentError("DiskTierOptions.dir is empty");
  if (capacity_bytes == 0 || capacity_bytes % 4096 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("DiskTierOptions.capacity_bytes = ", capacity_bytes,
                     ", expected a positive multiple of 4096"));
  }
  if (file_bytes == 0 || file_bytes % 4096 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("DiskTierOptions.file_bytes = ", file_bytes,
                                                   ", expected a positive multiple of 4096"));
  }
  if (queue_depth == 0 || queue_depth > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("DiskTierOptions.queue_depth = ", queue_depth, ", expected 1..256"));
  }
  if (io_bytes == 0 || io_bytes % 4096 != 0 || io_bytes > (1ull << 30)) {
    return absl::InvalidArgumentError(absl::StrCat("DiskTierOptions.io_bytes = ", io_bytes,
                                                   ", expected a multiple of 4096 in (0, 1 GiB]"));
  }
  if (commit_delay_ms == 0 || commit_delay_ms > 60000) {
    return absl::InvalidArgumentError(
        absl::StrCat("DiskTierOptions.commit_delay_ms = ", commit_delay_ms, ", expected 1..60000"));
  }
  if (commit != DiskCommit::kEachPut && commit != DiskCommit::kGrouped) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DiskTierOptions.commit = ", static_cast<int>(commit), ", expected kEachPut or kGrouped"));
  }
  if (access_flush_batch == 0) {
    return absl::InvalidArgumentError("DiskTierOptions.access_flush_batch = 0, expected >= 1");
  }
  if (absl::Status s = cache_policy.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("DiskTierOptions.cache_policy: ", s.message()));
  }
  return absl::OkStatus();
}

RecordFile::~RecordFile() {
  if (fd >= 0) ::close(fd);
}

namespace {

std::string RecordPath(const std::string& dir, uint32_t id) {
  char name[32];
  std::snprintf(name, sizeof name, "rec-%06u.dat", id);
  return (fs::path(dir) / "records" / name).string();
}

// Parses "rec-<digits>.dat".
bool ParseRecordName(const std::string& name, uint32_t* id) {
  unsigned v = 0;
  int consumed = 0;
  if (std::sscanf(name.c_str(), "rec-%u.dat%n", &v, &consumed) != 1) return false;
  if (static_cast<size_t>(consumed) != name.size()) return false;
  *id = v;
  return true;
}

void SyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

}  // namespace

absl::StatusOr<std::shared_ptr<RecordFile>> DiskTier::Impl::OpenFile(uint32_t id,
                                                                     const std::string& path,
                                                                     bool create) {
  int flags = O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0);
  int fd = -1;
  if (direct_io_.load()) {
    fd = ::open(path.c_str(), flags | O_DIRECT, 0644);
    if (fd < 0 && errno == EINVAL) {
      spdlog::warn("disk tier: {} refuses O_DIRECT; using buffered I/O (+fdatasync)", options_.dir);
      direct_io_.store(false);
    }
  }
  if (fd < 0 && !direct_io_.load()) fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("open ", path));
  auto f = std::make_shared<RecordFile>();
  f->id = id;
  f->path = path;
  f->fd = fd;
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoToStatus(errno, absl::StrCat("fstat ", path));
  f->size = static_cast<uint64_t>(st.st_size);
  f->dev = st.st_dev;
  f->ino = st.st_ino;
  return f;
}

absl::StatusOr<std::shared_ptr<RecordFile>> DiskTier::Impl::CreateFile(uint32_t id, uint64_t size) {
  const std::string path = RecordPath(options_.dir, id);
  if (options_.index_reserve_bytes > 0) {
    // Record files never take the index's reserve (see DiskIndex): treated as ENOSPC.
    auto free_bytes = internal::FreeBytes(options_.dir);
    if (free_bytes.ok() && *free_bytes < size + options_.index_reserve_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "record file ", path, " of ", size, " bytes not created: ", *free_bytes,
          " bytes free, and the index keeps a reserve of ", options_.index_reserve_bytes));
    }
  }
  auto f = OpenFile(id, path, /*create=*/true);
  if (!f.ok()) return f.status();
  if (absl::Status s = fs_->Allocate(Ref(**f), size); !s.ok()) {
    ::unlink(path.c_str());
    return s;
  }
  (*f)->size = size;
  SyncDir((fs::path(options_.dir) / "records").string());
  return f;
}

bool DiskTier::Impl::StillOnDisk(const RecordFile& f) {
  struct stat st;
  if (::stat(f.path.c_str(), &st) != 0) return false;
  return st.st_dev == f.dev && st.st_ino == f.ino;
}

void DiskTier::Impl::HandleLostFile(uint32_t file_id) {
  std::vector<ChunkKey> dropped;
  {
    absl::MutexLock il(&index_mu_);
    {
      absl::MutexLock l(&mu_);
      if (files_.erase(file_id) == 0) return;  // already handled
      alloc_.RemoveFile(file_id);
      ++extra_.files_lost;
      for (auto it = map_.begin(); it != map_.end();) {
        auto cur = it++;
        if (cur->second.idx.file_id != file_id) continue;
        dropped.push_back(cur->first);
        ++counters_.integrity_errors;
        DetachLocked(cur,
                     RemoveReason::kErased);  // extent belonged to the lost file: nothing to free
      }
    }
    if (absl::Status s = index_->Delete(dropped, /*sync=*/true); !s.ok()) {
      spdlog::error("disk tier: cannot drop index entries of lost file {}: {}", file_id,
                    s.ToString());
    }
  }
  spdlog::warn("disk tier: record file {} was removed behind the tier's back; dropped {} chunks",
               file_id, dropped.size());
}

void DiskTier::Impl::RepairTruncatedFile(const std::shared_ptr<RecordFile>& f) {
  struct stat st;
  if (::fstat(f->fd, &st) != 0 || static_cast<uint64_t>(st.st_size) >= f->size) return;
  spdlog::warn(
      "disk tier: record file {} truncated to {} bytes behind the tier's back (expected {})",
      f->path, st.st_size, f->size);
  if (absl::Status s = fs_->Allocate(Ref(*f), f->size); !s.ok()) {
    spdlog::warn("disk tier: cannot re-extend {}: {}", f->path, s.ToString());
  }
}

DiskTier::Impl::~Impl() {
  StopCommitter();
  if (index_) {
    if (absl::Status s = FlushAccessTimes(); !s.ok()) {
      spdlog::warn("disk tier: last-access flush on close failed: {}", s.ToString());
    }
  }
}

absl::Status DiskTier::Impl::Init() {
  {
    CachePolicyOptions policy_options = options_.cache_policy;
    if (policy_options.clock == nullptr) policy_options.clock = options_.clock;
    auto policy = options_.cache_policy_factory
                      ? options_.cache_policy_factory(options_.capacity_bytes)
                      : MakeCachePolicy(policy_options, options_.capacity_bytes);
    if (!policy.ok()) return policy.status();
    if (*policy == nullptr) {
      return absl::InvalidArgumentError("DiskTier: cache_policy_factory returned no policy");
    }
    absl::MutexLock l(&mu_);
    policy_ = std::move(*policy);
  }
  std::error_code ec;
  fs::create_directories(fs::path(options_.dir) / "records", ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot create ", options_.dir, "/records: ", ec.message()));
  }
  auto index = internal::DiskIndex::Open((fs::path(options_.dir) / "index").string(),
                                         options_.index_reserve_bytes);
  if (!index.ok()) return index.status();
  index_ = std::move(*index);
  direct_io_.store(options_.direct_io);

  auto ring = AcquireRing();
  if (!ring.ok()) return ring.status();
  backend_ = (*ring)->backend();
  if (!options_.force_pread && backend_ == internal::IoBackend::kPread) {
    spdlog::warn("disk tier: io_uring refused ({}); falling back to pread/pwrite",
                 (*ring)->uring_refusal().ToString());
  }

  // Record files, in id order; files beyond capacity_bytes are removed (their entries
  // are dropped below as "file missing").
  std::vector<std::pair<uint32_t, std::string>> found;
  for (const auto& de : fs::directory_iterator(fs::path(options_.dir) / "records", ec)) {
    uint32_t id;
    if (de.is_regular_file() && ParseRecordName(de.path().filename().string(), &id)) {
      found.emplace_back(id, de.path().string());
    }
  }
  std::sort(found.begin(), found.end());
  absl::MutexLock il(&index_mu_);
  absl::MutexLock l(&mu_);
  uint64_t total = 0;
  std::map<uint32_t, uint64_t> torn_end;  // file id -> bytes present before the torn tail
  for (const auto& [id, path] : found) {
    next_file_id_ = std::max(next_file_id_, id + 1);
    auto f = OpenFile(id, path, /*create=*/false);
    if (!f.ok()) return f.status();
    const uint64_t size = (*f)->size;
    const uint64_t rounded = RoundUpToIoAlign(size);
    if (size == 0 || total + rounded > options_.capacity_bytes) {
      spdlog::warn("disk tier: removing record file {} ({} bytes; capacity {} bytes)", path, size,
                   options_.capacity_bytes);
      ::unlink(path.c_str());
      continue;
    }
    if (rounded != size) {
      // A torn tail: the file ends inside a block. Records wholly before the cut are
      // intact and stay (each is still verified below and on every Get); only entries
      // reaching past the cut are dropped. The file is re-extended to a whole block so
      // its free space is usable again.
      spdlog::warn(
          "disk tier: record file {} ends mid-block at {} bytes (torn tail); keeping "
          "the records before it",
          path, size);
      if (absl::Status s = fs_->Allocate(Ref(**f), rounded); !s.ok()) return s;
      (*f)->size = rounded;
      torn_end[id] = size;
    }
    total += rounded;
    alloc_.AddFile(id, size);
    files_[id] = std::move(*f);
  }

  // Index entries: keep those whose record is where the index says.
  std::vector<std::string> drop_raw;
  std::vector<std::pair<ChunkKey, Entry>> kept;
  auto hdr_buf = internal::AllocateAligned(4096);
  // The callback runs inside Scan, on this thread, while `il` and `l` are held.
  absl::Status scan = index_->Scan(
      "", [&](std::string_view raw, absl::StatusOr<ChunkKey> key,
              absl::StatusOr<IndexEntry> e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(index_mu_, mu_) {
        auto drop = [&](std::string_view why) {
          spdlog::warn("disk tier: dropping index entry {}: {}",
                       key.ok() ? key->ToHex() : std::string("<undecodable>"), why);
          drop_raw.emplace_back(raw);
          return true;
        };
        if (!key.ok() || !e.ok()) return drop("undecodable");
        auto fit = files_.find(e->file_id);
        const uint64_t padded = RoundUpToIoAlign(e->record_bytes);
        if (fit == files_.end()) return drop("record file missing");
        if (e->offset % 4096 != 0 || e->record_bytes < kChunkHeaderBytes ||
            e->offset + padded > fit->second->size) {
          return drop("extent outside its record file");
        }
        if (auto torn = torn_end.find(e->file_id);
            torn != torn_end.end() && e->offset + e->record_bytes > torn->second) {
          return drop("record reaches past the torn end of its file");
        }
        if (options_.verify_headers_on_open) {
          absl::Status rs = fs_->Read(**ring, Ref(*fit->second), e->offset, kChunkHeaderBytes,
                                      std::span<std::byte>(hdr_buf.get(), 4096), nullptr);
          if (!rs.ok()) return drop(rs.ToString());
          auto h = DecodeChunkHeader(std::span<const std::byte>(hdr_buf.get(), kChunkHeaderBytes));
          if (!h.ok()) return drop(h.status().ToString());
          if (h->key != *key || h->ns != e->ns || h->record_bytes() != e->record_bytes ||
              h->payload_checksum != e->payload_checksum) {
            return drop("record header does not match the index");
          }
        }
        if (!alloc_.Claim(Extent{e->file_id, e->offset, padded})) {
          return drop("extent overlaps another record");
        }
        Entry en;
        en.idx = *e;
        en.padded = padded;
        kept.emplace_back(*key, en);
        return true;
      });
  ReleaseRing(std::move(*ring));
  if (!scan.ok()) return scan;
  // Synced: the drops are durable before the freed extents can be reused.
  if (absl::Status s = index_->DeleteRaw(drop_raw, /*sync=*/true); !s.ok()) return s;
  extra_.dropped_on_open = drop_raw.size();
  counters_.integrity_errors += drop_raw.size();

  // The policy learns of the records oldest access first (with "lru": the oldest is the
  // first victim).
  std::stable_sort(kept.begin(), kept.end(), [](const auto& a, const auto& b) {
    return a.second.idx.last_access_ms < b.second.idx.last_access_ms;
  });
  for (auto& [key, en] : kept) {
    policy_->OnInsert(CacheEntryInfo{
        .key = key, .parent = en.idx.parent, .ns = en.idx.ns, .record_bytes = en.idx.record_bytes});
    en.gen = next_gen_++;
    used_bytes_ += en.padded;
    map_.emplace(key, en);
  }
  counters_.capacity_bytes = options_.capacity_bytes;
  spdlog::info("disk tier: opened {} ({} chunks, {} / {} bytes, {} files, backend {}{})",
               options_.dir, map_.size(), used_bytes_, options_.capacity_bytes, files_.size(),
               internal::IoBackendName(backend_), direct_io_.load() ? ", O_DIRECT" : ", buffered");
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DiskTier>> DiskTier::Open(const DiskTierOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  auto impl = std::make_unique<Impl>(options);
  if (absl::Status s = impl->Init(); !s.ok()) return s;
  impl->StartCommitter();
  return std::unique_ptr<DiskTier>(new DiskTier(std::move(impl)));
}

}  // namespace kvt
