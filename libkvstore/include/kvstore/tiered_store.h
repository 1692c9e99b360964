// TieredStore: ordered tiers (0 = fastest, e.g. host → disk → remote) composed into
// one cache. Put lands in tier 0 and is written down asynchronously; Get searches
// top-down and promotes hits into tier 0; a tier-0 eviction demotes to the next tier
// when the record is not already there; Lookup answers without moving data and can
// pin what it promises under a lease with a deadline.
#ifndef KVSTORE_TIERED_STORE_H_
#define KVSTORE_TIERED_STORE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvstore/evict_selector.h"
#include "kvstore/lease.h"
#include "kvstore/record_buffer.h"
#include "kvstore/tier.h"
#include "kvstore/types.h"

namespace kvt {

// Position of a tier in a store (0 = fastest). Its own type, so it is never mixed up
// with a count or a key position; kNoTier = "in no tier".
enum class TierIndex : int32_t { kNone = -1 };
inline constexpr TierIndex kNoTier = TierIndex::kNone;
constexpr TierIndex MakeTierIndex(size_t i) { return static_cast<TierIndex>(i); }
constexpr size_t ToSize(TierIndex t) { return static_cast<size_t>(t); }

// A factory for a tier built already (the store asks it for its victims per Put).
TierFactory UseTier(std::unique_ptr<Tier> tier);

// Which lower tiers a Put is written through to, in the background.
enum class WriteThrough : uint8_t {
  kNone = 0,   // none: lower tiers only receive demotions of evicted records
  kLocal = 1,  // every lower tier whose caps().remote is false
  kAll = 2,    // every lower tier
};

// Placement: where records go. Decided by the tiers' capabilities, never their kind.
struct PlacementPolicy {
  WriteThrough write_through = WriteThrough::kAll;
};

struct TieredStoreOptions {
  // How long a Lookup's pins live if no Load releases them.
  std::chrono::milliseconds lease_timeout{10000};
  PlacementPolicy placement;
  // Bytes of write-back queued (write-throughs, demotions and submitted writes, each
  // record counted once) before Put blocks and AdmitWrite refuses (back-pressure). Demotions
  // are dropped (counted) rather than queued past it, so the queue's memory stays within
  // this bound. 0 = unlimited.
  uint64_t max_pending_write_bytes = 1ull << 30;
  // Record buffers kept after their write for reuse by later writes (TakeBuffer), so a
  // caller's copy-out writes into memory that is already faulted in. 0 = no pool.
  uint64_t buffer_pool_bytes = 256ull << 20;

  absl::Status Validate() const;
};

// How far down a Put must be before it is acknowledged.
enum class PutAck : uint8_t {
  kTopTier = 0,  // tier 0 holds it; lower tiers are written in the background
  kDurable = 1,  // also the first durable tier (caps().durable) holds it; that tier's
                 // errors (ResourceExhausted for a full disk, I/O errors) are returned
};

struct PutOptions {
  PutAck ack = PutAck::kTopTier;
};

// Answer of AdmitWrite.
enum class WriteAdmission : uint8_t {
  kAdmitted,       // go ahead: fill a buffer, then SubmitWrite (or CancelWrite)
  kAlreadyQueued,  // a write of this key is admitted or queued already; skip it
  kQueueFull,      // over the byte limit: drop it (never block the caller)
};

// A record handed to the store without a copy (TieredStore::SubmitWrite).
struct SubmittedWrite {
  ChunkKey key;
  // The whole record buffer: payload already at [kChunkHeaderBytes, size).
  RecordBuffer record;
  // Run once on the write-back thread before the Put: writes the header into
  // record[0, kChunkHeaderBytes) over the payload (e.g. EncodeChunk, which hashes it).
  // May run a second time over a copy when a Get finds the record still queued, so it
  // must depend only on its captures and the payload. Empty = the header is written.
  std::function<absl::Status(std::span<std::byte> record)> finish;
  // Called once on the write-back thread with the outcome: OK (tier 0, or the first tier
  // that took it, holds it), finish's or the tier's error, or Cancelled (erased, or the
  // store was destroyed first). Never called with a store lock held. May be empty.
  std::function<void(const absl::Status&)> done;
};

struct LookupOptions {
  // false: answer the leading run (stop at the first key no tier holds).
  // true: answer every key (tier_index kNoTier for a miss) and its record bytes.
  bool per_key = false;
  // Pin the leading hits under a lease (see Lookup).
  bool pin = false;
};

struct LookupResult {
  // Number of leading keys present in some tier.
  size_t num_leading_hits = 0;
  // Per key answered (the leading hits; with per_key every key): the fastest tier
  // holding it (kNoTier: none), that tier's kind, and the record bytes (0 for a miss).
  std::vector<TierIndex> tier_index;
  std::vector<TierKind> tier_kind;
  std::vector<uint64_t> record_bytes;
  // The pins on the leading hits, when pinning was requested and something was pinned
  // (kvstore/lease.h); an empty Lease otherwise. Dropping it releases them. Move-only.
  Lease lease;
};

struct GetOptions {
  // An inspection (the CLI): no promotion, not counted as a hit or a miss.
  bool peek = false;
};

struct GetInfo {
  TierIndex tier_index = kNoTier;        // where the record was found
  TierKind tier_kind = TierKind::kHost;  // its kind (valid when tier_index != kNoTier)
  bool promoted = false;
  bool from_queue = false;  // served from the write-back queue (tier_index = its target)
};

// Store-wide listing: each chunk once, with the fastest tier holding it.
struct StoreListOptions {
  std::optional<NamespaceId> ns;  // only this namespace when set
  // Tenancy: chunks whose namespace this rejects are skipped (null = all).
  std::function<bool(const NamespaceId&)> visible;
  // List only the tiers up to and including this one (e.g. the local tiers at start-up,
  // not a cluster-wide tier whose listing scans every shard); unset = every tier.
  std::optional<TierIndex> through_tier;
  std::string page_token;   // "" = from the start; else a previous next_page_token
  size_t page_size = 1000;  // REQUIRES: 1..100000
};

struct StoreListPage {
  std::vector<StoredChunk> chunks;  // ChunkKey order; tiers = every tier holding it
  std::string next_page_token;      // "" when this is the last page
};

struct EvictOptions {
  bool dry_run = false;  // select and count, erase nothing
};

// Counters since creation plus current gauges of the write-back machinery.
struct TieredStoreStats {
  uint64_t hits = 0;                 // Get found the key in some tier
  uint64_t misses = 0;               // Get found it nowhere
  uint64_t promotions = 0;           // hits below tier 0 copied into tier 0
  uint64_t demotions_queued = 0;     // evicted records queued for the next tier
  uint64_t demotions_dropped = 0;    // evicted records dropped (queue over 2x the limit)
  uint64_t demotions_skipped = 0;    // evicted records the next tier already held
  uint64_t writebacks = 0;           // successful Puts into lower tiers by the background thread
  uint64_t writeback_errors = 0;     // failed Puts into lower tiers (the record stays above)
  uint64_t writebacks_skipped = 0;   // write-throughs whose record had left tier 0 first
  uint64_t writes_dropped = 0;       // write-backs not queued because the thread is dead
  uint64_t integrity_errors = 0;     // records that failed verification in any tier (sum of
                                     // the tiers' counters: one count every tier feeds)
  uint64_t explicit_evictions = 0;   // chunks removed by Evict (an operator's eviction)
  uint64_t queue_hits = 0;           // Gets served from the write-back queue
  uint64_t pending_write_bytes = 0;  // bytes queued or being written now
  uint64_t held_write_bytes = 0;     // of those, held in memory (<= max_pending_write_bytes)
  uint64_t writes_submitted = 0;     // SubmitWrite calls
  uint64_t writes_failed = 0;        // submitted writes whose finish or Put failed
};

// Thread-safe.
//
// Construction, e.g. host memory over disk (see also kvstore/store_factory.h):
//   std::vector<TierFactory> tiers;
//   tiers.push_back(HostTier::Factory({.capacity_bytes = 8ull << 30}));
//   tiers.push_back(DiskTier::Factory(disk_options));
//   auto store = TieredStore::Create(std::move(tiers), TieredStoreOptions{});
// A tier's Put returns the records it evicted to make room (Tier::Put, PutResult), and
// the store demotes them to the next tier after the call: no tier calls the store.
//
// Verification: tiers with caps().verifies_reads (disk, remote) verify what they
// return; the store trusts them and does not hash again. Records from tier 0 (host
// memory) never left the process. So a load is hashed once per trust boundary.
//
// Threads and locks: one supervised background thread ("write-back") performs, in FIFO
// order, the submitted writes (SubmitWrite: the connectors' stores), the queued
// write-through Puts and the demotions, and reaps expired leases. It is the only write
// queue: connectors have none of their own, and there is one lease book (this one).
// A demotion queues the victim's own buffer (never blocks, no copy). The store never
// calls into a tier while holding its own locks.
// A record waiting in the queue (evicted from tier 0, not yet below) is still found
// by Lookup and Get. If the thread dies (an exception escaped a tier), healthy() turns
// false, the death is logged, Put still lands in tier 0 but is no longer written down
// (stats().writes_dropped), and Flush no longer waits.
class TieredStore {
 public:
  // REQUIRES: at least one tier. The store owns the tiers. Errors of a factory are
  // returned (nothing is kept).
  static absl::StatusOr<std::unique_ptr<TieredStore>> Create(std::vector<TierFactory> tiers,
                                                             const TieredStoreOptions& options);
  ~TieredStore();  // drains the write-back queue

  // Stores a record (header checked) in tier 0 and queues it for the lower tiers the
  // placement policy names. Blocks while more than max_pending_write_bytes are queued.
  // When tier 0 answers ResourceExhausted (record larger than tier 0, or tier 0 all
  // pinned) and there is a lower tier, the record is queued for the lower tiers only and
  // Put returns OK (found in the queue until it lands). With PutAck::kDurable the first
  // durable tier is written before Put returns, and its error is returned; the record is
  // then erased from tier 0 again, so a failed durable Put leaves nothing visible (unless
  // a reader pinned it in tier 0 meanwhile).
  // InvalidArgument/DataLoss/FailedPrecondition for a bad record (nothing stored).
  absl::Status Put(std::span<const std::byte> record, const PutOptions& options = {});
  // Put of a record that `fill` writes (and may check) in memory tier 0 lends for the
  // call (Tier::PutInPlace: the host tier's arena, one copy); the write-back then reads
  // those same bytes. Returns the record's key. `fill`'s error abandons the record and is
  // returned unchanged. Through a pooled buffer and Put instead when PutAck::kDurable
  // names a durable tier below tier 0, or when tier 0 has no room (as Put: the lower
  // tiers take it). REQUIRES: `fill` does not call this store's Put/PutInPlace.
  absl::StatusOr<ChunkKey> PutInPlace(uint64_t record_bytes, const RecordFill& fill,
                                      const PutOptions& options = {});

  // Copies the record of `key` into `out`, searching top-down; a hit below tier 0 is
  // promoted (unless options.peek). NotFound on a miss; OutOfRange if `out` is too
  // small. A record whose write is still in flight is either complete or a miss, never
  // partial. A tier answering DataLoss has erased/counted the bad record: the search
  // continues below, and when no tier has a good copy the answer is DataLoss (data lost,
  // not a plain miss). Other tier errors (Unavailable, I/O) count as a miss in that tier.
  absl::StatusOr<uint64_t> Get(const ChunkKey& key, std::span<std::byte> out,
                               GetInfo* info = nullptr, const GetOptions& options = {});
  // Allocating variant.
  absl::StatusOr<std::vector<std::byte>> Get(const ChunkKey& key, GetInfo* info = nullptr,
                                             const GetOptions& options = {});
  // Get without a copy out (Tier::View): the record where tier 0 holds it, kept there
  // until the view is released; counted as a Get hit. A hit in a lower tier is read
  // once, straight into tier 0's memory (the promotion, in place: a chunk read from disk
  // with O_DIRECT costs no CPU copy) or, when tier 0 has no room, into a pooled aligned
  // buffer, and viewed there. A record only in the write-back queue, or in no tier, is
  // not viewed: NotFound (not counted as a miss), and the caller falls back to Get (as
  // on any other error: DataLoss from a lower tier, already counted by it; Unimplemented
  // when tier 0 cannot lend its records).
  // REQUIRES: the view is released before the store is destroyed.
  absl::StatusOr<RecordView> View(const ChunkKey& key, GetInfo* info = nullptr);

  // Which tiers hold `keys`, without moving data (no promotion, no LRU touch, not
  // counted as hits). With options.pin, pins the leading hits in the tier each was
  // found in (tiers with caps().pinnable; others are trusted as found) under the
  // returned result.lease, until the caller drops it or lease_timeout passes (the store
  // reaps it then); a key that left its tier between the presence check and the pin ends
  // the leading run there (the result is never optimistic). Reaps expired leases first.
  LookupResult Lookup(std::span<const ChunkKey> keys, const LookupOptions& options = {});
  // Record bytes of the distinct (tier, chunk) pairs pinned by live leases, after
  // reaping expired ones (a chunk pinned by several leases counts once).
  uint64_t pinned_bytes();
  // Leases that expired without a release, since creation.
  uint64_t expired_leases() const;

  // Every chunk once, in ChunkKey order, merged over the tiers, paginated: following
  // next_page_token returns each chunk exactly once whatever the page size.
  // InvalidArgument for a bad page size or token; a tier's List error is returned.
  absl::StatusOr<StoreListPage> List(const StoreListOptions& options);

  // Evicts what `selector` selects from every tier (kvstore/evict_selector.h).
  // Pinned chunks are not evicted and are reported in `failed`. Evictions are counted
  // in stats().explicit_evictions. InvalidArgument for a bad selector.
  absl::StatusOr<EvictResult> Evict(const EvictSelector& selector,
                                    const EvictOptions& options = {});

  // Erases `key` from every tier and cancels its queued write-backs. A write-back of the
  // key in flight is waited for first, so when Erase returns OK no tier holds a copy; a
  // tier's Erase error is returned (the copy may survive there).
  absl::Status Erase(const ChunkKey& key);

  // Asynchronous writes without a copy (the connector's stores), through the same
  // write-back queue, byte bound and supervised thread as the write-backs:
  //  1. AdmitWrite reserves `record_bytes` of the queue and the key, without blocking.
  //     `limit_bytes` (0 = none) lowers the store's max_pending_write_bytes for this
  //     caller. kAlreadyQueued when a write of the key is admitted or queued already.
  //  2. TakeBuffer gives a pooled (faulted-in) buffer of exactly `bytes`, or a new one.
  //  3. The caller fills the payload, then SubmitWrite hands the buffer over, or
  //     CancelWrite undoes the admission. REQUIRES: AdmitWrite(key, record.size) ==
  //     kAdmitted and neither call made since.
  // From SubmitWrite on, the record is found by Lookup and Get (finished on a copy
  // when its finish has not run yet) until it is evicted from every tier. The thread
  // then finishes it, puts it into tier 0 (or the next tier when tier 0 refuses it) and
  // through the lower tiers the placement names, straight from the buffer, and returns
  // the buffer to the pool. If the thread has died, SubmitWrite does all that on the
  // caller's thread, so nothing submitted is lost.
  WriteAdmission AdmitWrite(const ChunkKey& key, uint64_t record_bytes, uint64_t limit_bytes = 0);
  void CancelWrite(const ChunkKey& key, uint64_t record_bytes);
  RecordBuffer TakeBuffer(uint64_t bytes);
  void SubmitWrite(SubmittedWrite write);
  // Blocks until every queued write-back has completed (or failed and been counted):
  // after it returns, everything Put before is in every tier the placement names.
  void Flush();

  size_t num_tiers() const;
  // Capabilities and counters of tier `index` (the tiers themselves stay private: every
  // caller goes through the store's API).
  TierCaps tier_caps(TierIndex index) const;
  TierStats tier_stats(TierIndex index) const;

  // False once the background write-back thread has died (see class comment).
  bool healthy() const;
  TieredStoreStats stats() const;

 private:
  class Impl;
  explicit TieredStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvt

#endif  // KVSTORE_TIERED_STORE_H_
