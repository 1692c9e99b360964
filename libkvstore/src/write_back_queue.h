// Private to libkvstore: WriteBackQueue, the store's one write-back thread and what it
// writes into the tiers (TieredStore's write-throughs, demotions and async writes); the
// writes wait in its PendingWrites. Async writes take their buffers from the store's
// BufferPool.
#ifndef KVSTORE_SRC_WRITE_BACK_QUEUE_H_
#define KVSTORE_SRC_WRITE_BACK_QUEUE_H_

#include <cstdlib>
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "buffer_pool.h"
#include "kvstore/clock.h"
#include "kvstore/health_registry.h"
#include "kvstore/record_buffer.h"
#include "kvstore/supervised_thread.h"
#include "kvstore/tier.h"
#include "kvstore/tiered_store.h"
#include "pending_writes.h"

namespace kvt::internal {

struct WriteBackOptions {
  // TieredStoreOptions::max_pending_write_bytes.
  uint64_t max_pending_write_bytes = 0;
  // The store's record buffers (async writes take theirs here). REQUIRES: not null.
  std::shared_ptr<BufferPool> pool;
  // The last tier a submitted write (and every Put) is written through to (0 = tier 0
  // only).
  size_t submit_last_tier = 0;
  // Run on the thread every `period` of `clock` (the store reaps expired leases there).
  Clock::Duration period = std::chrono::milliseconds(100);
  std::function<void()> on_period;
  // TieredStoreOptions::clock and health (null = SystemClock(), HealthRegistry::Default()).
  std::shared_ptr<Clock> clock;
  std::shared_ptr<HealthRegistry> health;
};

// Thread-safe. One background thread ("write-back") performs, in FIFO order, the
// pending writes (PendingWrites) into the tiers: write-throughs, demotions and async
// writes. A pending record is found by Find/Stat until it has landed. If the thread dies
// (an exception escaped a tier), healthy() turns false, async writes are written on the
// caller's thread, others are dropped (counted).
//
// Locks: none of its own; its PendingWrites' lock, then the buffer pool's (a leaf). No
// tier is called with that lock held; Demote asks a local next tier (an in-memory Stat)
// with no lock of the store held (no tier calls a higher one).
class WriteBackQueue {
 public:
  // REQUIRES: `tiers` and `caps` (same length, >= 1) outlive the queue.
  WriteBackQueue(std::span<const std::unique_ptr<Tier>> tiers, std::span<const TierCaps> caps,
                 WriteBackOptions options);
  ~WriteBackQueue();  // Stop()

  // Starts the thread.
  void Start();
  // Drains the queue and joins the thread; later pushes are dropped (counted).
  void Stop();

  // Queues a write of `key` into tiers [first, last]: with `record` = its bytes (copied),
  // or empty = read back from tier 0 when written. Blocks while more than
  // max_pending_write_bytes are pending.
  void Enqueue(std::span<const std::byte> record, uint64_t record_bytes, const ChunkKey& key,
               size_t first, size_t last);
  // The PutContext of the store's Puts into tier `t`: keep_victims where its victims
  // may be missing below (tier 0; a tier whose next tier the write-through skips).
  PutContext ContextFor(size_t t, AdmitReason reason) const;
  // Demotes the victims a Put into tier `t` returned: queues each (its own buffer, no
  // copy) for tier t + 1 unless that tier (local) holds it already, or the bound would
  // be passed (dropped, counted); a victim of tier 0 whose write-through is still queued
  // is carried by it. Never blocks. Called after the Put, with no tier lock held.
  void Demote(size_t t, std::vector<Victim> victims);

  // TieredStore::Write with request.async (REQUIRES: exactly one of record and fill):
  // admits the key and bytes without blocking (AlreadyExists: a write of the key is
  // queued or in flight; Unavailable: over the byte limit), fills or copies a pooled
  // buffer on the caller's thread and queues it for tier 0 and the write-through range
  // (finished: the header encoded, on the thread). Written on the caller's thread when
  // the thread has died.
  absl::StatusOr<ChunkKey> WriteAsync(WriteRequest request);
  // PendingWrites::Find: a queued record of `key` copied into `out` (or `*alloc`).
  absl::StatusOr<uint64_t> Find(const ChunkKey& key, std::span<std::byte> out,
                                std::vector<std::byte>* alloc, size_t* target) {
    return pending_.Find(key, out, alloc, target);
  }
  // PendingWrites::Stat: where, how large and in which namespace queued records are.
  void Stat(std::span<const ChunkKey> keys, std::vector<int>& where, std::vector<uint64_t>& bytes,
            std::vector<NamespaceId>& ns) {
    pending_.Stat(keys, where, bytes, ns);
  }
  // Drops queued writes of `key` (submitted ones get done(Cancelled)) and waits for one
  // in flight to finish.
  void Cancel(const ChunkKey& key) { pending_.Cancel(key); }
  // Blocks until the queue is empty and nothing is in flight (or the thread died).
  void Flush() { pending_.Flush(); }

  bool healthy() const { return pending_.healthy(); }
  // The write-back fields of TieredStoreStats (PendingWrites::FillStats).
  void FillStats(TieredStoreStats& s) const { pending_.FillStats(s); }

 private:
  using WritePtr = PendingWrites::WritePtr;

  // The submitted write's Puts: tier 0 (or tier 1 when tier 0 refuses it), then the
  // write-through range, straight from its buffer. Returns the outcome for done.
  absl::Status WriteSubmitted(PendingWrite& write, uint64_t* ok, uint64_t* failed);
  void WorkerLoop(Clock::TimePoint first_reap);
  void WriteOne(const WritePtr& write);
  void MarkDead();
  absl::StatusOr<std::span<const std::byte>> ReadBackFromTierZero(const ChunkKey& key);
  void LogTierError(size_t t, const char* op, const absl::Status& s) const;

  const std::span<const std::unique_ptr<Tier>> tiers_;
  const std::span<const TierCaps> caps_;
  const WriteBackOptions options_;
  PendingWrites pending_;

  // Worker-thread only.
  struct FreeDeleter {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, FreeDeleter> scratch_;
  uint64_t scratch_bytes_ = 0;

  SupervisedThread worker_;  // "write-back"
};

}  // namespace kvt::internal

#endif  // KVSTORE_SRC_WRITE_BACK_QUEUE_H_
