// Private to libkvstore: WriteBackQueue, the store's one write queue (TieredStore's
// write-throughs, demotions and async writes), with its admission by bytes and its
// supervised thread. Async writes take their buffers from the store's BufferPool.
#ifndef KVSTORE_SRC_WRITE_BACK_QUEUE_H_
#define KVSTORE_SRC_WRITE_BACK_QUEUE_H_

#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "buffer_pool.h"
#include "kvstore/clock.h"
#include "kvstore/health_registry.h"
#include "kvstore/record_buffer.h"
#include "kvstore/supervised_thread.h"
#include "kvstore/tier.h"
#include "kvstore/tiered_store.h"

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

// Thread-safe. One background thread ("write-back") performs, in FIFO order, the queued
// Puts into the tiers. A queued record is found by Find/Stat until it has landed. If the
// thread dies (an exception escaped a tier), healthy() turns false, submitted records
// are written on the caller's thread, others are dropped (counted).
//
// Locks: queue_mu_, then the buffer pool's (a leaf). No tier is called with queue_mu_ held, except
// the in-memory Stat of a local next tier from Demote (lock order tier t -> tier t+1 ->
// queue_mu_: no tier calls a higher one).
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
  // Copies a queued record of `key` (one carrying bytes) into `out`, or into `*alloc`
  // when `out` is empty and alloc != nullptr. NotFound when no such item is queued;
  // OutOfRange when `out` is too small. Sets *target to the tier it is queued for.
  absl::StatusOr<uint64_t> Find(const ChunkKey& key, std::span<std::byte> out,
                                std::vector<std::byte>* alloc, size_t* target);
  // For each key not yet found (where[i] < 0), whether a queued item carries its bytes;
  // sets where[i] to the item's target tier, bytes[i] to its size and ns[i] to its
  // header's namespace (left as it is while a submitted record's header is not encoded).
  void Stat(std::span<const ChunkKey> keys, std::vector<int>& where, std::vector<uint64_t>& bytes,
            std::vector<NamespaceId>& ns);
  // Drops queued writes of `key` (submitted ones get done(Cancelled)) and waits for one
  // in flight to finish.
  void Cancel(const ChunkKey& key);
  // Blocks until the queue is empty and nothing is in flight (or the thread died).
  void Flush();

  bool healthy() const;
  // The write-back fields of TieredStoreStats (demotions_*, writebacks*, writes_*,
  // pending_write_bytes, held_write_bytes); others are left as they are.
  void FillStats(TieredStoreStats& s) const;

 private:
  struct WriteItem {
    // The bytes to write; empty = read the record back from tier 0 at write time.
    RecordBuffer record;
    uint64_t record_bytes = 0;  // counted in pending_bytes_
    ChunkKey key;
    size_t first_tier = 0;  // inclusive range of target tiers
    size_t last_tier = 0;
    bool demotion = false;  // skip a target that already holds the key
    // An async write (first_tier == 0): finish runs on the thread, done reports.
    bool submitted = false;
    std::function<absl::Status(std::span<std::byte>)> finish;
    std::function<void(const absl::Status&)> done;
    // The header is written (finish ran OK). Written under queue_mu_ by the worker;
    // readers copy the header bytes only when it was set under the lock.
    bool finished = false;
  };
  using ItemPtr = std::shared_ptr<WriteItem>;

  enum class Admission : uint8_t { kAdmitted, kAlreadyQueued, kQueueFull };
  // Reserves `record_bytes` of the queue and the key, without blocking.
  Admission Admit(const ChunkKey& key, uint64_t record_bytes, uint64_t limit_bytes);
  void CancelAdmission(const ChunkKey& key, uint64_t record_bytes);
  // Queues an admitted item (or writes it here when the thread is gone).
  void Submit(ItemPtr item);

  void PushLocked(RecordBuffer record, uint64_t record_bytes, const ChunkKey& key, size_t first,
                  size_t last, bool demotion) ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_);
  // Copies a queued item's record into `out` (finishing a copy of a submitted record
  // whose finish has not run). REQUIRES: out.size() >= item.record.size.
  static absl::Status CopyQueued(const WriteItem& item, bool finished, std::span<std::byte> out);
  // The submitted write's Puts: tier 0 (or tier 1 when tier 0 refuses it), then the
  // write-through range, straight from its buffer. Returns the outcome for done.
  absl::Status WriteSubmitted(WriteItem& item, uint64_t* ok, uint64_t* failed);
  // Undoes an item's share of pending_bytes_/held_bytes_ and write_keys_.
  void ForgetLocked(const WriteItem& item) ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_);
  void WorkerLoop(Clock::TimePoint first_reap);
  void WriteOne(const ItemPtr& item);
  void MarkDead();
  absl::StatusOr<std::span<const std::byte>> ReadBackFromTierZero(const ChunkKey& key);
  void LogTierError(size_t t, const char* op, const absl::Status& s) const;

  const std::span<const std::unique_ptr<Tier>> tiers_;
  const std::span<const TierCaps> caps_;
  const WriteBackOptions options_;

  mutable absl::Mutex queue_mu_;
  absl::CondVar queue_cv_;
  std::deque<ItemPtr> queue_ ABSL_GUARDED_BY(queue_mu_);
  // Keys of submitted writes admitted, queued or in flight (Admit's duplicates).
  absl::flat_hash_map<ChunkKey, uint32_t> write_keys_ ABSL_GUARDED_BY(queue_mu_);
  uint64_t pending_bytes_ ABSL_GUARDED_BY(queue_mu_) = 0;  // queued + in flight
  // Of those, the bytes held in memory (record buffers of queued items and admitted
  // writes; a key-only write-through holds none). Bounded by max_pending_write_bytes.
  uint64_t held_bytes_ ABSL_GUARDED_BY(queue_mu_) = 0;
  bool in_progress_ ABSL_GUARDED_BY(queue_mu_) = false;
  ChunkKey inflight_key_ ABSL_GUARDED_BY(queue_mu_);
  bool inflight_cancelled_ ABSL_GUARDED_BY(queue_mu_) = false;
  // The item the worker is writing (shared with readers; its bytes are read-only while
  // shared, except the header of a submitted record before `finished`).
  ItemPtr inflight_item_ ABSL_GUARDED_BY(queue_mu_);
  bool stop_ ABSL_GUARDED_BY(queue_mu_) = false;
  bool healthy_ ABSL_GUARDED_BY(queue_mu_) = true;
  TieredStoreStats counters_ ABSL_GUARDED_BY(queue_mu_);

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
