// Private to libkvstore: PendingWrites, the store's writes that have not landed in their
// tiers yet (queued, or the one in flight), bounded by their bytes, and found by key
// until they land. It calls no tier: WriteBackQueue's thread takes the writes from here
// and performs them.
#ifndef KVSTORE_SRC_PENDING_WRITES_H_
#define KVSTORE_SRC_PENDING_WRITES_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "buffer_pool.h"
#include "kvstore/clock.h"
#include "kvstore/record_buffer.h"
#include "kvstore/tier.h"
#include "kvstore/tiered_store.h"

namespace kvt::internal {

// One write of a record into the tiers [first_tier, last_tier].
struct PendingWrite {
  // The bytes to write; empty = read the record back from tier 0 at write time.
  RecordBuffer record;
  uint64_t record_bytes = 0;  // counted in the pending bytes
  ChunkKey key;
  size_t first_tier = 0;  // inclusive range of target tiers
  size_t last_tier = 0;
  bool demotion = false;  // skip a target that already holds the key
  // An async write (first_tier == 0): finish runs on the thread, done reports.
  bool submitted = false;
  std::function<absl::Status(std::span<std::byte>)> finish;
  std::function<void(const absl::Status&)> done;
  // The header is written (finish ran OK). Set under the PendingWrites' lock
  // (MarkFinished); readers copy the header bytes only when it was set under the lock.
  bool finished = false;
};

// Thread-safe. Writes are taken in FIFO order by one writer (Next, Written, Landed).
// The bytes of the pending writes (queued and in flight) and of those held in memory
// are counted: Enqueue blocks while the pending bytes would pass
// max_pending_write_bytes, a demotion or an async write past the bound is refused.
//
// Locks: mu_, then the buffer pool's (a leaf) and, in Next, the clock's wait. Nothing
// else is called with mu_ held (done and finish callbacks run without it).
class PendingWrites {
 public:
  using WritePtr = std::shared_ptr<PendingWrite>;

  // max_pending_write_bytes: 0 = unbounded. `pool` (not null) takes back the buffers
  // of landed async writes.
  PendingWrites(uint64_t max_pending_write_bytes, std::shared_ptr<BufferPool> pool);

  // --- producers
  // Queues a write of `key` into tiers [first, last] (`record` empty = read back from
  // tier 0 when written). Blocks while more than max_pending_write_bytes are pending;
  // dropped (counted) once closed.
  void Enqueue(RecordBuffer record, uint64_t record_bytes, const ChunkKey& key, size_t first,
               size_t last) ABSL_LOCKS_EXCLUDED(mu_);
  // A victim of tier `t` is already in tier t + 1: counted, not queued.
  void CountDemotionSkipped() ABSL_LOCKS_EXCLUDED(mu_);
  // Queues victim `v` of tier `t` (its own buffer, no copy) for tier t + 1, without
  // blocking: dropped (counted) past the byte bound or once closed. A victim of tier 0
  // whose write-through still waits to read it back is carried by that write; one whose
  // write-through is in flight goes to every tier that write names.
  void AddDemotion(size_t t, Victim v) ABSL_LOCKS_EXCLUDED(mu_);
  // An async write: reserves `record_bytes` and the key, without blocking, under the
  // smaller of max_pending_write_bytes and `limit_bytes` (0 = none).
  enum class Admission : uint8_t { kAdmitted, kAlreadyQueued, kQueueFull };
  Admission Admit(const ChunkKey& key, uint64_t record_bytes, uint64_t limit_bytes)
      ABSL_LOCKS_EXCLUDED(mu_);
  void CancelAdmission(const ChunkKey& key, uint64_t record_bytes) ABSL_LOCKS_EXCLUDED(mu_);
  // Queues an admitted async write (counted as submitted). Returns it back when closed:
  // the caller writes it, then calls WrittenHere.
  WritePtr Submit(WritePtr write) ABSL_LOCKS_EXCLUDED(mu_);
  // An async write written on the caller's thread (Submit refused it): `s` its outcome,
  // `ok`/`failed` its tier Puts beyond the first. Counted and forgotten.
  void WrittenHere(const PendingWrite& write, const absl::Status& s, uint64_t ok, uint64_t failed)
      ABSL_LOCKS_EXCLUDED(mu_);

  // --- readers
  // Copies a pending record of `key` (one carrying bytes; the newest) into `out`, or
  // into `*alloc` when `out` is empty and alloc != nullptr. NotFound when none is
  // pending; OutOfRange when `out` is too small. Sets *target to its first tier.
  absl::StatusOr<uint64_t> Find(const ChunkKey& key, std::span<std::byte> out,
                                std::vector<std::byte>* alloc, size_t* target)
      ABSL_LOCKS_EXCLUDED(mu_);
  // For each key not yet found (where[i] < 0), whether a pending write carries its
  // bytes; sets where[i] to its first tier, bytes[i] to its size and ns[i] to its
  // header's namespace (left as it is while an async record's header is not encoded).
  void Stat(std::span<const ChunkKey> keys, std::vector<int>& where, std::vector<uint64_t>& bytes,
            std::vector<NamespaceId>& ns) ABSL_LOCKS_EXCLUDED(mu_);
  // Drops the queued writes of `key` (async ones get done(Cancelled)) and waits for one
  // in flight to land.
  void Cancel(const ChunkKey& key) ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks until nothing is pending (or the writer died).
  void Flush() ABSL_LOCKS_EXCLUDED(mu_);
  bool healthy() const ABSL_LOCKS_EXCLUDED(mu_);
  // The write-back fields of TieredStoreStats (demotions_*, writebacks*, writes_*,
  // pending_write_bytes, held_write_bytes); others are left as they are.
  void FillStats(TieredStoreStats& s) const ABSL_LOCKS_EXCLUDED(mu_);

  // --- the writer
  // The oldest queued write, now in flight; nullptr when `deadline` of `clock` passed
  // first, or when stopping and nothing is queued (then *stopped = true).
  WritePtr Next(Clock& clock, Clock::TimePoint deadline, bool* stopped) ABSL_LOCKS_EXCLUDED(mu_);
  // The async write's header is encoded.
  void MarkFinished(PendingWrite& write) ABSL_LOCKS_EXCLUDED(mu_);
  // The write in flight was performed: `ok`/`failed` tier Puts, `gone` = its record had
  // left tier 0, `outcome` an async write's. Returns whether it was cancelled meanwhile.
  bool Written(const PendingWrite& write, const absl::Status& outcome, uint64_t ok, uint64_t failed,
               uint64_t gone) ABSL_LOCKS_EXCLUDED(mu_);
  // After its done ran: the write in flight is no longer pending (its buffer goes back
  // to the pool when `write` holds the last reference).
  void Landed(const WritePtr& write) ABSL_LOCKS_EXCLUDED(mu_);
  // Later writes are dropped (counted); the writer drains the queue, then Next stops it.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);
  // The writer died: unhealthy from now on. Returns the queued async writes (their
  // records exist nowhere else; the caller writes each, then Forget); other writes stay.
  std::vector<WritePtr> MarkDead() ABSL_LOCKS_EXCLUDED(mu_);
  void Forget(const PendingWrite& write) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void PushLocked(RecordBuffer record, uint64_t record_bytes, const ChunkKey& key, size_t first,
                  size_t last, bool demotion) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Undoes a write's share of pending_bytes_/held_bytes_ and write_keys_.
  void ForgetLocked(const PendingWrite& write) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Copies a pending write's record into `out` (finishing a copy of an async record
  // whose finish has not run). REQUIRES: out.size() >= write.record.size.
  static absl::Status CopyRecord(const PendingWrite& write, bool finished,
                                 std::span<std::byte> out);

  const uint64_t max_pending_write_bytes_;
  const std::shared_ptr<BufferPool> pool_;

  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  std::deque<WritePtr> queue_ ABSL_GUARDED_BY(mu_);
  // Keys of async writes admitted, queued or in flight (Admit's duplicates).
  absl::flat_hash_map<ChunkKey, uint32_t> write_keys_ ABSL_GUARDED_BY(mu_);
  uint64_t pending_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // queued + in flight
  // Of those, the bytes held in memory (record buffers of queued writes and admitted
  // ones; a key-only write-through holds none). Bounded by max_pending_write_bytes.
  uint64_t held_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool in_progress_ ABSL_GUARDED_BY(mu_) = false;
  ChunkKey inflight_key_ ABSL_GUARDED_BY(mu_);
  bool inflight_cancelled_ ABSL_GUARDED_BY(mu_) = false;
  // The write in flight (shared with readers; its bytes are read-only while shared,
  // except the header of an async record before `finished`).
  WritePtr inflight_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool healthy_ ABSL_GUARDED_BY(mu_) = true;
  TieredStoreStats counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvt::internal

#endif  // KVSTORE_SRC_PENDING_WRITES_H_
