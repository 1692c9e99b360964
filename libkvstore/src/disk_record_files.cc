// The disk tier's record files and their I/O (disk_record_files.h, docs/disk-tier.md).
#include "disk_record_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kvstore/chunk_codec.h"
#include "spdlog/spdlog.h"

namespace kvt::internal {

namespace fs = std::filesystem;

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

// ---------------------------------------------------------------- ring pool

class DiskRecordFiles::RingLease {
 public:
  RingLease(DiskRecordFiles* files, std::unique_ptr<IoRing> ring)
      : files_(files), ring_(std::move(ring)) {}
  ~RingLease() { files_->ReleaseRing(std::move(ring_)); }
  IoRing& ring() { return *ring_; }

 private:
  DiskRecordFiles* files_;
  std::unique_ptr<IoRing> ring_;
};

DiskRecordFiles::DiskRecordFiles(const DiskTierOptions& options)
    : dir_(options.dir),
      index_reserve_bytes_(options.index_reserve_bytes),
      ring_options_{.queue_depth = options.queue_depth, .io_bytes = options.io_bytes},
      force_pread_(options.force_pread),
      fs_(options.file_system ? options.file_system : RealDiskFileSystem()),
      direct_io_(options.direct_io) {}

absl::StatusOr<std::unique_ptr<IoRing>> DiskRecordFiles::AcquireRing() {
  {
    absl::MutexLock l(&ring_mu_);
    if (!rings_.empty()) {
      auto r = std::move(rings_.back());
      rings_.pop_back();
      return r;
    }
  }
  IoRingOptions ro = ring_options_;
  ro.force_pread = force_pread_ || (opened_ && backend_ == IoBackend::kPread);
  return IoRing::Create(ro);
}

void DiskRecordFiles::ReleaseRing(std::unique_ptr<IoRing> ring) {
  if (!ring) return;
  absl::MutexLock l(&ring_mu_);
  rings_.push_back(std::move(ring));
}

absl::Status DiskRecordFiles::Open() {
  std::error_code ec;
  fs::create_directories(fs::path(dir_) / "records", ec);
  if (ec)
    return absl::InternalError(absl::StrCat("cannot create ", dir_, "/records: ", ec.message()));
  auto ring = AcquireRing();
  if (!ring.ok()) return ring.status();
  backend_ = (*ring)->backend();
  if (!force_pread_ && backend_ == IoBackend::kPread) {
    spdlog::warn("disk tier: io_uring refused ({}); falling back to pread/pwrite",
                 (*ring)->uring_refusal().ToString());
  }
  ReleaseRing(std::move(*ring));
  opened_ = true;
  return absl::OkStatus();
}

// ---------------------------------------------------------------- files

absl::StatusOr<std::shared_ptr<RecordFile>> DiskRecordFiles::OpenFile(uint32_t id,
                                                                      const std::string& path,
                                                                      bool create) {
  int flags = O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0);
  int fd = -1;
  if (direct_io_.load()) {
    fd = ::open(path.c_str(), flags | O_DIRECT, 0644);
    if (fd < 0 && errno == EINVAL) {
      spdlog::warn("disk tier: {} refuses O_DIRECT; using buffered I/O (+fdatasync)", dir_);
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
  f->intact_end = f->size;
  f->dev = st.st_dev;
  f->ino = st.st_ino;
  return f;
}

absl::StatusOr<std::shared_ptr<RecordFile>> DiskRecordFiles::Create(uint32_t id, uint64_t size) {
  const std::string path = RecordPath(dir_, id);
  if (index_reserve_bytes_ > 0) {
    // Record files never take the index's reserve (see DiskIndex): treated as ENOSPC.
    auto free_bytes = FreeBytes(dir_);
    if (free_bytes.ok() && *free_bytes < size + index_reserve_bytes_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("record file ", path, " of ", size, " bytes not created: ", *free_bytes,
                       " bytes free, and the index keeps a reserve of ", index_reserve_bytes_));
    }
  }
  auto f = OpenFile(id, path, /*create=*/true);
  if (!f.ok()) return f.status();
  if (absl::Status s = fs_->Allocate(Ref(**f), size); !s.ok()) {
    ::unlink(path.c_str());
    return s;
  }
  (*f)->size = size;
  (*f)->intact_end = size;
  SyncDir((fs::path(dir_) / "records").string());
  return f;
}

absl::StatusOr<DiskRecordFiles::Existing> DiskRecordFiles::OpenExisting(uint64_t capacity_bytes) {
  std::error_code ec;
  std::vector<std::pair<uint32_t, std::string>> found;
  for (const auto& de : fs::directory_iterator(fs::path(dir_) / "records", ec)) {
    uint32_t id;
    if (de.is_regular_file() && ParseRecordName(de.path().filename().string(), &id)) {
      found.emplace_back(id, de.path().string());
    }
  }
  std::sort(found.begin(), found.end());
  Existing kept;
  uint64_t total = 0;
  for (const auto& [id, path] : found) {
    kept.next_id = std::max(kept.next_id, id + 1);
    auto f = OpenFile(id, path, /*create=*/false);
    if (!f.ok()) return f.status();
    const uint64_t size = (*f)->size;
    const uint64_t rounded = RoundUpToIoAlign(size);
    if (size == 0 || total + rounded > capacity_bytes) {
      spdlog::warn("disk tier: removing record file {} ({} bytes; capacity {} bytes)", path, size,
                   capacity_bytes);
      ::unlink(path.c_str());
      continue;
    }
    if (rounded != size) {
      // A torn tail: the file ends inside a block. Records wholly before the cut are
      // intact and stay (each is still verified at Open and on every Get); only entries
      // reaching past the cut are dropped. The file is re-extended to a whole block so
      // its free space is usable again.
      spdlog::warn(
          "disk tier: record file {} ends mid-block at {} bytes (torn tail); keeping "
          "the records before it",
          path, size);
      if (absl::Status s = fs_->Allocate(Ref(**f), rounded); !s.ok()) return s;
      (*f)->size = rounded;
      (*f)->intact_end = size;
    }
    total += rounded;
    kept.files.push_back(*f);
  }
  absl::MutexLock l(&files_mu_);
  for (const auto& f : kept.files) files_[f->id] = f;
  return kept;
}

absl::Status DiskRecordFiles::CheckIndexed(const ChunkKey& key, const IndexEntry& e,
                                           bool verify_header) {
  std::shared_ptr<RecordFile> f = Find(e.file_id);
  if (f == nullptr) return absl::NotFoundError("record file missing");
  const uint64_t padded = RoundUpToIoAlign(e.record_bytes);
  if (e.offset % 4096 != 0 || e.record_bytes < kChunkHeaderBytes || e.offset + padded > f->size) {
    return absl::OutOfRangeError("extent outside its record file");
  }
  if (e.offset + e.record_bytes > f->intact_end) {
    return absl::DataLossError("record reaches past the torn end of its file");
  }
  if (!verify_header) return absl::OkStatus();
  auto ring = AcquireRing();
  if (!ring.ok()) return ring.status();
  RingLease lease(this, std::move(*ring));
  AlignedBuffer buf = AllocateAligned(4096);
  if (absl::Status rs = fs_->Read(lease.ring(), Ref(*f), e.offset, kChunkHeaderBytes,
                                  std::span<std::byte>(buf.get(), 4096), nullptr);
      !rs.ok()) {
    return rs;
  }
  auto h = DecodeChunkHeader(std::span<const std::byte>(buf.get(), kChunkHeaderBytes));
  if (!h.ok()) return h.status();
  if (h->key != key || h->ns != e.ns || h->record_bytes() != e.record_bytes ||
      h->payload_checksum != e.payload_checksum) {
    return absl::DataLossError("record header does not match the index");
  }
  return absl::OkStatus();
}

void DiskRecordFiles::Add(std::shared_ptr<RecordFile> file) {
  absl::MutexLock l(&files_mu_);
  const uint32_t id = file->id;
  files_[id] = std::move(file);
}

std::shared_ptr<RecordFile> DiskRecordFiles::Find(uint32_t id) const {
  absl::MutexLock l(&files_mu_);
  auto it = files_.find(id);
  return it == files_.end() ? nullptr : it->second;
}

bool DiskRecordFiles::Remove(uint32_t id) {
  absl::MutexLock l(&files_mu_);
  return files_.erase(id) > 0;
}

size_t DiskRecordFiles::count() const {
  absl::MutexLock l(&files_mu_);
  return files_.size();
}

bool DiskRecordFiles::StillOnDisk(const RecordFile& f) {
  struct stat st;
  if (::stat(f.path.c_str(), &st) != 0) return false;
  return st.st_dev == f.dev && st.st_ino == f.ino;
}

void DiskRecordFiles::RepairTruncated(const RecordFile& f) {
  struct stat st;
  if (::fstat(f.fd, &st) != 0 || static_cast<uint64_t>(st.st_size) >= f.size) return;
  spdlog::warn(
      "disk tier: record file {} truncated to {} bytes behind the tier's back (expected {})",
      f.path, st.st_size, f.size);
  if (absl::Status s = fs_->Allocate(Ref(f), f.size); !s.ok()) {
    spdlog::warn("disk tier: cannot re-extend {}: {}", f.path, s.ToString());
  }
}

// ---------------------------------------------------------------- I/O

absl::Status DiskRecordFiles::Write(const RecordFile& f, uint64_t offset,
                                    std::span<const std::byte> record, uint64_t* bounced) {
  *bounced = 0;
  auto ring = AcquireRing();
  if (!ring.ok()) return ring.status();
  RingLease lease(this, std::move(*ring));
  const uint64_t b0 = lease.ring().bounce_bytes();
  absl::Status s = fs_->Write(lease.ring(), Ref(f), offset, record);
  *bounced = lease.ring().bounce_bytes() - b0;
  return s;
}

absl::Status DiskRecordFiles::Sync(const RecordFile& f) { return fs_->Sync(Ref(f)); }

absl::Status DiskRecordFiles::Read(const IndexEntry& e, const RecordFile& f,
                                   std::span<std::byte> out, const InOrderCallback& in_order,
                                   uint64_t* bounced) {
  *bounced = 0;
  auto ring = AcquireRing();
  if (!ring.ok()) return ring.status();
  RingLease lease(this, std::move(*ring));
  const uint64_t b0 = lease.ring().bounce_bytes();
  absl::Status s = fs_->Read(lease.ring(), Ref(f), e.offset, e.record_bytes, out, in_order);
  *bounced = lease.ring().bounce_bytes() - b0;
  return s;
}

absl::Status DiskRecordFiles::ReadVerified(const ChunkKey& key, const IndexEntry& e,
                                           const RecordFile& f, std::span<std::byte> out,
                                           uint64_t* bounced) {
  // The payload's one hash (ChunkChecksum's fastest kernel), computed as the pieces
  // arrive, while later pieces are still in flight: verifying costs no second pass.
  ChunkChecksummer sum;
  uint64_t seen = 0;
  auto hash = [&](std::span<const std::byte> b) {
    const uint64_t skip =
        seen < kChunkHeaderBytes ? std::min<uint64_t>(kChunkHeaderBytes - seen, b.size()) : 0;
    if (b.size() > skip) sum.Update(b.subspan(skip));
    seen += b.size();
  };
  absl::Status s = Read(e, f, out, hash, bounced);
  if (!s.ok()) return s;
  auto h = DecodeChunkHeader(out.first(e.record_bytes));
  if (!h.ok()) return absl::DataLossError(absl::StrCat("header: ", h.status().message()));
  if (h->key != key || h->ns != e.ns || h->record_bytes() != e.record_bytes ||
      h->payload_checksum != e.payload_checksum) {
    return absl::DataLossError("record header does not match the index entry");
  }
  const uint64_t digest = sum.Digest();
  if (digest != e.payload_checksum) {
    return absl::DataLossError(
        absl::StrCat("payload checksum ", digest, " != ", e.payload_checksum));
  }
  return absl::OkStatus();
}

}  // namespace kvt::internal
