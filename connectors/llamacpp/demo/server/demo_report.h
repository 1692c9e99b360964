// The server demo's measurements and what it prints from them: the table (medians), the
// targets with PASS/FAIL, ttft.csv, the plot, and --json lines.
#ifndef LLAMACPP_DEMO_SERVER_DEMO_REPORT_H_
#define LLAMACPP_DEMO_SERVER_DEMO_REPORT_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvt::llamacpp::demo {

// kUpstream: llama.cpp's own `llama-server` binary from the same build (no kvtier code
// linked), cold, to show the demo's cold column runs the engine at full speed.
// kSlotCache: plain llama-server's slot-cache hit (the slot still holds the prompt as its
// own prefill left it; all but the last token reused): the bit-exact reference for
// iSWA models, whose RAM-cache hit restores another cache (ExactReference).
enum class Config {
  kCold = 0,
  kServerCache = 1,
  kHost = 2,
  kDisk = 3,
  kKvtierd = 4,
  kUpstream = 5,
  kSlotCache = 6
};
inline constexpr int kNumConfigs = 7;

// Which of plain llama-server's own cache hits a kvtier restore of all but the last token
// must equal bit for bit. `memory` is the model's memory kind as kvtier-llama-server's
// GET /kvtier reports it ("kv", "iswa", "hybrid", "recurrent"; "" when unknown):
// kSlotCache for "iswa" (llama-server's RAM cache saves a slot with
// llama_state_seq_get_data, which keeps only the window's cells of the sliding-window
// layers, so its hit restores a cache other than the one a prefill leaves), else
// kServerCache (the RAM-cache hit: the same cache as the prefill left).
Config ExactReference(const std::string& memory);
// Why ExactReference chose that reference, in a user's words (one sentence).
std::string ExactReferenceWhy(const std::string& memory);
const char* ConfigName(Config c);

struct Sample {
  int repeat = 0;
  bool ok = false;
  std::string error;  // why it did not run
  double ttft_ms = 0;
  int cache_n = 0;  // timings.cache_n: reused by the slot, its RAM cache or kvtier
  int prompt_n = 0;
  int kvtier_loaded = 0;  // tokens kvtier restored for this request (GET /kvtier delta)
  // kvtier's time on this request's path before its prefill (GET /kvtier
  // prompt_start_seconds delta, ms); < 0 when not measured.
  double kvtier_path_ms = -1;
  double prompt_ms = -1;  // the server's timings.prompt_ms (compute of the prompt_n tokens)
  // The server's threads during the request (ReadSchedTimes deltas, ms): on a CPU, and
  // runnable but waiting for one. < 0 when not measured.
  double server_run_ms = -1, server_wait_ms = -1;
  // The other process that used the most CPU during the request: "comm (pid) N ms".
  std::string busiest_other;
  int first_token = -1;
  std::string first_probs;
};

struct Row {
  std::string workload;
  int index = 0;
  std::vector<int> tokens;
  std::array<std::vector<Sample>, kNumConfigs> samples;

  std::optional<double> MedianTtft(Config c) const;
  // Median timings.cache_n of the configuration's samples that ran.
  std::optional<int> MedianCached(Config c) const;
  // Median tokens restored by kvtier (0 for the configurations without kvtier).
  std::optional<int> MedianKvtierLoaded(Config c) const;
  // Every kvtier answer (host, disk, kvtierd) has the first token and top-n probabilities
  // of plain llama-server's answer from the same restored prefix: one of its cache hits
  // `reference` (kServerCache or kSlotCache: ExactReference) on this prompt that reused
  // all but the last token (any repeat) when kvtier restored all but the last token
  // (chunks and tail), else its cold answer of the same repeat, and, when kvtier restored
  // all but the last 4 tokens (a recurrent or hybrid model's tail), also one of those
  // cache hits that restored as many. nullopt when nothing compares.
  std::optional<bool> Identical(Config reference) const;
  // Whether plain llama-server's RAM-cache hits of all but the last token give the answer
  // of one of its slot-cache hits of the same tokens; nullopt when either did not run.
  std::optional<bool> RamCacheEqualsSlotCache() const;
  // Median over the repeats that ran both of TTFT(a) / TTFT(b) of the same repeat (each
  // pair ran back to back, so slow drifts of the machine cancel).
  std::optional<double> MedianPairedRatio(Config a, Config b) const;
};

// One evidence line (JSON) for a sample: its first token, probabilities and their hash.
std::string EvidenceLine(const Row& row, Config c, int repeat, const Sample& s);

struct Report {
  std::vector<Row> rows;
  std::string kvtierd_note;  // why the kvtierd column did not run ("" = it ran)
  // Measured requests, and those that started while another process was still busy
  // (WaitForOtherProcessesIdle gave up): a sign that the machine was not quiet.
  int measured_requests = 0, started_busy = 0;
  int chunk_tokens = 256;  // what counts as loaded from kvtier: whole chunks
  // Whether the run's workload has what some targets measure (--quick has no >= 4k
  // prefix, --workload document no no-reuse prompts): a target it does not have is
  // printed SKIP, not missed.
  bool long_prefix_in_workload = true;
  bool no_reuse_in_workload = true;
  // The model's memory kind from kvtier-llama-server's GET /kvtier ("" = unknown): picks
  // the exact-reuse reference (ExactReference).
  std::string memory;
  // The rest of the kvtier server's GET /kvtier at start-up (--json rows): its state
  // ("ready", "refused", ""= unknown), the refusal's reason, and the KV payload bytes of
  // one token (-1 = unknown; a recurrent model's is 0: its records are snapshots alone).
  std::string kvtier_state, kvtier_refused;
  int64_t bytes_per_token = -1;
  int64_t snapshot_bytes = -1;  // one boundary snapshot per chunk record (0: none; -1: unknown)
  double seconds = 0;

  // Prints the table and targets (stdout; stderr when `json`), writes <run_dir>/ttft.csv
  // and <run_dir>/ttft.png. Returns the exit code: 3 when an answer through kvtier
  // differed from plain llama-server's (Row::Identical with ExactReference(memory)), 1
  // when `check` and a target was missed (or not measured although the workload has
  // what it measures), else 0.
  int Print(const std::string& run_dir, bool json, bool check) const;
};

}  // namespace kvt::llamacpp::demo

#endif  // LLAMACPP_DEMO_SERVER_DEMO_REPORT_H_
