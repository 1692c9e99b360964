// A fault-injecting wrapper around the disk tier's record-file layer
// (libkvstore/src/disk_file_system.h), in the style of RocksDB's FaultInjectionTestFS:
// it forwards every call to the layer it wraps (normally the real one) and, where a
// rule matches, injects instead:
//   - an errno (EIO, ENOSPC, ... through internal::ErrnoToStatus, as the real layer would);
//   - a short read: only the first N bytes arrive, then OutOfRange, as at end of file;
//   - a torn write: only the first N bytes (any offset, not just block boundaries) reach
//     the file, the rest of the extent keeps what it held; the call then returns the
//     rule's errno, or OK (a device that lied: only checksums can tell);
//   - slow I/O: a delay before the call.
// Thread-safe.
#ifndef KVT_TESTS_KVSTORE_FAULT_INJECTION_FS_H_
#define KVT_TESTS_KVSTORE_FAULT_INJECTION_FS_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "disk_file_system.h"

namespace kvt::testing {

enum class FsOp : uint8_t { kAllocate = 0, kWrite = 1, kSync = 2, kRead = 3 };
inline constexpr int kNumFsOps = 4;

struct FaultRule {
  FsOp op = FsOp::kWrite;
  std::optional<uint32_t> file_id;  // only calls on this record file; nullopt = any
  uint32_t skip = 0;                // let this many matching calls through first
  int32_t times = -1;               // fire this many times; -1 = until removed
  int error = 0;                    // errno to fail with (0: none)
  // kRead: deliver only this many bytes of the read (< len), then OutOfRange.
  std::optional<uint64_t> short_read_bytes;
  // kWrite: only this many bytes of the record reach the file; then `error` (or OK).
  std::optional<uint64_t> torn_write_bytes;
  std::chrono::milliseconds delay{0};  // slow I/O: sleep before the call
};

class FaultInjectionFs final : public DiskFileSystem {
 public:
  explicit FaultInjectionFs(std::shared_ptr<DiskFileSystem> base = RealDiskFileSystem())
      : base_(std::move(base)) {}

  // Adds a rule; the first matching rule (in insertion order) with firings left applies.
  void AddRule(const FaultRule& rule);
  void ClearRules();
  // Calls of `op` seen, and how many a rule changed.
  uint64_t calls(FsOp op) const;
  uint64_t injected(FsOp op) const;

  absl::Status Allocate(const DiskFileRef& f, uint64_t size) override;
  absl::Status Write(internal::IoRing& ring, const DiskFileRef& f, uint64_t offset,
                     std::span<const std::byte> src) override;
  absl::Status Sync(const DiskFileRef& f) override;
  absl::Status Read(internal::IoRing& ring, const DiskFileRef& f, uint64_t offset, uint64_t len,
                    std::span<std::byte> dst, const internal::InOrderCallback& in_order) override;

 private:
  struct Rule {
    FaultRule spec;
    uint32_t seen = 0;
    uint32_t fired = 0;
  };
  // Counts the call and returns the rule that fires for it, if any (copied).
  std::optional<FaultRule> Match(FsOp op, uint32_t file_id) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status TornWrite(internal::IoRing& ring, const DiskFileRef& f, uint64_t offset,
                         std::span<const std::byte> src, uint64_t keep);

  const std::shared_ptr<DiskFileSystem> base_;
  mutable absl::Mutex mu_;
  std::vector<Rule> rules_ ABSL_GUARDED_BY(mu_);
  uint64_t calls_[kNumFsOps] ABSL_GUARDED_BY(mu_) = {};
  uint64_t injected_[kNumFsOps] ABSL_GUARDED_BY(mu_) = {};
};

}  // namespace kvt::testing

#endif  // KVT_TESTS_KVSTORE_FAULT_INJECTION_FS_H_
