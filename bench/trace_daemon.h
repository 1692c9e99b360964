// The kvtierd replay of `kvtier-bench trace` (issue 24, "the same replay through
// kvtierd"): one real kvtierd with capacity-limited host and disk tiers (each with its
// cache policy from kvtierd's YAML), and `clients` replay processes, each with its own
// RemoteTier and so its own gRPC connection, sharing it as engines do. Request i of the
// trace is sent by client i % clients; a turnstile in shared memory keeps the requests
// in trace order, so the hit ratio is comparable with the in-process replay
// (trace_store.h) of the same trace and capacities.
#ifndef KVT_BENCH_TRACE_DAEMON_H_
#define KVT_BENCH_TRACE_DAEMON_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "kvstore/cache_policy.h"
#include "trace_file.h"

namespace kvt::bench {

struct DaemonReplayOptions {
  // The tiers' policies as kvtierd's YAML names them: "" leaves the key out (kvtierd's
  // default for that tier).
  std::string host_policy;
  std::string disk_policy;
  uint64_t host_records = 0;  // REQUIRES: host_records * record_bytes >= 1 MiB
  uint64_t disk_records = 0;  // REQUIRES: >= 1
  uint64_t record_bytes = 4096;
  int clients = 2;       // replay processes, 1..16
  std::string kvtierd;   // the binary (FindKvtierd's answer)
  std::string work_dir;  // a fresh folder: config, socket, data, logs (kept)
};

struct DaemonReplayResult {
  uint64_t hit_tokens = 0;
  uint64_t total_tokens = 0;
  uint64_t chunks = 0;
  // From kvtierd's Stats at the end (its own tiers): chunk hits, bytes written, rejects.
  uint64_t host_hits = 0, disk_hits = 0;
  uint64_t host_bytes_written = 0, disk_bytes_written = 0;
  uint64_t host_admission_rejects = 0, disk_admission_rejects = 0;
  double seconds = 0;
  double total_ratio() const {
    return total_tokens ? static_cast<double>(hit_tokens) / static_cast<double>(total_tokens) : 0;
  }
};

// Starts kvtierd, forks the clients (this process must not have started gRPC), waits for
// them and stops kvtierd. Errors: Unavailable when kvtierd does not start (its log named),
// Internal when a client fails (its first error).
absl::StatusOr<DaemonReplayResult> ReplayThroughKvtierd(const Trace& trace,
                                                        const DaemonReplayOptions& options);

}  // namespace kvt::bench

#endif  // KVT_BENCH_TRACE_DAEMON_H_
