// ServerStats: what kvtier-llama-server counts, and its two reports of it: GET /kvtier
// (one JSON object) and the kvtier_* lines of GET /metrics (Prometheus text). The field
// list of both is in docs/llama-server.md ("/kvtier and /metrics").
//
// The counters are atomics, added to by the task-loop thread (ServerKvtier's hooks) and
// read by HTTP threads; relaxed order (each is a monotonic count or sum on its own).
#ifndef KVTIER_SERVER_SERVER_STATS_H_
#define KVTIER_SERVER_SERVER_STATS_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "connectors/kv_connector.h"
#include "kvtier_server/tail_records.h"

namespace kvt::llamacpp {

// What the reports show besides the counters (ServerKvtier's state when asked).
struct ServerReportState {
  bool refused = false;  // the model's memory kind is refused: only `refused_why`
  std::string refused_why;
  bool ready = false;  // OnContextReady finished (else "loading")
  std::string tiers;   // "host+disk+kvtierd"
  bool model_changed = false;
  std::string model_file;
  std::string ns_hex;  // the namespace, 32 hex digits
  std::string memory;  // "kv", "iswa", "hybrid" or "recurrent"
  int64_t chunk_tokens = 0;
  uint64_t bytes_per_token = 0;
  uint64_t snapshot_bytes = 0;  // one boundary snapshot in each chunk record (0: none), bytes
  bool tail_records = false;    // tails stored and restored
  std::string overlap_mode;     // "off", "auto" or "always"
  ConnectorStats connector;     // zeros before ready
  TailStats tails;              // zeros without tail records
  uint64_t writeback_pending_bytes = 0;
};

class ServerStats {
 public:
  // Adds `seconds` to a sum (a compare-exchange loop: atomic<double> has no fetch_add here).
  static void Add(std::atomic<double>& sum, double seconds);

  // GET /kvtier's object: {"enabled": false, "state": "refused" | "loading", ...} before
  // ready, else every counter and `state`'s fields.
  std::string StatusJson(const ServerReportState& state) const;
  // The kvtier_* families of /metrics (counters and the kvtier_model_changed gauge).
  std::string MetricsText(const ServerReportState& state) const;

  std::atomic<uint64_t> requests{0};    // OnPromptStart calls with a chunk to gain
  std::atomic<uint64_t> hits{0};        // requests that restored >= 1 chunk or a tail
  std::atomic<uint64_t> tail_hits{0};   // ... of which up to the tail's end (a tail record)
  std::atomic<uint64_t> misses{0};      // requests that restored nothing
  std::atomic<uint64_t> cost_skips{0};  // cached chunks the cost model chose not to load
  std::atomic<uint64_t> loaded_tokens{0};
  std::atomic<uint64_t> load_bytes{0};
  std::atomic<uint64_t> load_failures{0};  // restores that failed (chunk or set_data)
  std::atomic<uint64_t> stored_chunks{0};
  std::atomic<uint64_t> store_errors{0};
  std::atomic<double> load_seconds{0};
  std::atomic<double> prompt_start_seconds{0};  // all of OnPromptStart, hit or miss
  // Task-loop time taking chunks and tails for storing (OnPromptDone, OnPromptSave): it
  // delays every slot's next batch on that server, so it is on other requests' paths.
  std::atomic<double> store_seconds{0};
  // Misses whose short unaligned slot prefix was dropped to compute from token 0.
  std::atomic<uint64_t> dropped_prefixes{0};
  std::atomic<uint64_t> overlapped{0};             // requests that started a back load
  std::atomic<uint64_t> overlap_joined{0};         // ... whose loaded back was joined in
  std::atomic<uint64_t> overlap_front_tokens{0};   // tokens computed as fronts (joined)
  std::atomic<uint64_t> overlap_loaded_tokens{0};  // tokens loaded as backs (joined)
  std::atomic<double> overlap_wait_seconds{0};     // task loop blocked in BackLoader::Wait
};

}  // namespace kvt::llamacpp

#endif  // KVTIER_SERVER_SERVER_STATS_H_
