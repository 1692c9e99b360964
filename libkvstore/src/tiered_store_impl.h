// Private to libkvstore: TieredStore's implementation class, shared by
// tiered_store.cc (Put, Get, Lookup, leases), tiered_store_writeback.cc (the write-back
// queue and its thread) and tiered_store_admin.cc (List, Evict, stats).
#ifndef KVSTORE_SRC_TIERED_STORE_IMPL_H_
#define KVSTORE_SRC_TIERED_STORE_IMPL_H_

#include <cstdlib>
#include <deque>
#include <functional>
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
#include "lease_book.h"

namespace kvt {

// Lock order: a tier's own lock (if a tier holds it while it calls the eviction
// listener; the host tier does not) may be followed by queue_mu_. No tier is ever called with
// queue_mu_ or the lease book's lock held, except the in-memory Stat of a local next tier from
// OnEvicted (see there).
class TieredStore::Impl {
 public:
  explicit Impl(const TieredStoreOptions& options) : options_(options) {}
  ~Impl();

  // Builds the tiers (each but the last with the eviction listener), then starts the
  // write-back thread.
  absl::Status Init(std::vector<TierFactory> factories);

  // --- tiered_store.cc ---
  absl::Status Put(std::span<const std::byte> record, const PutOptions& options);
  absl::StatusOr<ChunkKey> PutInPlace(uint64_t record_bytes, const RecordFill& fill,
                                      const PutOptions& options);
  absl::StatusOr<uint64_t> Get(const ChunkKey& key, std::span<std::byte> out, GetInfo* info,
                               const GetOptions& options);
  absl::StatusOr<RecordView> View(const ChunkKey& key, GetInfo* info);
  absl::StatusOr<std::vector<std::byte>> GetAlloc(const ChunkKey& key, GetInfo* info,
                                                  const GetOptions& options);
  LookupResult Lookup(std::span<const ChunkKey> keys, const LookupOptions& options);
  uint64_t pinned_bytes() { return leases_->pinned_bytes(); }
  uint64_t expired_leases() const { return leases_->expired(); }
  absl::Status Erase(const ChunkKey& key);

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
  // Drops queued write-backs of `key` (submitted ones get done(Cancelled)) and waits
  // for one in flight to finish.
  void CancelQueued(const ChunkKey& key);
  WriteAdmission AdmitWrite(const ChunkKey& key, uint64_t record_bytes, uint64_t limit_bytes);
  void CancelWrite(const ChunkKey& key, uint64_t record_bytes);
  RecordBuffer TakeBuffer(uint64_t bytes);
  void SubmitWrite(SubmittedWrite write);

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
    RecordBuffer record;
    uint64_t record_bytes = 0;  // counted in pending_bytes_
    ChunkKey key;
    size_t first_tier = 0;  // inclusive range of target tiers
    size_t last_tier = 0;
    bool demotion = false;  // skip a target that already holds the key
    // A SubmittedWrite (first_tier == 0): finish runs on the thread, done reports.
    bool submitted = false;
    std::function<absl::Status(std::span<std::byte>)> finish;
    std::function<void(const absl::Status&)> done;
    // The header is written (finish ran OK). Written under queue_mu_ by the worker;
    // readers copy the header bytes only when it was set under the lock.
    bool finished = false;
  };
  using ItemPtr = std::shared_ptr<WriteItem>;

  // Tiers a put is written through to (placement policy over capabilities): the
  // inclusive range [first, last]; empty when first > last.
  std::pair<size_t, size_t> WriteThroughRange() const;
  // Index of the first durable tier, or tiers_.size() when there is none.
  size_t FirstDurableTier() const;
  void OnEvicted(size_t t, const ChunkKey& key, std::span<const std::byte> record);
  void Enqueue(std::span<const std::byte> record, uint64_t record_bytes, const ChunkKey& key,
               size_t first, size_t last);
  void PushLocked(RecordBuffer record, uint64_t record_bytes, const ChunkKey& key, size_t first,
                  size_t last, bool demotion) ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_);
  // Copies a queued item's record into `out` (finishing a copy of a submitted record
  // whose finish has not run). REQUIRES: out.size() >= item.record.size.
  static absl::Status CopyQueued(const WriteItem& item, bool finished, std::span<std::byte> out);
  // The submitted write's Puts: tier 0 (or tier 1 when tier 0 refuses it), then the
  // write-through range, straight from its buffer. Returns the outcome for done.
  absl::Status WriteSubmitted(WriteItem& item, uint64_t* ok, uint64_t* failed);
  void RecycleBuffer(RecordBuffer buffer);
  // Undoes an item's share of pending_bytes_/held_bytes_ and write_keys_.
  void ForgetLocked(const WriteItem& item) ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_);
  void WorkerMain();
  void WorkerLoop();
  void WriteOne(const ItemPtr& item);
  void MarkDead();
  absl::StatusOr<std::span<const std::byte>> ReadBackFromTierZero(const ChunkKey& key);
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
  std::deque<ItemPtr> queue_ ABSL_GUARDED_BY(queue_mu_);
  // Keys of submitted writes admitted, queued or in flight (AdmitWrite's duplicates).
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

  // Record buffer pool (a leaf lock: nothing is called with it held).
  absl::Mutex pool_mu_;
  std::vector<RecordBuffer> pool_ ABSL_GUARDED_BY(pool_mu_);
  uint64_t pool_bytes_ ABSL_GUARDED_BY(pool_mu_) = 0;

  // The one lease book (Lookup's pins); leases hold a weak_ptr to it.
  const std::shared_ptr<internal::LeaseBook> leases_ =
      std::make_shared<internal::LeaseBook>(absl::FromChrono(options_.lease_timeout));

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
