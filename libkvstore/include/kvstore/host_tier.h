// HostTier: the host-memory tier. One preallocated arena holds whole chunk records.
//
// Memory: the arena (capacity_bytes) is allocated once in Create. When kvtier is built
// with CUDA (KVT_HAVE_CUDA) and cudaGetDeviceCount reports a GPU, the arena is pinned
// with cudaHostAlloc so copy kernels can DMA from/to it; otherwise it is plain memory
// aligned to 4096 bytes. `pinned_host_memory()` says which one was obtained (also logged).
//
// Allocation policy: best-fit over a free list of extents ordered by (size, offset),
// with coalescing of neighbouring free extents on free. Every record occupies one
// contiguous extent of round_up(record_bytes, alignment) bytes starting at an offset
// that is a multiple of `alignment` (64 by default, so records start on cache lines;
// with a 4096-aligned arena, record starts are 64-byte aligned in virtual memory too).
// A record of kHostIoAlignedRecordBytes or more (a chunk) is placed at a multiple of 4096
// and its extent rounded up to 4096, so a file can be read into it or written from it
// with O_DIRECT and no bounce copy (a disk hit promoted in place, a durable put).
//
// Admission and eviction order: the tier's CachePolicy (kvstore/cache_policy.h, chosen
// by HostTierOptions::cache_policy; "lru" by default). Put asks the policy to admit the
// record first (a declined record is not stored, and Put returns OK). Get and View hits
// and Pin are uses (OnAccess); Get and Pin of an absent key are misses (OnMiss);
// Stat/List/CopyForWriteBack tell the policy nothing. With "lru" a Put or a use makes a
// chunk the most recently used.
// When a Put does not find a free extent large enough, chunks are evicted in the
// policy's victim order, skipping chunks that are pinned or being copied by a
// reader, until the extent fits. Before evicting anything, the tier checks that
// evicting every evictable chunk would produce a large enough contiguous extent; if
// not (record larger than the arena, or pinned/busy chunks fragment the arena) Put
// returns ResourceExhausted and evicts nothing. Because allocation is contiguous, an
// eviction round may evict more than the byte count needed (victim order, not adjacency).
// Records whose TTL ran out (CachePolicy::VisitExpired) are dropped, without demotion, at
// the start of each Put/PutInPlace, unless pinned or being read.
//
// Strict capacity: used_bytes (sum of allocated extents, including records being
// written and records being read after removal) never exceeds capacity_bytes.
//
// Readers never see torn bytes: a record's extent is written once before the record
// becomes visible and is never modified while visible; Get copies outside the lock
// while holding a reader count on the extent, which keeps the extent from being
// evicted or reused; a replaced or erased record's extent is freed by its last reader.
//
// Victims (PutContext::keep_victims) are copied out WITHOUT the tier's lock, before the
// evicted bytes are freed: a reader count keeps the victim's extent alive (and the
// record readable by Get) during the copy, so the copy delays only the Put that evicts,
// never other callers. Should the victim be pinned, replaced or erased during the copy,
// it is not evicted and not returned. The tier calls no one back.
#ifndef KVSTORE_HOST_TIER_H_
#define KVSTORE_HOST_TIER_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kvstore/absence_record.h"
#include "kvstore/cache_policy.h"
#include "kvstore/clock.h"
#include "kvstore/tier.h"
#include "kvstore/types.h"

namespace kvt {

// Records of this many bytes or more are placed at 4096-byte boundaries (file comment).
inline constexpr uint64_t kHostIoAlignedRecordBytes = 1ull << 20;

struct ChunkHeader;  // kvstore/chunk_codec.h
namespace internal {
class ExtentAllocator;
}  // namespace internal

struct HostTierOptions {
  // Arena size in bytes. REQUIRES: alignment <= capacity_bytes <= 4 TiB.
  uint64_t capacity_bytes = 1ull << 30;
  // Extent granularity and record start alignment in bytes.
  // REQUIRES: power of two in [8, 4096].
  uint64_t alignment = 64;
  // Try cudaHostAlloc (page-locked memory) when built with CUDA and a GPU is present.
  // Falls back to aligned plain memory when false or unavailable.
  bool use_pinned_memory = true;
  // Name reported in caps() (metrics, CLI).
  std::string name = "host";
  // Admission and eviction order (kvstore/cache_policy.h); "lru" = recency only.
  CachePolicyOptions cache_policy;
  // When set, builds the policy instead of MakeCachePolicy(cache_policy, capacity_bytes).
  CachePolicyFactory cache_policy_factory;
  // Time of access stamps and of the policy's TTL (when cache_policy.clock is empty);
  // null = SystemClock().
  std::shared_ptr<Clock> clock;
  // Where the tier notes the records it declines, evicts, expires or erases
  // (kvstore/absence_record.h, shared by a store's tiers); null = not noted.
  std::shared_ptr<AbsenceRecord> absence;

  // OK, or InvalidArgument naming the bad field and the expected range.
  absl::Status Validate() const;
};

// Thread-safe. See the file comment for allocation, eviction and lifetime rules.
class HostTier final : public Tier {
 public:
  // Allocates the arena. InvalidArgument for bad options (cache_policy included); ResourceExhausted
  // when the arena cannot be allocated.
  static absl::StatusOr<std::unique_ptr<HostTier>> Create(const HostTierOptions& options);
  // A TieredStore factory: Create(options).
  static TierFactory Factory(HostTierOptions options);
  ~HostTier() override;

  HostTier(const HostTier&) = delete;
  HostTier& operator=(const HostTier&) = delete;

  // Not durable, not remote, not verifying (its bytes never left the process),
  // pinnable, evicts.
  TierCaps caps() const override;

  // Tier contract (tier.h). Put: InvalidArgument when record.size() differs from the
  // header's record length; DataLoss/FailedPrecondition from DecodeChunkHeader;
  // ResourceExhausted when the record can never fit (round_up(size, alignment) >
  // usable capacity) or pinned/busy chunks leave no contiguous room. A replaced record
  // keeps its pin count.
  using Tier::Put;
  absl::StatusOr<PutResult> Put(std::span<const std::byte> record,
                                const PutContext& context) override;
  absl::StatusOr<uint64_t> Get(const ChunkKey& key, std::span<std::byte> out) override;
  absl::StatusOr<uint64_t> CopyForWriteBack(const ChunkKey& key, std::span<std::byte> out) override;
  // Tier contract (tier.h): `fill` writes straight into a reserved extent of the arena
  // (one copy); the reservation counts in used_bytes, evicts like Put's, and is freed
  // when `fill` or the header check fails. ResourceExhausted before `fill` is called
  // exactly when Put would return it for a record of `record_bytes`. The policy is asked
  // to admit the record once its header is known (after `fill`): a declined record is
  // freed (once its view, context.view, is dropped) and its key returned, as Put returns OK.
  using Tier::PutInPlace;
  absl::StatusOr<PutResult> PutInPlace(uint64_t record_bytes, const RecordFill& fill,
                                       const PutContext& context) override;
  // Tier contract (tier.h): the view holds a reader count on the record's extent, as
  // Get does during its copy, so the record is skipped by eviction and its extent is
  // freed by the last of its readers. REQUIRES: every view is released before the tier
  // is destroyed.
  absl::StatusOr<RecordView> View(const ChunkKey& key) override;
  std::vector<ChunkStat> Stat(std::span<const ChunkKey> keys) override;
  absl::Status Erase(const ChunkKey& key) override;
  // Ordered by ChunkKey (operator<=>); next_page_token = ToHex() of the last key of
  // the page. InvalidArgument for page_size outside 1..100000 or a bad token.
  absl::StatusOr<ListPage> List(const ListOptions& options) override;
  TierStats stats() const override;
  PinHandle Pin(const ChunkKey& key) override;

  // True when the arena is page-locked CUDA host memory (cudaHostAlloc).
  bool pinned_host_memory() const { return pinned_host_memory_; }

 private:
  enum class State : uint8_t { kWriting, kLive, kZombie };
  struct Entry {
    ChunkKey key;
    NamespaceId ns;
    ChunkKey parent;
    uint32_t token_count = 0;
    uint64_t offset = 0;
    uint64_t extent_bytes = 0;
    uint64_t record_bytes = 0;
    int64_t last_access_unix_ms = 0;
    uint32_t pins = 0;
    uint32_t readers = 0;
    State state = State::kWriting;
    bool evicting = false;  // a Put is copying it out as a victim (holds one reader count)
  };

  HostTier(const HostTierOptions& options, std::byte* arena, bool pinned,
           std::unique_ptr<CachePolicy> policy);

  bool Evictable(const Entry& e) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return e.state == State::kLive && e.pins == 0 && e.readers == 0;
  }
  // A kWriting entry with an extent of round_up(record_bytes) (evicting as needed), in
  // extents_ and used_bytes_, not yet visible; ResourceExhausted when no room. The
  // records it evicted are appended to `victims` (with their bytes) when it is not null.
  absl::StatusOr<Entry*> Reserve(uint64_t record_bytes, std::vector<Victim>* victims)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Makes a reserved, filled entry live under `header`'s key (replacing an older record).
  // With `view`, returns a view of it (a reader count, no hit counted).
  RecordView Publish(Entry* entry, const ChunkHeader& header, bool view) ABSL_LOCKS_EXCLUDED(mu_);
  // A view of a reserved entry that is not published (the policy declined it): the
  // extent is freed when the view is dropped.
  RecordView ViewUnpublished(Entry* entry) ABSL_LOCKS_EXCLUDED(mu_);
  // Frees a reserved entry that is not published.
  void Abandon(Entry* entry) ABSL_LOCKS_EXCLUDED(mu_);
  // Takes an extent of `bytes` (multiple of alignment) starting at a multiple of `align`
  // from the free list; -1 if none fits.
  int64_t AllocExtent(uint64_t bytes, uint64_t align) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FreeExtent(uint64_t offset, uint64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether evicting every evictable entry would leave a contiguous extent >= bytes
  // starting at a multiple of `align`.
  bool CanFitAfterEviction(uint64_t bytes, uint64_t align) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes a live entry from the index and the policy (OnRemove with `reason`; state
  // becomes kZombie); frees it now when no reader holds it.
  void Unlink(Entry* e, RemoveReason reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the records whose TTL ran out (CachePolicy::VisitExpired), unless pinned or read.
  void DropExpiredLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Asks the policy to admit a record; counts a rejection.
  bool AdmitLocked(const ChunkHeader& header, uint64_t record_bytes, AdmitReason reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees the extent and destroys the entry. REQUIRES: readers == 0.
  void Destroy(Entry* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Evicts a victim. With `victims`, first copies its bytes out with mu_ RELEASED
  // meanwhile (re-acquired before it returns), then unlinks it and appends the copy
  // unless it was pinned, replaced or erased meanwhile.
  void EvictOne(Entry* e, std::vector<Victim>* victims) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A client's use of a live entry: last access time and CachePolicy::OnAccess.
  void Touch(Entry* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Get and CopyForWriteBack: a client read counts hits/misses/bytes_out and touches.
  absl::StatusOr<uint64_t> CopyOut(const ChunkKey& key, std::span<std::byte> out, bool client_read)
      ABSL_LOCKS_EXCLUDED(mu_);
  // RecordView's release: drops the reader count `entry` (an Entry*) holds.
  static void EndView(void* self, void* entry);
  // PinHandle's release: unpin of an absent or unpinned key is a no-op.
  static void Unpin(void* self, const ChunkKey& key);

  const std::string name_;
  const uint64_t capacity_;
  const uint64_t alignment_;
  const uint64_t usable_;  // capacity rounded down to alignment
  std::byte* const arena_;
  const bool pinned_host_memory_;

  mutable absl::Mutex mu_;
  // Every allocated extent (writing, live, zombie) by offset; owns the entries.
  std::map<uint64_t, std::unique_ptr<Entry>> extents_ ABSL_GUARDED_BY(mu_);
  // Visible (live) entries by key.
  std::map<ChunkKey, Entry*> index_ ABSL_GUARDED_BY(mu_);
  // Free space of the arena (best fit). Held by pointer so this public header needs no
  // private header (src/extent_allocator.h).
  const std::unique_ptr<internal::ExtentAllocator> alloc_ ABSL_PT_GUARDED_BY(mu_);
  // Admission and victim order over the live entries' keys.
  const std::unique_ptr<CachePolicy> policy_ ABSL_PT_GUARDED_BY(mu_);
  const std::shared_ptr<Clock> clock_;
  const std::shared_ptr<AbsenceRecord> absence_;  // null = not noted

  uint64_t used_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t pinned_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t misses_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t puts_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t bytes_in_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t bytes_out_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t evictions_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t admission_rejects_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t ttl_expired_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t copy_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // TierStats::copy_bytes
  // Victim copies running (mu_ released); evict_cv_ is signalled as each ends.
  uint32_t evictions_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  absl::CondVar evict_cv_;
};

}  // namespace kvt

#endif  // KVSTORE_HOST_TIER_H_
