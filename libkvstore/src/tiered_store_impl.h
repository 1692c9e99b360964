// Private to libkvstore: TieredStore's implementation class, a facade over its named
// parts: the tiers, the write-back queue (write_back_queue.h: queue, admission by bytes,
// supervised thread), the buffer pool (buffer_pool.h) and the lease book (lease_book.h). Shared by
// tiered_store.cc (Write, Get, Lookup) and tiered_store_admin.cc (List, Evict, stats).
#ifndef KVSTORE_SRC_TIERED_STORE_IMPL_H_
#define KVSTORE_SRC_TIERED_STORE_IMPL_H_

#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "buffer_pool.h"
#include "kvstore/tiered_store.h"
#include "lease_book.h"
#include "store_placement.h"
#include "write_back_queue.h"

namespace kvt {

// Lock order: no tier calls the store (a tier's Put returns its victims, and the store
// demotes them after the call), so no tier lock is ever held when the queue's is taken.
// No tier is ever called with the queue's or the lease book's lock held. stats_mu_ is a
// leaf.
class TieredStore::Impl {
 public:
  explicit Impl(const TieredStoreOptions& options) : options_(options) {}
  ~Impl();

  // Builds the tiers, then starts the write-back thread.
  absl::Status Init(std::vector<TierFactory> factories);

  // --- tiered_store.cc ---
  absl::StatusOr<ChunkKey> Write(WriteRequest request);
  absl::StatusOr<uint64_t> Get(const ChunkKey& key, std::span<std::byte> out, GetInfo* info,
                               const GetOptions& options);
  absl::StatusOr<RecordView> View(const ChunkKey& key, GetInfo* info);
  LookupResult Lookup(std::span<const ChunkKey> keys, const LookupOptions& options);
  absl::Status Erase(const ChunkKey& key);

  // --- tiered_store_admin.cc ---
  absl::StatusOr<StoreListPage> List(const StoreListOptions& options);
  absl::StatusOr<EvictResult> Evict(const EvictSelector& selector, const EvictOptions& options);
  TieredStoreStats stats() const;

  internal::WriteBackQueue& queue() { return *queue_; }
  std::vector<TierCaps> tiers() const;

 private:
  // The sync writes: a ready record (Put) or one `fill` writes where tier 0 lends room
  // (PutInPlace).
  absl::Status Put(std::span<const std::byte> record, PutAck ack);
  absl::StatusOr<ChunkKey> PutInPlace(uint64_t record_bytes, const RecordFill& fill, PutAck ack);
  // Promotes a hit from tier t > 0 into tier 0 (unless peeking) and counts it.
  void AfterHit(size_t t, std::span<const std::byte> record, GetInfo* info,
                const GetOptions& options);
  // Counts a hit in tier t (promoted: copied into tier 0) and fills *info.
  void CountHit(size_t t, bool promoted, GetInfo* info, const GetOptions& options);
  // View's hit below tier 0: reads the record of `key` (record_bytes long) from tier t
  // once, into tier 0's memory (kept there: the promotion) or into a pooled buffer when
  // tier 0 has no room, and lends it. Aborted when its size changed (retry); tier t's
  // errors as they are.
  absl::StatusOr<RecordView> ReadBelow(size_t t, const ChunkKey& key, uint64_t record_bytes,
                                       GetInfo* info);
  // Tier t's Put with the store's context (ContextFor); demotes the victims it returns.
  absl::Status PutInto(size_t t, std::span<const std::byte> record, AdmitReason reason);
  // The durable tier's Put of a kDurable write; on failure erases tier 0's copy (when
  // `in_top`) and returns the error named by the tier.
  absl::Status PutDurable(size_t durable, const ChunkKey& key, std::span<const std::byte> record,
                          bool in_top);
  absl::Status Miss(const ChunkKey& key, const GetOptions& options);
  // Counts a Get served from the write-back queue.
  void QueueHit(size_t target, GetInfo* info, const GetOptions& options);
  void LogTierError(size_t t, const char* op, const absl::Status& s) const;

  std::vector<std::unique_ptr<Tier>> tiers_;
  std::vector<TierCaps> caps_;     // captured at Init (capacity of a remote tier may drift)
  internal::Placement placement_;  // from caps_ and options_.placement, at Init
  const TieredStoreOptions options_;

  // Record buffers: async writes' (the queue's) and View's when tier 0 has no room.
  const std::shared_ptr<internal::BufferPool> pool_ =
      std::make_shared<internal::BufferPool>(options_.buffer_pool_bytes);
  // Built in Init once the tiers are (it writes into them); stopped first in ~Impl.
  std::unique_ptr<internal::WriteBackQueue> queue_;
  // The one lease book (Lookup's pins); leases hold a weak_ptr to it.
  const std::shared_ptr<internal::LeaseBook> leases_ =
      std::make_shared<internal::LeaseBook>(options_.lease_timeout, options_.clock);

  mutable absl::Mutex stats_mu_;
  uint64_t hits_ ABSL_GUARDED_BY(stats_mu_) = 0;
  uint64_t misses_ ABSL_GUARDED_BY(stats_mu_) = 0;
  uint64_t promotions_ ABSL_GUARDED_BY(stats_mu_) = 0;
  uint64_t queue_hits_ ABSL_GUARDED_BY(stats_mu_) = 0;
  uint64_t explicit_evictions_ ABSL_GUARDED_BY(stats_mu_) = 0;
};

}  // namespace kvt

#endif  // KVSTORE_SRC_TIERED_STORE_IMPL_H_
