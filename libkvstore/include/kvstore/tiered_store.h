// TieredStore: ordered tiers (0 = fastest, e.g. host → disk → remote) composed into
// one cache. Write lands in tier 0 and is written down asynchronously; Get searches
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
#include "kvstore/absence_record.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/clock.h"
#include "kvstore/evict_selector.h"
#include "kvstore/health_registry.h"
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

// Which lower tiers a Write is written through to, in the background.
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
  // Bytes of write-back queued (write-throughs, demotions and async writes, each
  // record counted once) before a sync Write blocks and an async one is refused
  // (back-pressure). Demotions are dropped (counted) rather than queued past it,
  // so the queue's memory stays within this bound. 0 = unlimited.
  uint64_t max_pending_write_bytes = 1ull << 30;
  // Record buffers kept after their write for reuse by later async writes, so a
  // caller's copy-out writes into memory that is already faulted in. 0 = no pool.
  uint64_t buffer_pool_bytes = 256ull << 20;
  // The store's time (lease deadlines, the write-back thread's period, Evict's
  // older_than); null = SystemClock(). Tests pass a ManualClock (kvstore/clock.h).
  std::shared_ptr<Clock> clock;
  // Where the write-back thread reports (kvstore/health_registry.h); null =
  // HealthRegistry::Default().
  std::shared_ptr<HealthRegistry> health;
  // Why keys are not held (kvstore/absence_record.h): the record the tiers note into
  // (HostTierOptions::absence, DiskTierOptions::absence; OpenTieredStore gives them
  // this one), read by Lookup with explain_misses. Null = none (misses unexplained).
  std::shared_ptr<AbsenceRecord> absence;

  absl::Status Validate() const;
};

// How far down a write must be before it is acknowledged.
enum class PutAck : uint8_t {
  kTopTier = 0,  // tier 0 holds it; lower tiers are written in the background
  kDurable = 1,  // also the first durable tier (caps().durable) holds it; that tier's
                 // errors (ResourceExhausted for a full disk, I/O errors) are returned
};

// The outcome of an asynchronous write (WriteRequest::done).
using WriteDone = std::function<void(const absl::Status&)>;

// One write into the store (TieredStore::Write). The record comes from one source:
//  * `record`: ready bytes (header + payload), borrowed for the call only; or
//  * `fill` over `record_bytes`: the store lends a buffer of exactly record_bytes (tier
//    0's own memory when it can lend it, Tier::PutInPlace: one copy) and `fill` writes
//    the record into it (and may check it). With `header` set, fill is handed only the
//    payload, record[kChunkHeaderBytes, record_bytes), and the store encodes the header
//    over it (EncodeChunk, which hashes the payload).
// And is written one of two ways:
//  * synchronously (async = false): the record is in tier 0 (or, when tier 0 refuses
//    it, queued for the lower tiers) when Write returns, and written down to the lower
//    tiers the placement names in the background; with ack = kDurable also in the first
//    durable tier;
//  * asynchronously (async = true, the engines' stores): Write admits the key and the
//    bytes into the write-back queue without blocking, calls `fill` (or copies `record`)
//    into a pooled buffer on the caller's thread, and returns; the write-back thread
//    encodes the header (when `header` is set), puts the record into tier 0 and down the
//    placement, and calls `done`. Until then Lookup and Get find the record in the queue.
struct WriteRequest {
  std::span<const std::byte> record;  // a ready record; or empty and:
  uint64_t record_bytes = 0;          // REQUIRES with fill: >= kChunkHeaderBytes
  RecordFill fill;                    // REQUIRES: does not write into this store
  // With fill: the header the store encodes over the payload fill wrote. REQUIRES for
  // an async fill (the key is admitted before fill runs).
  std::optional<ChunkHeader> header;
  PutAck ack = PutAck::kTopTier;  // sync only (an async write acks through done)
  bool async = false;
  // Async: lowers TieredStoreOptions::max_pending_write_bytes for this write (0 = none).
  uint64_t limit_bytes = 0;
  // Async: called once, on the write-back thread (or in Write when the thread has died),
  // with the outcome: OK (tier 0, or the first tier that took it, holds it), the encode's
  // or the tier's error, or Cancelled (erased first, or the store was destroyed). Never
  // called with a store lock held. May be empty. Not called when Write returns an error.
  WriteDone done;
};

struct LookupOptions {
  // false: answer the leading run (stop at the first key no tier holds).
  // true: answer every key (tier_index kNoTier for a miss) and its record bytes.
  bool per_key = false;
  // Pin the leading hits under a lease (see Lookup).
  bool pin = false;
  // Tenancy: a key whose namespace (ChunkStat::ns) this rejects is a miss, in every tier
  // (never pinned; the leading run stops there). Null = every namespace.
  std::function<bool(const NamespaceId&)> visible;
  // With per_key: say why each key no tier holds is absent (LookupResult::absence), from
  // TieredStoreOptions::absence. One hash look-up per missed key; for inspection.
  bool explain_misses = false;
};

struct LookupResult {
  // Number of leading keys present in some tier.
  size_t num_leading_hits = 0;
  // Per key answered (the leading hits; with per_key every key): the fastest tier
  // holding it (kNoTier: none), that tier's kind, and the record bytes (0 for a miss).
  std::vector<TierIndex> tier_index;
  std::vector<TierKind> tier_kind;
  std::vector<uint64_t> record_bytes;
  // The namespace of each key answered (zero for a miss; for a record in the write-back
  // queue whose header is not encoded yet, zero too, and such a record is then a miss
  // under `visible`).
  std::vector<NamespaceId> ns;
  // With explain_misses and per_key: per key answered, why it is absent (a hit's entry
  // is default, kNoRecord; every miss's kNoRecord when the store has no record). A key
  // whose noted namespace `visible` rejects reads as one never noted.
  std::vector<Absence> absence;
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

// Counters since creation plus current gauges (TieredStore::stats()).
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
  uint64_t writes_submitted = 0;     // async Writes queued
  uint64_t writes_failed = 0;        // async Writes whose encode or Put failed
  // The lease book: record bytes of the distinct (tier, chunk) pairs pinned by live
  // leases, after reaping expired ones (a chunk pinned by several leases counts once),
  // and the leases that expired without a release since creation.
  uint64_t pinned_bytes = 0;
  uint64_t expired_leases = 0;
  // False once the background write-back thread has died (see TieredStore).
  bool healthy = true;
  // Each tier's own counters, index = TierIndex (tiers().size() entries).
  std::vector<TierStats> tiers;
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
// order, the async writes (Write with async: the connectors' stores), the queued
// write-through Puts and the demotions, and reaps expired leases. It is the only write
// queue: connectors have none of their own, and there is one lease book (this one).
// A demotion queues the victim's own buffer (never blocks, no copy). The store never
// calls into a tier while holding its own locks.
// A record waiting in the queue (evicted from tier 0, not yet below) is still found
// by Lookup and Get. If the thread dies (an exception escaped a tier), stats().healthy
// turns false, the death is logged, a sync Write still lands in tier 0 but is no longer
// written down (stats().writes_dropped), an async Write is written on the caller's
// thread, and Flush no longer waits.
class TieredStore {
 public:
  // REQUIRES: at least one tier. The store owns the tiers. Errors of a factory are
  // returned (nothing is kept).
  static absl::StatusOr<std::unique_ptr<TieredStore>> Create(std::vector<TierFactory> tiers,
                                                             const TieredStoreOptions& options);
  ~TieredStore();  // drains the write-back queue

  // Writes one record (WriteRequest says how). Returns its key.
  // Sync: blocks while more than max_pending_write_bytes are queued. When tier 0
  // answers ResourceExhausted (record larger than tier 0, or tier 0 all pinned) and
  // there is a lower tier, the record is queued for the lower tiers only and Write
  // returns OK (found in the queue until it lands). With PutAck::kDurable the first
  // durable tier is written before Write returns, and its error is returned; the record
  // is then erased from tier 0 again, so a failed durable write leaves nothing visible
  // (unless a reader pinned it in tier 0 meanwhile).
  // Async: never blocks; AlreadyExists when a write of the key is queued or being
  // written already (skip it), Unavailable when the queue is over its byte limit
  // (dropped: never block an engine); nothing is queued then and `fill` is not called.
  // Errors: InvalidArgument for a request that names no record, both sources, or an
  // async fill without a header; InvalidArgument/DataLoss/FailedPrecondition for a bad
  // record (nothing stored); `fill`'s error abandons the record and is returned unchanged.
  absl::StatusOr<ChunkKey> Write(WriteRequest request);

  // Copies the record of `key` into `out`, searching top-down; a hit below tier 0 is
  // promoted (unless options.peek). NotFound on a miss; OutOfRange if `out` is too
  // small. A record whose write is still in flight is either complete or a miss, never
  // partial. A tier answering DataLoss has erased/counted the bad record: the search
  // continues below, and when no tier has a good copy the answer is DataLoss (data lost,
  // not a plain miss). Other tier errors (Unavailable, I/O) count as a miss in that tier.
  // The record's size is LookupResult::record_bytes (Lookup with per_key) or known from
  // the namespace (kChunkHeaderBytes + payload); OutOfRange names the size needed.
  absl::StatusOr<uint64_t> Get(const ChunkKey& key, std::span<std::byte> out,
                               GetInfo* info = nullptr, const GetOptions& options = {});
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

  // Blocks until every queued write-back has completed (or failed and been counted):
  // after it returns, everything written before is in every tier the placement names.
  void Flush();

  // The tiers' capabilities, index = TierIndex (0 = fastest); size() = number of tiers.
  // (The tiers themselves stay private: every caller goes through the store's API.)
  std::vector<TierCaps> tiers() const;
  // Counters, gauges, the lease book, health and each tier's counters (one snapshot).
  TieredStoreStats stats() const;

 private:
  class Impl;
  explicit TieredStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvt

#endif  // KVSTORE_TIERED_STORE_H_
