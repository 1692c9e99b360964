// The store replay of `kvtier-bench trace`: a trace through the real TieredStore (a host
// tier, optionally a disk tier below it, each with its own CachePolicy and capacity), as
// an engine drives it through the connector: Lookup of a request's chunk keys (the
// leading run is the hit), a Get of each hit chunk (a disk hit is promoted), a Put of
// every chunk after the run (written through to disk by the store's write-back). The
// write-back is flushed after each request, so a run is deterministic.
// Records are scaled: one record of `record_bytes` per trace block.
#ifndef KVT_BENCH_TRACE_STORE_H_
#define KVT_BENCH_TRACE_STORE_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "kvstore/cache_policy.h"
#include "kvstore/tiered_store.h"
#include "trace_file.h"

namespace kvt::bench {

struct StoreReplayOptions {
  CachePolicyOptions host_policy;
  uint64_t host_records = 0;  // REQUIRES: >= 1
  CachePolicyOptions disk_policy;
  uint64_t disk_records = 0;     // 0 = no disk tier
  std::string disk_dir;          // REQUIRES (a fresh folder) when disk_records > 0
  uint64_t record_bytes = 4096;  // REQUIRES: a multiple of 4096, >= 4096
  // Flush the write-back after each request (deterministic; the tiers alone serve hits).
  // false: the queue, which serves what it holds, adds capacity while it lags.
  bool flush = true;
  // Keys of the store's record of why keys are not held (kvstore/absence_record.h), as
  // kvtierd's miss_record_entries; 0 = no record.
  size_t miss_record_entries = 0;
};

struct StoreReplayResult {
  uint64_t host_hit_tokens = 0;  // hit tokens whose block was in host memory at the lookup
  uint64_t disk_hit_tokens = 0;  // ... only on disk
  uint64_t total_tokens = 0;
  uint64_t chunks = 0;
  uint64_t host_bytes_written = 0;  // the tiers' bytes_in
  uint64_t disk_bytes_written = 0;
  uint64_t host_admission_rejects = 0;
  uint64_t disk_admission_rejects = 0;
  double seconds = 0;  // the whole replay, wall time
  double host_ratio() const { return Ratio(host_hit_tokens); }
  double disk_ratio() const { return Ratio(disk_hit_tokens); }
  double total_ratio() const { return Ratio(host_hit_tokens + disk_hit_tokens); }
  double seconds_per_chunk() const { return chunks ? seconds / static_cast<double>(chunks) : 0; }

 private:
  double Ratio(uint64_t t) const {
    return total_tokens ? static_cast<double>(t) / static_cast<double>(total_tokens) : 0;
  }
};

// Errors: the store's (InvalidArgument for a bad policy name or size, I/O errors of the
// disk tier), and Internal when a chunk the lookup reported is not readable.
absl::StatusOr<StoreReplayResult> ReplayThroughStore(const Trace& trace,
                                                     const StoreReplayOptions& options);

// Which requests one replay client sends, and its turn-taking with the others: request i
// belongs to this client when i % stride == offset; `wait_turn(i)` (when set) returns once
// request i may start, `done(i)` is called after it (a shared turnstile keeps several
// client processes in trace order).
struct ReplaySlice {
  size_t offset = 0;
  size_t stride = 1;
  std::function<void(size_t)> wait_turn;
  std::function<void(size_t)> done;
  bool flush = true;  // Flush the store's write-back after each request (deterministic)
};

// The replay loop over any store (in-process tiers, or a RemoteTier on kvtierd): per
// request a pinned Lookup, a Get of each leading hit, a Put of every block after the run.
// Adds to *res (hit tokens by the tier index reported by the lookup: 0 = host_hit_tokens,
// any other = disk_hit_tokens; tokens, chunks). Errors: the store's Put, Internal when a
// reported hit cannot be read.
absl::Status ReplayRequests(TieredStore& store, const Trace& trace, uint64_t record_bytes,
                            const ReplaySlice& slice, StoreReplayResult* res);

}  // namespace kvt::bench

#endif  // KVT_BENCH_TRACE_STORE_H_
