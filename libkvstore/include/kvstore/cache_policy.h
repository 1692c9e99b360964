// CachePolicy: the seam where a tier's admission and victim choice live (what to keep).
//
// A tier owns the bytes, the index and the pins; its policy only decides:
//  - admission: whether a record offered to the tier is stored at all (a policy that
//    skips records nobody reads again saves the tier's capacity and its write bandwidth);
//  - victim order: which held records to evict first when the tier needs room.
// The tier tells its policy what happens to the records it holds (insert, access,
// remove) and which keys were asked for but not held (miss), so frequency-based
// policies learn about keys before they are stored. The model is CacheLib's pluggable
// MMContainer (eviction) + AdmissionPolicy (admission), not its code.
//
// Each tier has its own policy object (host memory lives at 1-2 % of a workload's
// distinct chunks, disk and cluster tiers at 10-50 %: they want different policies).
// Policies are created from a CachePolicyOptions by MakeCachePolicy.
//
// Not thread-safe: the tier calls every method under its own lock, so a method must be
// cheap (the store's hot path: target <= 1 us per call) and must never call back into
// the tier or block.
#ifndef KVSTORE_CACHE_POLICY_H_
#define KVSTORE_CACHE_POLICY_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvstore/clock.h"
#include "kvstore/types.h"

namespace kvt {

// What a tier tells its policy about one record.
struct CacheEntryInfo {
  ChunkKey key;
  ChunkKey parent;  // the key of the chunk before it in its prompt (zero for chunk 0)
  NamespaceId ns;
  uint64_t record_bytes = 0;  // header + payload
};

// Why a record is offered to a tier.
enum class AdmitReason : uint8_t {
  kPut = 0,        // a client's store (or the store's write-through of one)
  kDemotion = 1,   // evicted from the tier above and offered to this one
  kPromotion = 2,  // read from a tier below and copied up
};

// Why a held record stops being held.
enum class RemoveReason : uint8_t {
  kEvicted = 0,   // the tier needed room (the policy's victim)
  kErased = 1,    // an explicit erase or operator eviction
  kReplaced = 2,  // a new record of the same key replaced it
  kExpired = 3,   // the policy's TTL ran out
};

class CachePolicy {
 public:
  virtual ~CachePolicy() = default;

  // Short name for logs, metrics and the CLI ("lru", "tinylfu", ...).
  virtual std::string_view name() const = 0;

  // Whether to store a record the tier is offered. False = the tier does not store it
  // (the tier counts a rejection; the caller is not told it failed: a cache may decline).
  // Called before the tier reserves room. Default: admit everything.
  virtual bool Admit(const CacheEntryInfo& entry, AdmitReason reason) {
    (void)entry;
    (void)reason;
    return true;
  }

  // The record is now held (after a successful put).
  virtual void OnInsert(const CacheEntryInfo& entry) = 0;
  // A client read or pinned a held record (Get, View, Pin): a use.
  virtual void OnAccess(const ChunkKey& key) = 0;
  // A client asked for a key the tier does not hold (Get miss, Pin of an absent key).
  // Default: nothing (recency-only policies ignore misses).
  virtual void OnMiss(const ChunkKey& key) { (void)key; }
  // The record is no longer held.
  virtual void OnRemove(const ChunkKey& key, RemoveReason reason) = 0;

  // Visits held keys in eviction order (first = evict first) until `visit` returns false.
  // The tier skips keys it cannot evict now (pinned, being read) and stops once it has
  // room; it calls OnRemove(kEvicted) for each key it evicts, after the visit.
  virtual void VisitVictims(const std::function<bool(const ChunkKey&)>& visit) const = 0;

  // Keys whose TTL has run out at `now`, which the tier should drop (then OnRemove
  // with kExpired). Default: none (no TTL).
  virtual void VisitExpired(std::chrono::steady_clock::time_point now,
                            const std::function<void(const ChunkKey&)>& visit) {
    (void)now;
    (void)visit;
  }

  // Number of held keys the policy tracks (a check for tests: equals the tier's count).
  virtual size_t size() const = 0;
};

// Which policy a tier uses, with its parameters. The policies, the defaults and the
// measurements behind them are in docs/cache-policy.md.
struct CachePolicyOptions {
  // One of CachePolicyNames():
  //  "lru"     recency only, admits everything (the historical behaviour);
  //  "lfu"     in-cache LFU (fewest uses first, ties least recent first);
  //  "arc"     ARC (FAST'03): recency and frequency lists with ghosts, self-tuning split;
  //  "s3fifo"  S3-FIFO (SOSP'23): small FIFO + main FIFO with reinsertion + ghost keys;
  //  "adaptive" prefix-aware LRU that stores a chunk seen for the first time only while
  //            its ARC-style adaptive budget for such chunks allows (a small tier skips
  //            them, a large one keeps them); chains leave tail first. The default policy
  //            ("default" names it too).
  // MakeCachePolicy rejects any other name.
  std::string name = "lru";
  // Records older than this since their last use (insert, read or pin) are dropped. 0 = no
  // TTL.
  std::chrono::seconds ttl{0};
  // "adaptive" only: what happens to a chunk seen for the first time when the budget for
  // such chunks is spent. false (default): it is stored and is the first to be evicted
  // (one record of room): right for a tier with nothing below it, where a declined chunk
  // would reach no tier. true: it is not stored at all (Admit says no), which also saves
  // the tier's writes (63 % of host writes at 1 % on the Mooncake conversation trace);
  // TieredStore writes a record tier 0 declined through to the lower tiers, whose own
  // policies decide: right for host memory above a disk (the default there).
  bool adaptive_declines_first_seen = false;
  // The TTL's clock (kvstore/clock.h): null = the tier's clock (HostTierOptions::clock,
  // DiskTierOptions::clock), else SystemClock(). Tests pass a ManualClock.
  std::shared_ptr<Clock> clock;

  // InvalidArgument naming the field for a bad value.
  absl::Status Validate() const;
};

// The policy names MakeCachePolicy accepts, for help texts and config validation.
const std::vector<std::string>& CachePolicyNames();
// The name of the default policy ("adaptive"), what "default" resolves to.
inline constexpr std::string_view kDefaultCachePolicy = "adaptive";

// A new policy object for one tier. `capacity_bytes` is the tier's capacity (policies
// that size windows or sketches by it). InvalidArgument for bad options.
absl::StatusOr<std::unique_ptr<CachePolicy>> MakeCachePolicy(const CachePolicyOptions& options,
                                                             uint64_t capacity_bytes);

}  // namespace kvt

#endif  // KVSTORE_CACHE_POLICY_H_
