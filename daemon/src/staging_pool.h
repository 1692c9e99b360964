// StagingPool: reusable buffers for records the daemon copies in from a client's shared
// memory before checking them (service_stream.cc, shm Put).
//
// Why reuse: a fresh multi-MiB buffer pays a page fault per 4 KiB page on first touch.
// On the 2-core dev VM, allocating and filling a fresh 32 MiB buffer ran at 0.6 GB/s,
// filling a reused one at 21 GB/s: without reuse the fault path, not the copy, bounds a
// shm Put. New buffers are also advised as transparent huge pages (2 MiB faults).
#ifndef KVT_DAEMON_STAGING_POOL_H_
#define KVT_DAEMON_STAGING_POOL_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace kvt::daemon {

// Thread-safe. Buffers are 4096-aligned; a buffer handed back is kept for reuse while the
// pool caches at most `max_cached_bytes` in all, else freed.
class StagingPool {
 public:
  // A buffer taken from the pool; handed back on destruction. Move-only.
  // REQUIRES: does not outlive the pool.
  class Buffer {
   public:
    Buffer() = default;
    Buffer(Buffer&& o) noexcept { *this = std::move(o); }
    Buffer& operator=(Buffer&& o) noexcept {
      if (this != &o) {
        reset();
        pool_ = std::exchange(o.pool_, nullptr);
        data_ = std::exchange(o.data_, nullptr);
        capacity_ = std::exchange(o.capacity_, 0);
      }
      return *this;
    }
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    ~Buffer() { reset(); }

    std::byte* data() const { return data_; }
    uint64_t capacity() const { return capacity_; }
    explicit operator bool() const { return data_ != nullptr; }
    // Hands the buffer back now (idempotent).
    void reset();

   private:
    friend class StagingPool;
    Buffer(StagingPool* pool, std::byte* data, uint64_t capacity)
        : pool_(pool), data_(data), capacity_(capacity) {}
    StagingPool* pool_ = nullptr;
    std::byte* data_ = nullptr;
    uint64_t capacity_ = 0;
  };

  explicit StagingPool(uint64_t max_cached_bytes) : max_cached_bytes_(max_cached_bytes) {}
  ~StagingPool();
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  // A buffer of at least `bytes` (the smallest cached one that fits, else a new one of
  // `bytes` rounded up to 2 MiB); an empty Buffer when memory cannot be allocated.
  Buffer Take(uint64_t bytes);

  uint64_t cached_bytes() const;

 private:
  void Give(std::byte* data, uint64_t capacity);

  const uint64_t max_cached_bytes_;
  mutable absl::Mutex mu_;
  std::vector<std::pair<uint64_t, std::byte*>> free_ ABSL_GUARDED_BY(mu_);  // capacity, data
  uint64_t cached_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kvt::daemon

#endif  // KVT_DAEMON_STAGING_POOL_H_
