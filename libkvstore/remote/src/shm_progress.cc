#include "kvstore/shm_progress.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "absl/strings/str_format.h"

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace kvt {
namespace {

// How long a reader polls `ready` before it sleeps on the futex. A piece copies in about
// 50-100 us; waking a sleeping thread costs tens of microseconds on a VM, every piece, so
// the reader polls for a few pieces' time (its core is idle otherwise: the copies are
// the work) and sleeps only when the writer has really stopped.
constexpr std::chrono::microseconds kSpinFor{1000};

// Shared (not FUTEX_PRIVATE) futex: the word lies in a MAP_SHARED mapping of two processes.
void FutexWait(uint32_t* word, uint32_t expected, std::chrono::microseconds timeout) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000);
  ts.tv_nsec = static_cast<long>((timeout.count() % 1000000) * 1000);
  // EAGAIN (the word changed), EINTR and ETIMEDOUT all send the caller back to its checks.
  (void)syscall(SYS_futex, word, FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void FutexWakeAll(uint32_t* word) {
  (void)syscall(SYS_futex, word, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

}  // namespace

ShmProgress::ShmProgress(std::byte* block)
    : ready_(*reinterpret_cast<uint64_t*>(block)),
      seq_(*reinterpret_cast<uint32_t*>(block + 8)),
      waiters_(*reinterpret_cast<uint32_t*>(block + 12)),
      seq_word_(reinterpret_cast<uint32_t*>(block + 8)) {}

void ShmProgress::Reset(uint64_t ready) {
  waiters_.store(0, std::memory_order_relaxed);
  ready_.store(ready, std::memory_order_release);
}

void ShmProgress::Publish(uint64_t ready) {
  ready_.store(ready, std::memory_order_release);
  // seq_cst with the reader's waiters store then seq load: either the reader sees the
  // new seq (and re-checks ready) or this load sees it waiting (and wakes it).
  seq_.fetch_add(1, std::memory_order_seq_cst);
  if (waiters_.load(std::memory_order_seq_cst) != 0) FutexWakeAll(seq_word_);
}

void ShmProgress::Abandon() { Publish(kShmReadyAbandoned); }

uint64_t ShmProgress::ready() const { return ready_.load(std::memory_order_acquire); }

bool ShmProgress::reader_waiting() const { return waiters_.load(std::memory_order_seq_cst) != 0; }

absl::StatusOr<uint64_t> ShmProgress::WaitBeyond(uint64_t have, uint64_t limit,
                                                 absl::Duration stall, const Clock& clock) const {
  const auto stall_us = std::chrono::microseconds(absl::ToInt64Microseconds(stall));
  const Clock::TimePoint last_move = clock.Now();
  for (;;) {
    const uint64_t r = ready_.load(std::memory_order_acquire);
    if (r == kShmReadyAbandoned)
      return absl::AbortedError("shm: the writer abandoned the transfer");
    if (r > limit)
      return absl::InvalidArgumentError(
          absl::StrFormat("shm: progress word %d beyond the transfer's end %d", r, limit));
    if (r < have)
      return absl::InvalidArgumentError(
          absl::StrFormat("shm: progress word went back from %d to %d", have, r));
    if (r > have) return r;
    const Clock::TimePoint now = clock.Now();
    if (now - last_move < kSpinFor) {  // the writer is mid-piece: keep polling
      std::this_thread::yield();
      continue;
    }
    if (now - last_move >= stall_us)
      return absl::DeadlineExceededError(absl::StrFormat("shm: no progress for %s (at %d of %d)",
                                                         absl::FormatDuration(stall), have, limit));
    const uint32_t seq = seq_.load(std::memory_order_seq_cst);
    waiters_.store(1, std::memory_order_seq_cst);
    if (ready_.load(std::memory_order_seq_cst) == have) {
      const auto left =
          std::chrono::duration_cast<std::chrono::microseconds>(stall_us - (now - last_move));
      FutexWait(seq_word_, seq,
                std::min<std::chrono::microseconds>(left, std::chrono::milliseconds(10)));
    }
    waiters_.store(0, std::memory_order_relaxed);
  }
}

void CopyStreaming(std::byte* dst, const std::byte* src, size_t n) {
#if defined(__x86_64__)
  // Head: plain copy up to the first 64-byte aligned destination address.
  const size_t head =
      std::min(n, static_cast<size_t>((64 - reinterpret_cast<uintptr_t>(dst) % 64) % 64));
  std::memcpy(dst, src, head);
  size_t i = head;
  for (; i + 64 <= n; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
  }
  std::memcpy(dst + i, src + i, n - i);
  _mm_sfence();  // streaming stores are weakly ordered: complete them before any publish
#else
  std::memcpy(dst, src, n);
#endif
}

void CopyPublishing(std::span<const std::byte> src, std::byte* dst, uint64_t region_offset,
                    ShmProgress& progress) {
  for (size_t off = 0; off < src.size(); off += kShmPieceBytes) {
    const size_t n = std::min(kShmPieceBytes, src.size() - off);
    CopyStreaming(dst + off, src.data() + off, n);
    progress.Publish(region_offset + off + n);
  }
}

absl::Status CopyAsPublished(const std::byte* src, uint64_t region_offset, std::span<std::byte> dst,
                             const ShmProgress& progress, uint64_t limit, absl::Duration stall,
                             const Clock& clock) {
  const uint64_t end = region_offset + dst.size();
  uint64_t done = 0;  // bytes of dst copied
  uint64_t seen = 0;  // the last value of `ready` read (0: none yet, below any real one)
  while (done < dst.size()) {
    if (seen > region_offset + done) {
      // The writer may be past this record (a Get stream's later records) or, on a Get
      // stream, have published only earlier records' ends (below region_offset).
      const uint64_t upto = std::min(seen, end) - region_offset;
      CopyStreaming(dst.data() + done, src + done, upto - done);
      done = upto;
      continue;
    }
    auto r = progress.WaitBeyond(seen, limit, stall, clock);
    if (!r.ok()) return r.status();
    seen = *r;
  }
  return absl::OkStatus();
}

}  // namespace kvt
