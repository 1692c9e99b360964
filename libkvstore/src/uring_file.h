// Private to libkvstore: pipelined, aligned block I/O on one file descriptor, with
// io_uring when the kernel allows it and pread/pwrite otherwise.
//
// A transfer of `len` bytes at a 4096-aligned file offset is split into pieces of
// `io_bytes` (default 1 MiB) and up to `queue_depth` pieces are in flight at once.
// On disk the transfer covers RoundUp(len, 4096) bytes; the padding written after
// `len` is zeros. The memory side may have any alignment: pieces whose memory is
// 4096-aligned and wholly inside the caller's span go straight to the kernel, the
// rest pass through `queue_depth` aligned bounce buffers (copies overlap the I/O of
// other pieces). This is what O_DIRECT requires (alignment of offset, length and
// buffer address to the logical block size; 4096 covers every device we target).
//
// Every -errno (io_uring completions and syscalls alike) becomes an absl::Status in
// exactly one place: ErrnoToStatus() below.
#ifndef KVSTORE_SRC_URING_FILE_H_
#define KVSTORE_SRC_URING_FILE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct io_uring;

namespace kvt::internal {

inline constexpr uint64_t kIoAlign = 4096;
inline constexpr uint64_t RoundUpToIoAlign(uint64_t n) {
  return (n + kIoAlign - 1) & ~(kIoAlign - 1);
}

// The one place -errno becomes a Status: ENOSPC/EDQUOT → ResourceExhausted,
// ENOENT → NotFound, EAGAIN/EINTR/EBUSY → Unavailable, EIO → DataLoss,
// EINVAL/EBADF/EFAULT → Internal (a kvtier bug), others → Unknown.
// `err` may be given positive (errno) or negative (io_uring res).
absl::Status ErrnoToStatus(int err, std::string_view context);

enum class IoBackend : uint8_t { kIoUring = 0, kPread = 1 };
std::string_view IoBackendName(IoBackend backend);

// Free with std::free. Size rounded up to kIoAlign; 4096-aligned.
struct AlignedFree {
  void operator()(std::byte* p) const;
};
using AlignedBuffer = std::unique_ptr<std::byte[], AlignedFree>;
AlignedBuffer AllocateAligned(size_t bytes);

struct IoRingOptions {
  uint32_t queue_depth = 8;        // pieces in flight; REQUIRES 1..256
  uint64_t io_bytes = 1ull << 20;  // piece size; REQUIRES multiple of 4096, > 0
  bool force_pread = false;        // never try io_uring
};

// Called in file order for each completed range of a read (after any bounce copy),
// covering [0, len) exactly once in total. Used to hash while the rest is in flight.
using InOrderCallback = std::function<void(std::span<const std::byte> bytes)>;

// Not thread-safe: one thread uses an IoRing at a time (DiskTier keeps a pool).
class IoRing {
 public:
  // Creates a ring (or, when io_uring_queue_init is refused or force_pread is set, a
  // pread/pwrite engine; backend() says which). Never fails for a refused io_uring;
  // InvalidArgument for bad options.
  static absl::StatusOr<std::unique_ptr<IoRing>> Create(const IoRingOptions& options);
  ~IoRing();
  IoRing(const IoRing&) = delete;
  IoRing& operator=(const IoRing&) = delete;

  IoBackend backend() const { return ring_ ? IoBackend::kIoUring : IoBackend::kPread; }
  // When backend() is kPread because io_uring was refused: the refusal (else OK).
  const absl::Status& uring_refusal() const { return refusal_; }

  // Writes src to fd at `offset`, zero-padding to RoundUpToIoAlign(src.size()).
  // REQUIRES: offset % 4096 == 0. Short writes are resumed; errors via ErrnoToStatus.
  absl::Status WriteAt(int fd, uint64_t offset, std::span<const std::byte> src);
  // Reads `len` bytes from fd at `offset` into dst[0, len). REQUIRES offset % 4096 == 0,
  // dst.size() >= len. OutOfRange when the file ends before offset + RoundUp(len)
  // (a short read: the file was truncated); other errors via ErrnoToStatus.
  // `in_order`, when set, sees the bytes in order as they arrive. On error dst's
  // contents are unspecified.
  absl::Status ReadAt(int fd, uint64_t offset, uint64_t len, std::span<std::byte> dst,
                      const InOrderCallback& in_order = nullptr);

  // Bytes copied through the bounce buffers (memory side not 4096-aligned, or a partial
  // last piece) since creation: the CPU copies a transfer cost beyond the I/O itself.
  uint64_t bounce_bytes() const { return bounce_bytes_; }

 private:
  struct Piece;
  explicit IoRing(const IoRingOptions& options);
  absl::Status Run(int fd, uint64_t offset, uint64_t len, bool write, const std::byte* wsrc,
                   std::byte* rdst, uint64_t dst_size, const InOrderCallback& in_order);

  IoRingOptions options_;
  std::unique_ptr<io_uring> ring_;  // null = pread backend
  absl::Status refusal_;
  std::vector<AlignedBuffer> bounce_;
  uint64_t bounce_bytes_ = 0;
};

}  // namespace kvt::internal

#endif  // KVSTORE_SRC_URING_FILE_H_
