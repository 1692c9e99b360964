// Private to libkvstore: TieredStore's implementation class, shared by
// tiered_store.cc (Put, Get, Lookup, leases), tiered_store_writeback.cc (the write-back
// queue and its thread) and tiered_store_admin.cc (List, Evict, stats).
#ifndef KVSTORE_SRC_TIERED_STORE_IMPL_H_
#define KVSTORE_SRC_TIERED_STORE_IMPL_H_

#include <cstdlib>
#include <deque>
#include <memory>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kvstore/tiered_store.h"

namespace kvt {

// Lock order: a tier's own lock (held while it calls the eviction listener) may be
// followed by queue_mu_. No tier is ever called with queue_mu_ or lease_mu_ held,
// except the in-memory Stat of a local next tier from OnEvicted (see there).
class TieredStore::Impl {
 public:
  explicit Impl(const TieredStoreOptions& options) : options_(options) {}
  ~Impl();

  // Builds the tiers (each but the last with the eviction listener), then starts the
  // write-back thread.
  absl::Status Init(std::vector<TierFactory> factories);

  // --- tiered_store.cc ---
  absl::Status Put(std::span<const std::byte> record, const PutOptions& options);
  absl::StatusOr<uint64_t> Get(const ChunkKey& key, std::span<std::byte> out, GetInfo* info,
                               const GetOptions& options);
  absl::StatusOr<std::vector<std::byte>> GetAlloc(const ChunkKey& key, GetInfo* info,
                                                  const GetOptions& options);
  LookupResult Lookup(std::span<const ChunkKey> keys, const LookupOptions& options);
  void ReleaseLease(LeaseId id);
  uint64_t pinned_bytes();
  uint64_t expired_leases() const;
  absl::Status Erase(const ChunkKey& key);
  void ReapExpired();

  // --- tiered_store_writeback.cc ---
  void Flush();
  bool healthy() const;
  // Copies a queued record of `key` (one carrying bytes) into `out`, or into `*alloc`
  // when `out` is empty and alloc != nullptr. NotFound when no such item is queued;
  // OutOfRange when `out` is too small. Sets *target to the tier it is queued for.
  absl::StatusOr<uint64_t> GetFromQueue(const ChunkKey& key, std::span<std::byte> out,
                                        std::vector<std::byte>* alloc, size_t* target);
  // For each key not yet found (where[i] < 0), whether a queued item carries its bytes;
  // sets where[i] to the item's target tier and bytes[i] to its size.
  void StatQueue(std::span<const ChunkKey> keys, std::vector<int>& where,
                 std::vector<uint64_t>& bytes);
  // Drops queued write-backs of `key` and cancels one in flight.
  void CancelQueued(const ChunkKey& key);

  // --- tiered_store_admin.cc ---
  absl::StatusOr<StoreListPage> List(const StoreListOptions& options);
  absl::StatusOr<EvictResult> Evict(const EvictSelector& selector, const EvictOptions& options);
  TieredStoreStats stats() const;

  size_t num_tiers() const { return tiers_.size(); }
  Tier& tier(size_t index) { return *tiers_.at(index); }
  const Tier& tier(size_t index) const { return *tiers_.at(index); }
  const TierCaps& caps(size_t index) const { return caps_.at(index); }

 private:
  struct WriteItem {
    // The bytes to write; empty = read the record back from tier 0 at write time.
    std::vector<std::byte> record;
    uint64_t record_bytes = 0;  // counted in pending_bytes_
    ChunkKey key;
    size_t first_tier = 0;  // inclusive range of target tiers
    size_t last_tier = 0;
    bool demotion = false;  // skip a target that already holds the key
  };
  // A lease's pin on one chunk in one tier. Non-pinnable tiers hold an empty handle.
  struct PinnedChunk {
    int tier = 0;
    ChunkKey key;
    uint64_t bytes = 0;  // record size when pinned
    PinHandle handle;
  };
  struct Lease {
    absl::Time deadline;
    std::vector<PinnedChunk> pins;
  };
  // A chunk pinned by several leases counts once in pinned_bytes().
  struct PinRef {
    uint32_t count = 0;
    uint64_t bytes = 0;
  };

  // Tiers a put is written through to (placement policy over capabilities): the
  // inclusive range [first, last]; empty when first > last.
  std::pair<size_t, size_t> WriteThroughRange() const;
  // Index of the first durable tier, or tiers_.size() when there is none.
  size_t FirstDurableTier() const;
  void OnEvicted(size_t t, const ChunkKey& key, std::span<const std::byte> record);
  void Enqueue(std::span<const std::byte> record, uint64_t record_bytes, const ChunkKey& key,
               size_t first, size_t last);
  void PushLocked(std::span<const std::byte> record, uint64_t record_bytes, const ChunkKey& key,
                  size_t first, size_t last, bool demotion)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_);
  void WorkerMain();
  void WorkerLoop();
  void WriteOne(WriteItem& item);
  void MarkDead();
  absl::StatusOr<std::span<const std::byte>> ReadBackFromTierZero(const ChunkKey& key);
  void DropPinRefsLocked(const Lease& lease) ABSL_EXCLUSIVE_LOCKS_REQUIRED(lease_mu_);
  // Promotes a hit from tier t > 0 into tier 0 (unless peeking) and counts it.
  void AfterHit(size_t t, std::span<const std::byte> record, GetInfo* info,
                const GetOptions& options);
  absl::Status Miss(const ChunkKey& key, const GetOptions& options);
  void LogTierError(size_t t, const char* op, const absl::Status& s) const;

  std::vector<std::unique_ptr<Tier>> tiers_;
  std::vector<TierCaps> caps_;  // captured at Init (capacity of a remote tier may drift)
  const TieredStoreOptions options_;

  mutable absl::Mutex queue_mu_;
  absl::CondVar queue_cv_;
  std::deque<WriteItem> queue_ ABSL_GUARDED_BY(queue_mu_);
  uint64_t pending_bytes_ ABSL_GUARDED_BY(queue_mu_) = 0;  // queued + in flight
  bool in_progress_ ABSL_GUARDED_BY(queue_mu_) = false;
  ChunkKey inflight_key_ ABSL_GUARDED_BY(queue_mu_);
  bool inflight_cancelled_ ABSL_GUARDED_BY(queue_mu_) = false;
  // The item the worker is writing (shared with it; read-only while shared).
  std::shared_ptr<const WriteItem> inflight_item_ ABSL_GUARDED_BY(queue_mu_);
  bool stop_ ABSL_GUARDED_BY(queue_mu_) = false;
  bool healthy_ ABSL_GUARDED_BY(queue_mu_) = true;
  TieredStoreStats counters_ ABSL_GUARDED_BY(queue_mu_);

  mutable absl::Mutex lease_mu_;
  absl::flat_hash_map<uint64_t, Lease> leases_ ABSL_GUARDED_BY(lease_mu_);
  uint64_t next_lease_ ABSL_GUARDED_BY(lease_mu_) = 1;
  absl::flat_hash_map<std::pair<int, ChunkKey>, PinRef> pin_refs_ ABSL_GUARDED_BY(lease_mu_);
  uint64_t pinned_bytes_ ABSL_GUARDED_BY(lease_mu_) = 0;  // distinct (tier, key) bytes
  uint64_t expired_leases_ ABSL_GUARDED_BY(lease_mu_) = 0;

  mutable absl::Mutex stats_mu_;
  uint64_t hits_ ABSL_GUARDED_BY(stats_mu_) = 0;
  uint64_t misses_ ABSL_GUARDED_BY(stats_mu_) = 0;
  uint64_t promotions_ ABSL_GUARDED_BY(stats_mu_) = 0;
  uint64_t queue_hits_ ABSL_GUARDED_BY(stats_mu_) = 0;
  uint64_t explicit_evictions_ ABSL_GUARDED_BY(stats_mu_) = 0;

  // Worker-thread only.
  struct FreeDeleter {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, FreeDeleter> scratch_;
  uint64_t scratch_bytes_ = 0;

  std::thread worker_;  // started last in Init
};

}  // namespace kvt

#endif  // KVSTORE_SRC_TIERED_STORE_IMPL_H_
