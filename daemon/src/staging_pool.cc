#include "staging_pool.h"

#include <sys/mman.h>

#include <cstdlib>

namespace kvt::daemon {

void StagingPool::Buffer::reset() {
  if (data_ != nullptr) pool_->Give(std::exchange(data_, nullptr), std::exchange(capacity_, 0));
  pool_ = nullptr;
}

StagingPool::~StagingPool() {
  absl::MutexLock lock(&mu_);
  for (auto& [capacity, data] : free_) std::free(data);
}

StagingPool::Buffer StagingPool::Take(uint64_t bytes) {
  {
    absl::MutexLock lock(&mu_);
    size_t best = free_.size();
    for (size_t i = 0; i < free_.size(); ++i)
      if (free_[i].first >= bytes && (best == free_.size() || free_[i].first < free_[best].first))
        best = i;
    if (best != free_.size()) {
      auto [capacity, data] = free_[best];
      free_.erase(free_.begin() + static_cast<ptrdiff_t>(best));
      cached_bytes_ -= capacity;
      return Buffer(this, data, capacity);
    }
  }
  constexpr uint64_t kHuge = 2 << 20;
  const uint64_t capacity = bytes == 0 ? kHuge : (bytes + kHuge - 1) / kHuge * kHuge;
  void* p = std::aligned_alloc(kHuge, capacity);
  if (p == nullptr) return Buffer();
  (void)madvise(p, capacity, MADV_HUGEPAGE);  // advice only: 4 KiB pages still work
  return Buffer(this, static_cast<std::byte*>(p), capacity);
}

void StagingPool::Give(std::byte* data, uint64_t capacity) {
  {
    absl::MutexLock lock(&mu_);
    if (cached_bytes_ + capacity <= max_cached_bytes_) {
      free_.emplace_back(capacity, data);
      cached_bytes_ += capacity;
      return;
    }
  }
  std::free(data);
}

uint64_t StagingPool::cached_bytes() const {
  absl::MutexLock lock(&mu_);
  return cached_bytes_;
}

}  // namespace kvt::daemon
