// The direct replay of `kvtier-bench trace`: a trace driven through one CachePolicy
// object with a plain index of held blocks standing in for a tier (what the tier does
// around its policy: Admit before making room, evict in VisitVictims order, OnInsert,
// OnAccess for the hits it serves, OnMiss for the first key it lacks), and the offline
// optimum. It isolates the policy: its hit ratio and its time per chunk without the
// tier's copies and locks. One record per block, all of one size.
#ifndef KVT_BENCH_TRACE_SIM_H_
#define KVT_BENCH_TRACE_SIM_H_

#include <cstdint>

#include "kvstore/cache_policy.h"
#include "trace_file.h"

namespace kvt::bench {

struct SimResult {
  uint64_t hit_tokens = 0;
  uint64_t total_tokens = 0;
  uint64_t records_written = 0;  // records stored (admitted), the tier's write traffic
  uint64_t admission_rejects = 0;
  uint64_t chunks = 0;        // block references replayed
  double seconds = 0;         // the whole replay (policy + the index beside it)
  double policy_seconds = 0;  // inside the policy's methods (timer cost subtracted)
  uint64_t policy_calls = 0;
  // The replaying thread's CPU time (user + system) for the whole replay, policy and
  // index, timer cost subtracted: an upper bound of the policy's CPU time that, unlike
  // policy_seconds, other processes on a busy machine do not inflate.
  double cpu_seconds = 0;
  double token_hit_ratio() const {
    return total_tokens ? static_cast<double>(hit_tokens) / static_cast<double>(total_tokens) : 0;
  }
  // The policy's time per chunk replayed (every call it gets for that chunk).
  double seconds_per_chunk() const {
    return chunks ? policy_seconds / static_cast<double>(chunks) : 0;
  }
  double cpu_seconds_per_chunk() const {
    return chunks ? cpu_seconds / static_cast<double>(chunks) : 0;
  }
  double seconds_per_call() const {
    return policy_calls ? policy_seconds / static_cast<double>(policy_calls) : 0;
  }
};

// Replays `trace` through `policy` with room for
// `capacity_records` records of `record_bytes`. A request: its leading run of held blocks
// is the hit (OnAccess each); the first block not held is a miss (OnMiss); every block
// after the run is stored (Admit, then evict to make room, then OnInsert).
// Each policy call is timed with steady_clock (the cost of an empty timing, measured
// first, is subtracted).
SimResult SimulatePolicy(const Trace& trace, CachePolicy& policy, uint64_t capacity_records,
                         uint64_t record_bytes);

// Host memory over disk, each with its own policy and capacity, as TieredStore composes
// them by default: every store is written through to disk (one host memory declined
// too: the store sends its bytes down); a host eviction is demoted to disk when disk does
// not hold it; a disk hit is promoted into host memory. Each tier's Admit decides
// whether it stores what it is offered.
struct TwoTierResult {
  uint64_t host_hit_tokens = 0;  // tokens of hit blocks found in host memory
  uint64_t disk_hit_tokens = 0;  // ... found only on disk
  uint64_t total_tokens = 0;
  uint64_t host_records_written = 0;
  uint64_t disk_records_written = 0;
  uint64_t chunks = 0;
  double policy_seconds = 0;  // both policies' calls
  double cpu_seconds = 0;     // as SimResult::cpu_seconds
  double host_ratio() const { return Ratio(host_hit_tokens); }
  double disk_ratio() const { return Ratio(disk_hit_tokens); }
  double total_ratio() const { return Ratio(host_hit_tokens + disk_hit_tokens); }
  double seconds_per_chunk() const {
    return chunks ? policy_seconds / static_cast<double>(chunks) : 0;
  }
  double cpu_seconds_per_chunk() const {
    return chunks ? cpu_seconds / static_cast<double>(chunks) : 0;
  }

 private:
  double Ratio(uint64_t t) const {
    return total_tokens ? static_cast<double>(t) / static_cast<double>(total_tokens) : 0;
  }
};
TwoTierResult SimulateTwoTier(const Trace& trace, CachePolicy& host, uint64_t host_records,
                              CachePolicy& disk, uint64_t disk_records, uint64_t record_bytes);

// The offline optimum of the same replay: Belady's farthest next use, with blocks never
// used again not stored (and stored blocks whose next use is farther than the new block's
// evicted for it). The limit every policy is shown beside.
SimResult SimulateOptimum(const Trace& trace, uint64_t capacity_records);

}  // namespace kvt::bench

#endif  // KVT_BENCH_TRACE_SIM_H_
