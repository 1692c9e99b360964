// Private to libkvstore: the disk tier's record files and their I/O (docs/disk-tier.md).
//
// The preallocated files `<dir>/records/rec-<id>.dat`, opened with O_DIRECT where the
// filesystem allows it, and a pool of io_uring instances (one per concurrent caller) that
// every record write, fdatasync and read goes through (via DiskFileSystem, so tests can
// inject faults). It knows files and bytes only: which records live where is the
// DiskEntryTable's, their index the DiskIndex's.
#ifndef KVSTORE_SRC_DISK_RECORD_FILES_H_
#define KVSTORE_SRC_DISK_RECORD_FILES_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "disk_file_system.h"
#include "disk_tier_index.h"
#include "kvstore/disk_tier.h"
#include "uring_file.h"

namespace kvt::internal {

// One preallocated record file. Shared by readers so its fd outlives a concurrent
// removal (closed when the last holder lets go).
struct RecordFile {
  uint32_t id = 0;
  std::string path;
  int fd = -1;
  uint64_t size = 0;
  // Found with a torn tail at Open: the bytes before it (records reaching past it are
  // not kept). Else == size.
  uint64_t intact_end = 0;
  dev_t dev = 0;
  ino_t ino = 0;
  ~RecordFile();
};

// Thread-safe. Locks: files_mu_ and ring_mu_ are leaves (no I/O runs under them).
class DiskRecordFiles {
 public:
  // Keeps dir, file_bytes, index_reserve_bytes, direct_io, queue_depth, io_bytes,
  // force_pread and file_system of `options`.
  explicit DiskRecordFiles(const DiskTierOptions& options);

  // Creates <dir>/records and picks the I/O engine: io_uring unless refused (then
  // pread/pwrite, logged) or force_pread.
  absl::Status Open();

  // The record files already in <dir>/records, in id order, kept up to capacity_bytes:
  // a file that is empty or would pass it is removed (its index entries then find no
  // file). A file that ends mid-block (a torn tail) is re-extended to a whole block and
  // its intact_end set. Returns the kept files (also in this set) and the first id
  // above every file found.
  struct Existing {
    std::vector<std::shared_ptr<RecordFile>> files;
    uint32_t next_id = 0;
  };
  absl::StatusOr<Existing> OpenExisting(uint64_t capacity_bytes) ABSL_LOCKS_EXCLUDED(files_mu_);
  // OK when index entry `e` of `key` may be kept at Open: its file is in the set, its
  // extent lies inside the file and before a torn tail, and (verify_header) the record's
  // header there matches the entry. Else the reason.
  absl::Status CheckIndexed(const ChunkKey& key, const IndexEntry& e, bool verify_header)
      ABSL_LOCKS_EXCLUDED(files_mu_);

  // Creates record file `id` of `size` bytes (open + fallocate + directory fsync); not
  // yet in the set. ResourceExhausted for ENOSPC, or when it would eat into the index's
  // reserve of free space.
  absl::StatusOr<std::shared_ptr<RecordFile>> Create(uint32_t id, uint64_t size);
  void Add(std::shared_ptr<RecordFile> file) ABSL_LOCKS_EXCLUDED(files_mu_);
  // The file with `id`, or null.
  std::shared_ptr<RecordFile> Find(uint32_t id) const ABSL_LOCKS_EXCLUDED(files_mu_);
  // Drops the file from the set; false when it was not there.
  bool Remove(uint32_t id) ABSL_LOCKS_EXCLUDED(files_mu_);
  size_t count() const ABSL_LOCKS_EXCLUDED(files_mu_);

  // True while the file at f.path is still the inode that was opened.
  static bool StillOnDisk(const RecordFile& f);
  // Re-extends a file found truncated behind the tier's back (the records in the lost
  // range fail their own reads).
  void RepairTruncated(const RecordFile& f);

  // Writes `record` at `offset` (zero-padded to a multiple of 4096). *bounced: bytes
  // copied through bounce buffers (record not 4096-aligned).
  absl::Status Write(const RecordFile& f, uint64_t offset, std::span<const std::byte> record,
                     uint64_t* bounced);
  absl::Status Sync(const RecordFile& f);
  // Reads e.record_bytes at e.offset into out (in_order sees the bytes as they arrive).
  // *bounced as Write's, set on errors too.
  absl::Status Read(const IndexEntry& e, const RecordFile& f, std::span<std::byte> out,
                    const InOrderCallback& in_order, uint64_t* bounced);
  // Read, verifying the record's header (key, namespace, length, payload checksum)
  // against the index entry and hashing the payload as it arrives (no second pass).
  // DataLoss when it does not match; OutOfRange when the file ends inside it.
  absl::Status ReadVerified(const ChunkKey& key, const IndexEntry& e, const RecordFile& f,
                            std::span<std::byte> out, uint64_t* bounced);

  IoBackend backend() const { return backend_; }
  bool direct_io() const { return direct_io_.load(); }

 private:
  class RingLease;
  absl::StatusOr<std::unique_ptr<IoRing>> AcquireRing() ABSL_LOCKS_EXCLUDED(ring_mu_);
  void ReleaseRing(std::unique_ptr<IoRing> ring) ABSL_LOCKS_EXCLUDED(ring_mu_);
  absl::StatusOr<std::shared_ptr<RecordFile>> OpenFile(uint32_t id, const std::string& path,
                                                       bool create);
  static DiskFileRef Ref(const RecordFile& f) { return DiskFileRef{f.fd, f.id, f.path}; }

  const std::string dir_;
  const uint64_t index_reserve_bytes_;
  const IoRingOptions ring_options_;
  const bool force_pread_;
  // options.file_system, else the real layer.
  const std::shared_ptr<DiskFileSystem> fs_;
  // Set by Open (before any other call).
  IoBackend backend_ = IoBackend::kIoUring;
  bool opened_ = false;
  std::atomic<bool> direct_io_;

  mutable absl::Mutex files_mu_;
  std::map<uint32_t, std::shared_ptr<RecordFile>> files_ ABSL_GUARDED_BY(files_mu_);

  absl::Mutex ring_mu_;
  std::vector<std::unique_ptr<IoRing>> rings_ ABSL_GUARDED_BY(ring_mu_);
};

}  // namespace kvt::internal

#endif  // KVSTORE_SRC_DISK_RECORD_FILES_H_
