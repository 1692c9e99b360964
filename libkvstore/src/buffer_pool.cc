// BufferPool: the store's record buffers, reused by size (buffer_pool.h).
#include "buffer_pool.h"

#include <cstddef>
#include <utility>

namespace kvt::internal {

RecordBuffer BufferPool::Take(uint64_t bytes) {
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = buffers_.size(); i-- > 0;) {
      if (buffers_[i].size == bytes) {
        RecordBuffer b = std::move(buffers_[i]);
        buffers_.erase(buffers_.begin() + static_cast<std::ptrdiff_t>(i));
        bytes_ -= bytes;
        return b;
      }
    }
  }
  return RecordBuffer::Make(bytes);
}

void BufferPool::Recycle(RecordBuffer buffer) {
  if (buffer.empty()) return;
  absl::MutexLock lock(&mu_);
  if (bytes_ + buffer.size > max_bytes_) return;  // freed on return
  bytes_ += buffer.size;
  buffers_.push_back(std::move(buffer));
}

namespace {

// A lent buffer: back to its pool when the view is released.
struct Lent {
  std::shared_ptr<BufferPool> pool;
  RecordBuffer buffer;
  static void Release(void* /*owner*/, void* token) {
    std::unique_ptr<Lent> self(static_cast<Lent*>(token));
    self->pool->Recycle(std::move(self->buffer));
  }
};

}  // namespace

RecordView BufferPool::Lend(RecordBuffer buffer, uint64_t bytes) {
  auto lent = std::make_unique<Lent>(Lent{shared_from_this(), std::move(buffer)});
  const std::span<const std::byte> view = lent->buffer.span().first(bytes);
  return RecordView(view, &Lent::Release, nullptr, lent.release());
}

uint64_t BufferPool::pooled_bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

size_t BufferPool::pooled_buffers() const {
  absl::MutexLock lock(&mu_);
  return buffers_.size();
}

}  // namespace kvt::internal
