// ShmProgress: the control block of a progressive shared-memory transfer between a kvtier
// client and kvtierd (docs/daemon.md, "Progressive transfers").
//
// Without it a shm Put or Get moves a record twice in series (caller's buffer -> region
// -> daemon memory, or back), so it cannot beat half a memcpy. With it the writer of the
// region (the client on a Put, the daemon on a Get) publishes how far it has written,
// piece by piece, and the reader copies each piece out as soon as it is published: the
// two copies run at once, on two cores.
//
// Layout (64 bytes at a 64-byte aligned offset of the region, outside the data it
// describes; little-endian, this host's):
//   [0, 8)    ready    uint64  region offset up to which the data bytes are written; only
//                              grows during a transfer; kShmReadyAbandoned = writer gave up
//   [8, 12)   seq      uint32  futex word: incremented after every change of `ready`
//   [12, 16)  waiters  uint32  non-zero while a reader sleeps on `seq`
//   [16, 64)  reserved
// `ready` is written with release and read with acquire ordering, so bytes below it are
// visible to the reader once it sees the value. The block is in memory both processes
// can write: the reader treats every value as untrusted (WaitBeyond checks it against
// what it expects), and a reader's checks (the daemon verifies every record it stores)
// never depend on the writer behaving.
#ifndef KVSTORE_SHM_PROGRESS_H_
#define KVSTORE_SHM_PROGRESS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kvstore/clock.h"

namespace kvt {

inline constexpr uint64_t kShmProgressBlockBytes = 64;
inline constexpr uint64_t kShmReadyAbandoned = ~uint64_t{0};
// Bytes copied between two publishes: small enough that the reader starts soon after
// the writer (the pipeline fills in one piece), large enough that publishing costs
// nothing measurable. 256 KiB was the best of 256 KiB / 1 MiB / 4 MiB for two concurrent
// 32 MiB copies on the 2-core VM of docs/performance.md.
inline constexpr size_t kShmPieceBytes = 256 << 10;

// A view of one control block; does not own it. Thread-safe (atomic operations only).
class ShmProgress {
 public:
  // `block`: kShmProgressBlockBytes bytes, 64-byte aligned, inside a mapped region.
  explicit ShmProgress(std::byte* block);

  // Before a transfer, by the side that owns the block (the client): ready = `ready`.
  void Reset(uint64_t ready);
  // Writer: every data byte below region offset `ready` is written. Wakes a sleeping
  // reader.
  void Publish(uint64_t ready);
  // Writer: the transfer will not complete (the reader's WaitBeyond returns Aborted).
  void Abandon();
  uint64_t ready() const;
  // Whether a reader has announced it sleeps waiting for `ready` to move (the `waiters`
  // word): after the writer's Reset, the reader has seen the current `ready` and wants
  // more. Tests use it to act only once the reader has read a value.
  bool reader_waiting() const;

  // Reader: waits until `ready` is above `have` and returns it (at most `limit`).
  // Spins briefly (the writer is usually one piece ahead), then sleeps on the futex.
  // Errors: DeadlineExceeded when `ready` has not moved for `stall` of `clock`'s time;
  // Aborted when the writer abandoned; InvalidArgument when `ready` is below `have` or
  // above `limit` (a writer that does not follow the protocol).
  absl::StatusOr<uint64_t> WaitBeyond(uint64_t have, uint64_t limit, absl::Duration stall,
                                      const Clock& clock = *SystemClock()) const;

 private:
  std::atomic_ref<uint64_t> ready_;
  std::atomic_ref<uint32_t> seq_;
  std::atomic_ref<uint32_t> waiters_;
  uint32_t* seq_word_;
};

// memcpy with non-temporal (streaming) stores for the aligned bulk, then a store fence:
// the destination is not read into the cache first (no read-for-ownership), so a copy
// of a large record moves 2 bytes of memory traffic per byte instead of 3, which is what
// lets two copies at once (a progressive transfer's writer and reader) run near the
// speed of one. glibc's memcpy does this by itself only for single calls above a
// cache-sized threshold; the pieces here are smaller. After it returns, the bytes are
// visible to a reader that then sees a release store (the fence orders them). x86-64:
// SSE2 streaming stores (baseline ISA); elsewhere memcpy.
void CopyStreaming(std::byte* dst, const std::byte* src, size_t n);

// Writer: copies `src` to `dst` (the region's bytes at region offset `region_offset`) in
// kShmPieceBytes pieces (CopyStreaming), publishing region_offset + copied after each.
void CopyPublishing(std::span<const std::byte> src, std::byte* dst, uint64_t region_offset,
                    ShmProgress& progress);

// Reader: copies the region's bytes [region_offset, region_offset + dst.size()) from
// `src` (their address) into `dst` as they are published (CopyStreaming). `limit`: the largest
// value `ready` may take in this transfer (the end of the slice). Errors: those of WaitBeyond; on
// an error `dst` holds a partial copy the caller must not use.
absl::Status CopyAsPublished(const std::byte* src, uint64_t region_offset, std::span<std::byte> dst,
                             const ShmProgress& progress, uint64_t limit, absl::Duration stall,
                             const Clock& clock = *SystemClock());

}  // namespace kvt

#endif  // KVSTORE_SHM_PROGRESS_H_
