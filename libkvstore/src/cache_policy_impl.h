// Private to libkvstore: the cache policies behind MakeCachePolicy (one per file,
// cache_policy_<name>.cc) and what they share.
#ifndef KVSTORE_SRC_CACHE_POLICY_IMPL_H_
#define KVSTORE_SRC_CACHE_POLICY_IMPL_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "cache_policy_list.h"
#include "kvstore/cache_policy.h"

namespace kvt::internal {

// Recency only, admits everything (cache_policy.cc): the historical behaviour.
std::unique_ptr<CachePolicy> MakeLruPolicy();
// Least frequently used held key first, ties least recent first; admits everything
// (cache_policy_lfu.cc). Counts are kept while a key is held (in-cache LFU).
std::unique_ptr<CachePolicy> MakeLfuPolicy();
// ARC (cache_policy_arc.cc).
std::unique_ptr<CachePolicy> MakeArcPolicy(uint64_t capacity_bytes);
// S3-FIFO (cache_policy_s3fifo.cc).
std::unique_ptr<CachePolicy> MakeS3FifoPolicy(uint64_t capacity_bytes);
// The default: prefix-aware LRU with ARC-adapted admission of first-seen chunks
// (cache_policy_adaptive.cc), and its tuning.
struct AdaptiveParams {
  double initial_window_fraction = 0.0;  // first-seen chunks' starting share of capacity
  uint32_t sample_factor = 10;           // doorkeeper memory: references per entry
  double ghost_fraction = 0.5;           // each ghost list: this many x capacity keys
  double step = 1.0;                     // records moved per ghost hit (ARC's 1) ...
  double step_fraction = 0.0003;         // ... and at least this share of capacity
  bool decline_first_seen = false;       // CachePolicyOptions::adaptive_declines_first_seen
};
std::unique_ptr<CachePolicy> MakeAdaptivePolicy(uint64_t capacity_bytes,
                                                const AdaptiveParams& params = {});
// Wraps `inner` with a TTL since last use (cache_policy_ttl.cc). REQUIRES: ttl > 0.
// `clock` null = SystemClock().
std::unique_ptr<CachePolicy> MakeTtlPolicy(std::unique_ptr<CachePolicy> inner,
                                           std::chrono::steady_clock::duration ttl,
                                           std::shared_ptr<Clock> clock);

// Base of the policies whose eviction order is decided one victim at a time with side
// effects (S3-FIFO moves survivors between its queues; W-TinyLFU runs its admission duel
// when the window overflows). VisitVictims first visits the victims designated before
// and not evicted (pinned or being read when the tier last looked), then designates more
// with DesignateNext as long as the tier wants them. A designated victim that is used
// again is given back to the policy (Revive). Not thread-safe.
class StagedPolicy : public CachePolicy {
 public:
  void VisitVictims(const std::function<bool(const ChunkKey&)>& visit) const override;
  size_t size() const override { return nodes_.size(); }

 protected:
  static constexpr uint8_t kVictimQueue = 255;

  // Takes the next victim out of the policy's lists (the caller links it into the victim
  // list); nullptr when no held key is left outside the victim list.
  virtual PolicyNode* DesignateNext() = 0;
  // `n`, a designated victim that was used again, was unlinked from the victim list:
  // link it back into the policy's lists.
  virtual void Revive(PolicyNode* n) = 0;

  // Unlinks `n` from whichever list holds it (the victim list included).
  virtual void Unlink(PolicyNode* n) = 0;

  // Unlinks a designated victim that was used again and revives it.
  void ReviveVictim(PolicyNode* n) {
    victims_.Remove(n);
    Revive(n);
  }

  NodeMap nodes_;
  NodeList victims_;  // back = the first to evict
};

}  // namespace kvt::internal

#endif  // KVSTORE_SRC_CACHE_POLICY_IMPL_H_
