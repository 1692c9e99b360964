// Private to libkvstore: BufferPool, the store's pool of record buffers (RecordBuffer:
// uninitialised, 2 MiB-aligned from 2 MiB up). The write-back queue takes one per
// async write and returns it when the write lands; TieredStore::View reads a record
// into one when tier 0 has no room and lends it as a RecordView. A buffer taken from
// the pool is faulted in already, so a hot path that reuses it pays no page faults.
#ifndef KVSTORE_SRC_BUFFER_POOL_H_
#define KVSTORE_SRC_BUFFER_POOL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "kvstore/record_buffer.h"
#include "kvstore/tier.h"

namespace kvt::internal {

// Thread-safe. mu_ is a leaf lock: nothing is called with it held.
class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  // Keeps at most `max_bytes` of returned buffers (TieredStoreOptions::buffer_pool_bytes);
  // 0 keeps none.
  explicit BufferPool(uint64_t max_bytes) : max_bytes_(max_bytes) {}

  // A pooled buffer of exactly `bytes` (the most recently returned one), or a new one.
  // Throws std::bad_alloc when a new one cannot be allocated (RecordBuffer::Make).
  RecordBuffer Take(uint64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  // Keeps `buffer` for a later Take, or frees it when the pool would pass max_bytes.
  void Recycle(RecordBuffer buffer) ABSL_LOCKS_EXCLUDED(mu_);
  // Lends buffer[0, bytes) as a RecordView; the buffer returns to this pool when the
  // view is released (the view keeps the pool alive). REQUIRES: bytes <= buffer.size;
  // the pool is owned by a shared_ptr.
  RecordView Lend(RecordBuffer buffer, uint64_t bytes);

  uint64_t pooled_bytes() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t pooled_buffers() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const uint64_t max_bytes_;
  mutable absl::Mutex mu_;
  std::vector<RecordBuffer> buffers_ ABSL_GUARDED_BY(mu_);
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kvt::internal

#endif  // KVSTORE_SRC_BUFFER_POOL_H_
