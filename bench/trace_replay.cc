// kvtier-trace-replay: a Mooncake trace replayed through real engines (issue 25, "Trace
// replay through the engines").
//
// Each of the trace's 512-token hash ids becomes a fixed block of --block-tokens token ids
// (a hash of the id and the position, inside the model's vocabulary), so two requests
// share exactly the prefix blocks the trace says they share; a request's last block is
// cut to its share of input_length. Every request is sent as token ids to llama-server's
// streamed `/completion` (greedy, --n-predict tokens) with cpp-httplib (Debian's
// libcpp-httplib-dev), and TTFT is measured on the client: from sending the request to
// the first streamed token. Arrivals follow the trace's timestamps divided by
// --time-scale (open loop); at most --concurrency requests are in flight; a request that
// starts more than 100 ms after its arrival because all slots were busy is counted late.
//
// The same request stream runs through each configuration, one after the other, each on
// fresh processes:
//   plain-affinity   N plain llama-servers (kvtier-llama-server without kvtier flags),
//                    each with its own RAM prompt cache (--cache-ram), a request routed
//                    by a hash of its --affinity-block'th block (a load balancer with
//                    session affinity; block 0 is the system prompt every conversation
//                    request shares, so the default is block 1);
//   plain-random     the same servers, each request to a random one (seeded);
//   kvtier-affinity  N kvtier-llama-servers on one kvtierd (host and disk tiers of
//                    --kvtierd-host-mib / --kvtierd-disk-mib, small enough to evict), the
//                    same --cache-ram, the same routing as plain-affinity;
//   kvtier-random    the same with random routing: sharing through kvtierd is what
//                    makes random routing work;
//   vllm-prefix      N vLLM OpenAI servers (python -m vllm.entrypoints.openai.api_server
//                    of --vllm-python), each with its own prefix cache, affinity routing;
//   vllm-kvtier      the same with KVTierConnector (kv_role kv_both) on one kvtierd,
//                    vLLM's prefix cache on above it; vllm-prefix-random and
//                    vllm-kvtier-random route at random (trace_replay_vllm.h).
// vLLM gets the prompt as token ids on its streamed /v1/completions (return_token_ids,
// usage in the stream); TTFT is measured on the client alike, and the reused tokens are
// usage.prompt_tokens_details.cached_tokens (vLLM's prefix cache and kvtier's loads).
// Reported per configuration: TTFT p50/p90/p99, prompt tokens computed (timings.prompt_n)
// against reused (the rest of the prompt), kvtier's loaded tokens and hits (each server's
// /kvtier), kvtierd's CPU seconds and peak RSS, errors and late requests. Every answer
// (its greedy tokens) is compared with its reference's answer to the same request: a
// kvtier configuration's is the one without kvtier on the same engine and routing.
// Targets (issue 25), printed PASS/FAIL: kvtier reuses no fewer prompt tokens than plain
// with the same routing; kvtier-random's p50 TTFT <= 0.6 x plain-random's and
// plain-affinity's (plain servers get equal total RAM: --plain-cache-ram-mib); no errors;
// identical answers; kvtierd's RSS within its budget. Exit 0 unless a configuration
// could not run (a benchmark reports).
#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "kvtierd_process.h"
#include "nlohmann/json.hpp"
#include "server_client.h"
#include "server_process.h"
#include "trace_file.h"
#include "trace_replay_vllm.h"

#ifndef KVT_BENCH_TRACES_DIR
#define KVT_BENCH_TRACES_DIR "bench/traces"
#endif

namespace kvt::bench {
namespace {

using Clock = std::chrono::steady_clock;
using llamacpp::demo::Completion;
using llamacpp::demo::KvtierdProcess;
using llamacpp::demo::KvtierdProcessOptions;
using llamacpp::demo::ServerClient;
using llamacpp::demo::ServerProcess;
// kvtierd's memory beyond its configured bounds: code, gRPC, the RocksDB index, connection
// buffers (docs/daemon.md "Memory").
constexpr uint64_t kKvtierdFixedBytes = 128ull << 20;

struct Flags {
  std::string trace = "conversation";
  std::string trace_file;  // overrides --trace
  size_t max_requests = 200;
  size_t first_request = 0;  // requests of the trace skipped before the replayed slice
  uint32_t block_tokens = 32;
  double time_scale = 6;  // 1 h of trace in 10 min
  int concurrency = 4;
  int servers = 2;
  int slots = 2;                 // -np of each server
  int cache_ram_mib = 64;        // --cache-ram of a kvtier server
  int plain_cache_ram_mib = -1;  // of a plain one (-1: equal total RAM, PlainCacheRamMib)
  int threads = 1;
  int n_predict = 4;
  int chunk_tokens = 64;
  int affinity_block = 1;
  uint64_t kvtierd_host_mib = 16;
  uint64_t kvtierd_disk_mib = 64;
  std::string configs = "plain-affinity,plain-random,kvtier-affinity,kvtier-random";
  std::string model;
  std::string server_bin;
  std::string kvtierd_bin;
  std::string make_gguf_bin;
  bool model_generated = false;  // --model was made here (the tiny GGUF)
  std::string vllm_python;       // the vLLM venv's python (vllm-* configurations)
  std::string vllm_model;        // model directory ("" = a tiny one made here)
  int vllm_kv_blocks = 0;        // --num-gpu-blocks-override (0: vLLM sizes its KV cache)
  int vllm_kvcache_gib = 1;      // VLLM_CPU_KVCACHE_SPACE
  int vllm_start_timeout_s = 600;
  std::string dir;  // run folder (kept): logs, CSV
  std::string csv;  // per-request CSV ("" = <dir>/replay.csv)
  bool json = false;
  uint32_t seed = 1;

  // A plain llama-server's --cache-ram: by default kvtier's plus its share of kvtierd's
  // host tier, so that plain and kvtier configurations hold equal total RAM for KV (the
  // disk tier is kvtier's own).
  int PlainCacheRamMib() const {
    if (plain_cache_ram_mib >= 0) return plain_cache_ram_mib;
    return cache_ram_mib + static_cast<int>((kvtierd_host_mib + servers - 1) / servers);
  }
};

struct Answer {
  bool ok = false;
  std::string error;
  double ttft_ms = 0;
  double start_delay_ms = 0;  // start - scheduled arrival
  int prompt_tokens = 0;
  int prompt_n = 0;  // tokens the server computed
  std::vector<int> tokens;
  int server = 0;
};

struct ConfigResult {
  std::string name;
  std::vector<Answer> answers;
  uint64_t loaded_tokens = 0, kvtier_hits = 0, stored_chunks = 0, cost_skips = 0;
  uint64_t load_bytes = 0, stored_bytes = 0;  // stored_bytes: llama-server only
  uint64_t kvtier_misses = 0;                 // llama-server only, as the two below
  double kvtier_load_s = 0;          // servers' time restoring from kvtier (/kvtier load_seconds)
  double kvtier_prompt_start_s = 0;  // time kvtier took on requests' paths before prefill
  double kvtier_store_s = 0;         // task-loop time taking chunks for storing
  double kvtierd_cpu_s = -1;
  uint64_t kvtierd_peak_rss_kib = 0;
  // Its peak RSS less the shared memory it maps (the engines' shm regions, VmRSS - RssShmem
  // sampled together), and the budget that must hold: host tier + in-flight + write-back
  // queue + kKvtierdFixedBytes.
  uint64_t kvtierd_peak_private_kib = 0;
  uint64_t kvtierd_budget_kib = 0;
  double seconds = 0;
  size_t errors() const {
    return static_cast<size_t>(
        std::count_if(answers.begin(), answers.end(), [](const Answer& a) { return !a.ok; }));
  }
  size_t late() const {
    return static_cast<size_t>(std::count_if(
        answers.begin(), answers.end(), [](const Answer& a) { return a.start_delay_ms > 100; }));
  }
  uint64_t prompt_tokens() const {
    uint64_t n = 0;
    for (const Answer& a : answers) n += a.prompt_tokens;
    return n;
  }
  uint64_t computed_tokens() const {
    uint64_t n = 0;
    for (const Answer& a : answers) n += a.ok ? a.prompt_n : a.prompt_tokens;
    return n;
  }
  uint64_t reused_tokens() const { return prompt_tokens() - computed_tokens(); }
  double TtftPercentile(double p) const {
    std::vector<double> v;
    for (const Answer& a : answers)
      if (a.ok) v.push_back(a.ttft_ms);
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const size_t i = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size())));
    return v[std::min(v.size() - 1, i > 0 ? i - 1 : 0)];
  }
};

uint64_t Mix(uint64_t x) {  // splitmix64
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The prompt of request `r`: block b's tokens are a function of (block id, position) only.
std::vector<int> PromptOf(const Trace& trace, const TraceRequest& r, uint32_t block_tokens,
                          int vocab_lo, int vocab_n) {
  std::vector<int> p;
  for (size_t i = 0; i < r.blocks.size(); ++i) {
    uint32_t n = block_tokens;
    if (i + 1 == r.blocks.size()) {  // the last block: its share of input_length
      const uint64_t rest = r.input_tokens > i * trace.block_tokens
                                ? r.input_tokens - i * trace.block_tokens
                                : trace.block_tokens;
      n = static_cast<uint32_t>(std::clamp<uint64_t>(
          (std::min<uint64_t>(rest, trace.block_tokens) * block_tokens + trace.block_tokens - 1) /
              trace.block_tokens,
          1, block_tokens));
    }
    for (uint32_t t = 0; t < n; ++t) {
      p.push_back(vocab_lo + static_cast<int>(Mix((uint64_t{r.blocks[i]} << 20) ^ t) %
                                              static_cast<uint64_t>(vocab_n)));
    }
  }
  return p;
}

// One streamed /completion: greedy, `n_predict` tokens, TTFT on the client (the demo's
// ServerClient, cpp-httplib).
Answer Complete(int port, const std::vector<int>& prompt, int n_predict) {
  Answer a;
  a.prompt_tokens = static_cast<int>(prompt.size());
  absl::StatusOr<Completion> c = ServerClient("127.0.0.1", port)
                                     .Complete(prompt, /*cache_prompt=*/true, n_predict,
                                               /*n_probs=*/0);
  if (!c.ok()) {
    a.error = std::string(c.status().message());
    return a;
  }
  a.ok = true;
  a.ttft_ms = c->ttft_ms;
  a.prompt_n = c->prompt_n;
  a.tokens = std::move(c->tokens);
  return a;
}

// One streamed /v1/completions to vLLM (trace_replay_vllm.h): the prompt tokens computed
// are those not reported as cached.
Answer CompleteVllm(int port, const std::string& model, const std::vector<int>& prompt,
                    int n_predict) {
  Answer a;
  a.prompt_tokens = static_cast<int>(prompt.size());
  absl::StatusOr<VllmCompletion> c = VllmComplete(port, model, prompt, n_predict);
  if (!c.ok()) {
    a.error = std::string(c.status().message());
    return a;
  }
  a.ok = true;
  a.ttft_ms = c->ttft_ms;
  a.prompt_n = std::max(0, c->prompt_tokens - c->cached_tokens);
  a.tokens = std::move(c->tokens);
  return a;
}

// kvtier's counters on a vLLM server's /metrics (vllm:kvtier_*_total, summed over its
// label sets). vLLM publishes the connector's stats after engine steps, so they are read
// until two reads a second apart agree (at most ~15 s).
std::map<std::string, double> VllmKvtierCounters(int port) {
  std::map<std::string, double> last;
  for (int i = 0; i < 15; ++i) {
    auto t = GetText(port, "/metrics");
    if (!t.ok()) return last;
    auto now = SumPrometheusSamples(*t);
    if (i > 0 && now == last) return now;
    last = std::move(now);
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  return last;
}

uint64_t ProcStatusKiB(pid_t pid, const char* field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  const size_t n = std::strlen(field);
  while (std::getline(in, line))
    if (line.compare(0, n, field) == 0) return std::strtoull(line.c_str() + n, nullptr, 10);
  return 0;
}

double ProcCpuSeconds(pid_t pid) {  // user + system, /proc/<pid>/stat fields 14 and 15
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = s.rfind(')');
  if (close == std::string::npos) return -1;
  std::vector<std::string> f = absl::StrSplit(s.substr(close + 2), ' ');
  if (f.size() < 13) return -1;
  return (std::stod(f[11]) + std::stod(f[12])) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

class Replay {
 public:
  Replay(Flags f, Trace trace) : f_(std::move(f)), trace_(std::move(trace)) {}

  absl::StatusOr<ConfigResult> Run(const std::string& config) {
    absl::StatusOr<ConfigKind> kind = ParseConfigName(config);
    if (!kind.ok()) return kind.status();
    const bool kvtier = kind->kvtier;
    const bool random = kind->random;
    const bool vllm = kind->engine == Engine::kVllm;
    ConfigResult out;
    out.name = config;
    std::unique_ptr<KvtierdProcess> daemon;
    if (kvtier) {
      KvtierdProcessOptions ko;
      ko.binary = f_.kvtierd_bin;
      ko.run_dir = f_.dir + "/" + config + "-kvtierd";
      ko.data_dir = ko.run_dir + "/data";
      ko.host_capacity_bytes = f_.kvtierd_host_mib << 20;
      ko.disk_file_bytes = std::min<uint64_t>(f_.kvtierd_disk_mib, 64) << 20;
      ko.disk_capacity_bytes =
          (f_.kvtierd_disk_mib << 20) / ko.disk_file_bytes * ko.disk_file_bytes;
      // Bounded explicitly, so that kvtierd's RSS has a budget to check (docs/daemon.md
      // "Memory"): the smallest each may be, one largest record.
      ko.max_inflight_bytes = ko.disk_file_bytes;
      ko.writeback_queue_bytes = ko.disk_file_bytes;
      out.kvtierd_budget_kib = (ko.host_capacity_bytes + ko.max_inflight_bytes +
                                ko.writeback_queue_bytes + kKvtierdFixedBytes) >>
                               10;
      auto d = KvtierdProcess::Start(ko);
      if (!d.ok()) return d.status();
      daemon = std::move(*d);
    }
    std::vector<std::unique_ptr<ServerProcess>> servers;
    for (int s = 0; vllm && s < f_.servers; ++s) {
      VllmServerOptions vo;
      vo.model = f_.vllm_model;
      vo.max_model_len = MaxPromptTokens();
      vo.max_num_seqs = f_.slots;
      vo.chunk_tokens = f_.chunk_tokens;
      vo.kv_blocks = f_.vllm_kv_blocks;
      vo.kvtierd = kvtier ? daemon->target() : "";
      vo.seed = f_.seed;
      auto p = ServerProcess::Start(f_.vllm_python, VllmServerArgs(vo),
                                    absl::StrFormat("%s/%s-server-%d.log", f_.dir, config, s),
                                    std::chrono::seconds(f_.vllm_start_timeout_s));
      if (!p.ok()) return p.status();
      servers.push_back(std::move(*p));
    }
    for (int s = 0; !vllm && s < f_.servers; ++s) {
      std::vector<std::string> args = {
          "-m",          f_.model,
          "-t",          std::to_string(f_.threads),
          "-tb",         std::to_string(f_.threads),
          "-c",          std::to_string(f_.slots * MaxPromptTokens()),
          "-np",         std::to_string(f_.slots),
          "--cache-ram", std::to_string(kvtier ? f_.cache_ram_mib : f_.PlainCacheRamMib()),
          "--no-warmup"};
      // Every configuration runs kvtier-llama-server's -ub (the chunk size): with flash
      // attention the last bits of the KV follow the ubatch split, so a plain server at
      // llama-server's default -ub (512) computes other greedy tokens on near-ties (a
      // tiny random model has many), with or without kvtier.
      args.insert(args.end(), {"-ub", std::to_string(f_.chunk_tokens)});
      // The generated tiny model says it was trained on 8,192 positions, and llama-server
      // caps a slot's context there; at the trace's 512-token blocks a prompt is longer.
      // Its weights are random: later positions are as meaningful as any.
      if (f_.model_generated && MaxPromptTokens() > 8192) {
        args.insert(args.end(), {"--override-kv",
                                 absl::StrCat("llama.context_length=int:", MaxPromptTokens())});
      }
      if (kvtier) {
        args.insert(args.end(), {"--kvtier-daemon", daemon->target(), "--kvtier-chunk-tokens",
                                 std::to_string(f_.chunk_tokens)});
      }
      auto p = ServerProcess::Start(f_.server_bin, args,
                                    absl::StrFormat("%s/%s-server-%d.log", f_.dir, config, s));
      if (!p.ok()) return p.status();
      servers.push_back(std::move(*p));
    }
    int& vocab_lo = vocab_[vllm].first;
    int& vocab_n = vocab_[vllm].second;
    if (vocab_n == 0 && vllm) {
      std::ifstream in(f_.vllm_model + "/config.json");
      const auto cfg = nlohmann::json::parse(in, nullptr, false);
      const int n_vocab = cfg.is_object() ? cfg.value("vocab_size", 1024) : 1024;
      vocab_lo = std::min(100, n_vocab / 4);
      vocab_n = std::max(1, n_vocab - vocab_lo - 16);
    }
    if (vocab_n == 0) {
      auto m = ServerClient("127.0.0.1", servers[0]->port()).GetJson("/v1/models");
      int n_vocab = 32000;
      if (m.ok() && m->contains("data") && !(*m)["data"].empty() &&
          (*m)["data"][0].contains("meta")) {
        n_vocab = (*m)["data"][0]["meta"].value("n_vocab", n_vocab);
      }
      // Ids well inside the vocabulary, past the special tokens at its start.
      vocab_lo = std::min(100, n_vocab / 4);
      vocab_n = std::max(1, n_vocab - vocab_lo - 16);
    }
    // Routing, fixed before the run so every configuration of a kind routes alike.
    std::mt19937 rng(f_.seed);
    std::vector<int> route(trace_.requests.size());
    for (size_t i = 0; i < route.size(); ++i) {
      const auto& b = trace_.requests[i].blocks;
      const uint32_t key = b.empty() ? 0 : b[std::min<size_t>(f_.affinity_block, b.size() - 1)];
      route[i] = random ? static_cast<int>(rng() % f_.servers)
                        : static_cast<int>(Mix(key) % static_cast<uint64_t>(f_.servers));
    }
    out.answers.resize(trace_.requests.size());
    std::atomic<size_t> next{0};
    std::atomic<uint64_t> peak_rss{0}, peak_private{0};
    std::atomic<bool> running{true};
    const double cpu0 = daemon ? ProcCpuSeconds(daemon->pid()) : -1;
    std::thread sampler([&] {
      while (daemon && running.load()) {
        const uint64_t rss = ProcStatusKiB(daemon->pid(), "VmRSS:");
        const uint64_t shmem = ProcStatusKiB(daemon->pid(), "RssShmem:");
        peak_rss = std::max<uint64_t>(peak_rss.load(), rss);
        peak_private = std::max<uint64_t>(peak_private.load(), rss - std::min(rss, shmem));
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
    const int64_t t0_ms = trace_.requests.empty() ? 0 : trace_.requests[0].timestamp_ms;
    const auto start = Clock::now();
    std::vector<std::thread> workers;
    for (int w = 0; w < f_.concurrency; ++w) {
      workers.emplace_back([&] {
        for (size_t i; (i = next.fetch_add(1)) < trace_.requests.size();) {
          const TraceRequest& r = trace_.requests[i];
          const auto due = start + std::chrono::microseconds(static_cast<int64_t>(
                                       (r.timestamp_ms - t0_ms) * 1000.0 / f_.time_scale));
          std::this_thread::sleep_until(due);
          const double delay =
              std::chrono::duration<double, std::milli>(Clock::now() - due).count();
          std::vector<int> prompt = PromptOf(trace_, r, f_.block_tokens, vocab_lo, vocab_n);
          Answer a =
              vllm ? CompleteVllm(servers[route[i]]->port(), f_.vllm_model, prompt, f_.n_predict)
                   : Complete(servers[route[i]]->port(), prompt, f_.n_predict);
          a.start_delay_ms = delay;
          a.server = route[i];
          out.answers[i] = std::move(a);
        }
      });
    }
    for (auto& w : workers) w.join();
    out.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    running = false;
    sampler.join();
    if (daemon) {
      out.kvtierd_cpu_s = ProcCpuSeconds(daemon->pid()) - cpu0;
      out.kvtierd_peak_rss_kib = peak_rss.load();
      out.kvtierd_peak_private_kib = peak_private.load();
    }
    if (kvtier && vllm) {
      for (auto& s : servers) {
        auto m = VllmKvtierCounters(s->port());
        out.loaded_tokens += static_cast<uint64_t>(m["vllm:kvtier_lookup_load_tokens_total"]);
        out.kvtier_hits += static_cast<uint64_t>(m["vllm:kvtier_load_chunks_ok_total"]);
        out.stored_chunks += static_cast<uint64_t>(m["vllm:kvtier_store_chunks_put_total"]);
        out.load_bytes += static_cast<uint64_t>(m["vllm:kvtier_load_bytes_total"]);
      }
    } else if (kvtier) {
      for (auto& s : servers) {
        auto k = ServerClient("127.0.0.1", s->port()).GetJson("/kvtier");
        if (!k.ok()) continue;
        out.loaded_tokens += k->value("loaded_tokens", uint64_t{0});
        out.kvtier_hits += k->value("hits", uint64_t{0});
        out.kvtier_misses += k->value("misses", uint64_t{0});
        out.kvtier_load_s += k->value("load_seconds", 0.0);
        out.kvtier_prompt_start_s += k->value("prompt_start_seconds", 0.0);
        out.kvtier_store_s += k->value("store_seconds", 0.0);
        out.stored_chunks += k->value("stored_chunks", uint64_t{0});
        out.cost_skips += k->value("cost_skips", uint64_t{0});
        out.load_bytes += k->value("load_bytes", uint64_t{0});
        out.stored_bytes += k->value("stored_chunks", uint64_t{0}) *
                            k->value("chunk_tokens", uint64_t{0}) *
                            k->value("bytes_per_token", uint64_t{0});
      }
    }
    servers.clear();  // stop the servers before kvtierd
    return out;
  }

 private:
  int MaxPromptTokens() const {
    size_t m = 0;
    for (const auto& r : trace_.requests) m = std::max(m, r.blocks.size());
    return static_cast<int>(m * f_.block_tokens) + f_.n_predict + 64;
  }

  Flags f_;
  Trace trace_;
  std::map<bool, std::pair<int, int>> vocab_;  // vLLM? -> (lowest id, ids) of prompts
};

int Main(int argc, char** argv) {
  Flags f;
  CLI::App app{"A Mooncake trace replayed through plain and kvtier llama-servers: TTFT"};
  app.option_defaults()->always_capture_default();  // --help shows every default
  app.add_option("--trace", f.trace, "conversation | synthetic (bench/traces/)");
  app.add_option("--trace-file", f.trace_file, "a .jsonl(.gz) trace instead of --trace");
  app.add_option("--max-requests", f.max_requests, "the first N requests (0 = all)");
  app.add_option(
      "--first-request", f.first_request,
      "skip the trace's first K requests; arrivals restart at 0 (a later, busier slice)");
  app.add_option("--block-tokens", f.block_tokens, "tokens per trace block (the trace's 512)")
      ->check(CLI::Range(1, 512));
  app.add_option("--time-scale", f.time_scale, "trace time / replay time (6: 1 h in 10 min)")
      ->check(CLI::PositiveNumber);
  app.add_option("--concurrency", f.concurrency, "requests in flight at most")
      ->check(CLI::Range(1, 256));
  app.add_option("--servers", f.servers, "servers per configuration")->check(CLI::Range(1, 16));
  app.add_option("--slots", f.slots, "-np of each server")->check(CLI::Range(1, 64));
  app.add_option("--cache-ram-mib", f.cache_ram_mib, "--cache-ram of every kvtier server, MiB")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--plain-cache-ram-mib", f.plain_cache_ram_mib,
                 "--cache-ram of every plain server, MiB (default: --cache-ram-mib + "
                 "--kvtierd-host-mib / --servers, equal total RAM)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--threads", f.threads, "-t/-tb of every server")->check(CLI::Range(1, 256));
  app.add_option("--n-predict", f.n_predict, "greedy tokens per answer")->check(CLI::Range(1, 64));
  app.add_option("--chunk-tokens", f.chunk_tokens, "--kvtier-chunk-tokens")
      ->check(CLI::Range(16, 8192));
  app.add_option("--affinity-block", f.affinity_block,
                 "the block whose hash routes a request with affinity (0 = the first)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--kvtierd-host-mib", f.kvtierd_host_mib, "kvtierd's host tier, MiB")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--kvtierd-disk-mib", f.kvtierd_disk_mib, "kvtierd's disk tier, MiB")
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--configs", f.configs,
                 "comma-separated: plain-affinity, plain-random, kvtier-affinity, kvtier-random, "
                 "vllm-prefix, vllm-prefix-random, vllm-kvtier, vllm-kvtier-random");
  app.add_option("--model", f.model, "GGUF model (default: a tiny one made here)");
  app.add_option("--server", f.server_bin, "kvtier-llama-server binary (llama configurations)");
  app.add_option("--kvtierd", f.kvtierd_bin, "kvtierd binary");
  app.add_option("--make-gguf", f.make_gguf_bin, "kvtier-make-gguf binary (for the tiny model)");
  app.add_option("--vllm-python", f.vllm_python,
                 "python of the vLLM venv (bash scripts/install-vllm.sh | tail -1), for vllm-*");
  app.add_option("--vllm-model", f.vllm_model,
                 "vLLM model directory (default: a tiny one, python -m kvtier.make_model)");
  app.add_option("--vllm-kv-blocks", f.vllm_kv_blocks,
                 "vLLM's KV cache in blocks (--num-gpu-blocks-override; 0 = vLLM's sizing)")
      ->check(CLI::Range(0, 1 << 24));
  app.add_option("--vllm-kvcache-gib", f.vllm_kvcache_gib, "VLLM_CPU_KVCACHE_SPACE, GiB")
      ->check(CLI::Range(1, 1024));
  app.add_option("--vllm-start-timeout", f.vllm_start_timeout_s,
                 "seconds a vLLM server may take to start")
      ->check(CLI::Range(10, 3600));
  app.add_option("--dir", f.dir, "run folder, kept (default: a new one in /tmp)");
  app.add_option("--csv", f.csv, "per-request CSV (default <dir>/replay.csv)");
  app.add_flag("--json", f.json, "one JSON object per configuration, then the targets");
  app.add_option("--seed", f.seed, "random routing's seed");
  CLI11_PARSE(app, argc, argv);

  std::vector<std::string> configs = absl::StrSplit(f.configs, ',', absl::SkipEmpty());
  bool any_vllm = false;
  for (const auto& c : configs) {
    absl::StatusOr<ConfigKind> kind = ParseConfigName(c);
    if (!kind.ok()) {
      std::fprintf(stderr, "kvtier-trace-replay: --configs: %s\n",
                   std::string(kind.status().message()).c_str());
      return 2;
    }
    if (kind->engine == Engine::kLlama && f.server_bin.empty()) {
      std::fprintf(stderr, "kvtier-trace-replay: %s needs --server\n", c.c_str());
      return 2;
    }
    if (kind->kvtier && f.kvtierd_bin.empty()) {
      std::fprintf(stderr, "kvtier-trace-replay: %s needs --kvtierd\n", c.c_str());
      return 2;
    }
    if (kind->engine == Engine::kVllm) {
      any_vllm = true;
      if (f.vllm_python.empty()) {
        std::fprintf(stderr,
                     "kvtier-trace-replay: %s needs --vllm-python (the vLLM venv's python: "
                     "bash scripts/install-vllm.sh | tail -1)\n",
                     c.c_str());
        return 2;
      }
    }
  }
  if (configs.empty()) {
    std::fprintf(stderr, "kvtier-trace-replay: --configs is empty\n");
    return 2;
  }
  if (f.dir.empty()) {
    std::string t = "/tmp/kvtier-trace-replay-XXXXXX";
    if (mkdtemp(t.data()) == nullptr) return 1;
    f.dir = t;
  } else {
    std::filesystem::create_directories(f.dir);
  }
  const std::string path =
      f.trace_file.empty() ? std::string(KVT_BENCH_TRACES_DIR) + "/" + f.trace + "_trace.jsonl.gz"
                           : f.trace_file;
  auto trace = LoadTrace(path, f.trace, f.max_requests == 0 ? 0 : f.first_request + f.max_requests);
  if (!trace.ok()) {
    std::fprintf(stderr, "kvtier-trace-replay: %s\n", trace.status().ToString().c_str());
    return 2;
  }
  if (f.first_request > 0) {
    // A slice starting later in the trace: nothing of the skipped requests is cached, so
    // only what the slice itself repeats can be reused.
    if (f.first_request >= trace->requests.size()) {
      std::fprintf(stderr, "kvtier-trace-replay: --first-request %zu: the trace has %zu requests\n",
                   f.first_request, trace->requests.size());
      return 2;
    }
    trace->requests.erase(trace->requests.begin(),
                          trace->requests.begin() + static_cast<ptrdiff_t>(f.first_request));
    const int64_t t0 = trace->requests.front().timestamp_ms;
    std::unordered_set<uint32_t> distinct;
    trace->total_tokens = trace->total_blocks = 0;
    for (auto& r : trace->requests) {
      r.timestamp_ms -= t0;
      distinct.insert(r.blocks.begin(), r.blocks.end());
      trace->total_tokens += r.input_tokens;
      trace->total_blocks += r.blocks.size();
    }
    trace->distinct_blocks = static_cast<uint32_t>(distinct.size());
  }
  if (any_vllm) {
    // The vLLM servers' environment (they inherit it): offline, CPU KV cache size, threads,
    // kvtier's Python package and libkvtier.so.
    setenv("HF_HUB_OFFLINE", "1", 0);
    setenv("TOKENIZERS_PARALLELISM", "false", 0);
    setenv("VLLM_CPU_KVCACHE_SPACE", std::to_string(f.vllm_kvcache_gib).c_str(), 1);
    setenv("OMP_NUM_THREADS", std::to_string(f.threads).c_str(), 0);
    const char* pp = std::getenv("PYTHONPATH");
    const std::string pythonpath =
        std::string(KVT_VLLM_PYTHONPATH) + (pp != nullptr && *pp ? std::string(":") + pp : "");
    setenv("PYTHONPATH", pythonpath.c_str(), 1);
    if (std::getenv("KVTIER_LIB") == nullptr && std::string(KVT_KVTIER_LIB).size() > 0 &&
        std::filesystem::exists(KVT_KVTIER_LIB)) {
      setenv("KVTIER_LIB", KVT_KVTIER_LIB, 1);
    }
    if (f.vllm_model.empty()) {
      // A prompt, its answer and some slack must fit the model's positions.
      size_t blocks = 0;
      for (const auto& r : trace->requests) blocks = std::max(blocks, r.blocks.size());
      const size_t max_len = std::max<size_t>(4096, blocks * f.block_tokens + f.n_predict + 64);
      f.vllm_model = f.dir + "/vllm-tiny";
      const std::string cmd = f.vllm_python + " -m kvtier.make_model --preset tiny --out " +
                              f.vllm_model + " --max-len " + std::to_string(max_len) +
                              " > /dev/null";
      if (std::system(cmd.c_str()) != 0) {
        std::fprintf(stderr, "kvtier-trace-replay: '%s' failed\n", cmd.c_str());
        return 1;
      }
    }
  }
  const bool any_llama = std::any_of(configs.begin(), configs.end(), [](const std::string& c) {
    return ParseConfigName(c)->engine == Engine::kLlama;
  });
  if (f.model.empty() && any_llama) {
    if (f.make_gguf_bin.empty()) {
      std::fprintf(stderr, "kvtier-trace-replay: give --model or --make-gguf\n");
      return 2;
    }
    f.model = f.dir + "/tiny.gguf";
    f.model_generated = true;
    const std::string cmd = f.make_gguf_bin + " --size tiny --out " + f.model + " > /dev/null";
    if (std::system(cmd.c_str()) != 0) {
      std::fprintf(stderr, "kvtier-trace-replay: '%s' failed\n", cmd.c_str());
      return 1;
    }
  }
  const double span_s =
      trace->requests.empty()
          ? 0
          : (trace->requests.back().timestamp_ms - trace->requests.front().timestamp_ms) / 1e3;
  if (!f.json) {
    std::printf(
        "%s trace%s: %zu requests over %.0f s (replayed in %.0f s), %u distinct blocks of %u "
        "tokens -> %u tokens; %d servers x %d slots, --cache-ram %d MiB (plain: %d MiB), "
        "concurrency %d; kvtierd host %llu MiB + disk %llu MiB, chunks of %d tokens; run folder "
        "%s\n",
        f.trace.c_str(),
        f.first_request > 0 ? absl::StrCat(" from request ", f.first_request).c_str() : "",
        trace->requests.size(), span_s, span_s / f.time_scale, trace->distinct_blocks,
        trace->block_tokens, f.block_tokens, f.servers, f.slots, f.cache_ram_mib,
        f.PlainCacheRamMib(), f.concurrency, static_cast<unsigned long long>(f.kvtierd_host_mib),
        static_cast<unsigned long long>(f.kvtierd_disk_mib), f.chunk_tokens, f.dir.c_str());
    std::printf("%-16s %9s %9s %9s %9s %9s %9s %9s %7s %6s %5s %9s %9s\n", "config", "p50 ms",
                "p90 ms", "p99 ms", "prompt", "computed", "reused", "kvt-load", "errors", "late",
                "diff", "kvd cpu s", "kvd MiB");
  }
  Replay replay(f, *trace);
  std::vector<ConfigResult> results;
  for (const auto& c : configs) {
    auto r = replay.Run(c);
    if (!r.ok()) {
      std::fprintf(stderr, "kvtier-trace-replay: %s: %s\n", c.c_str(),
                   r.status().ToString().c_str());
      return 1;
    }
    results.push_back(std::move(*r));
  }
  // Each configuration's answers against a reference: a kvtier configuration's is the plain
  // one with the same routing (the same requests meet the same slots' neighbours, so only
  // kvtier differs); any other's, the first configuration (plain-affinity by default). Two
  // routings may differ on a few near-ties with or without kvtier: with -np > 1 the last
  // bits of the KV follow the batch a prompt shared with other slots' tokens.
  auto reference_of = [&](const ConfigResult& r) -> const ConfigResult& {
    if (const std::string ref = ReferenceConfigName(r.name); !ref.empty()) {
      for (const auto& c : results)
        if (c.name == ref) return c;
    }
    for (const auto& c : results)  // else the first configuration on the same engine
      if (ParseConfigName(c.name)->engine == ParseConfigName(r.name)->engine) return c;
    return r;
  };
  auto differing = [&](const ConfigResult& r) {
    const ConfigResult& ref = reference_of(r);
    size_t n = 0;
    for (size_t i = 0; i < r.answers.size(); ++i) {
      if (r.answers[i].ok && ref.answers[i].ok && r.answers[i].tokens != ref.answers[i].tokens) ++n;
    }
    return n;
  };
  const std::string csv = f.csv.empty() ? f.dir + "/replay.csv" : f.csv;
  {
    std::ofstream out(csv);
    // same_answer: the greedy tokens equal the reference configuration's (reference_of;
    // 1/0, empty when either request failed).
    out << "config,request,arrival_s,server,prompt_tokens,computed_tokens,ttft_ms,ok,"
           "same_answer\n";
    const int64_t t0 = trace->requests.empty() ? 0 : trace->requests[0].timestamp_ms;
    for (const auto& r : results) {
      for (size_t i = 0; i < r.answers.size(); ++i) {
        const Answer& a = r.answers[i];
        const ConfigResult& ref = reference_of(r);
        out << r.name << "," << i << ","
            << (trace->requests[i].timestamp_ms - t0) / 1e3 / f.time_scale << "," << a.server << ","
            << a.prompt_tokens << "," << a.prompt_n << "," << a.ttft_ms << "," << (a.ok ? 1 : 0)
            << ",";
        if (a.ok && ref.answers[i].ok) out << (a.tokens == ref.answers[i].tokens ? 1 : 0);
        out << "\n";
      }
    }
  }
  for (const auto& r : results) {
    const size_t diff = differing(r);
    if (f.json) {
      const int cache_ram = r.name.starts_with("kvtier") ? f.cache_ram_mib : f.PlainCacheRamMib();
      nlohmann::json j = {{"mode", "trace-replay"},
                          {"trace", f.trace},
                          {"config", r.name},
                          {"requests", r.answers.size()},
                          {"servers", f.servers},
                          {"ttft_p50_ms", r.TtftPercentile(0.5)},
                          {"ttft_p90_ms", r.TtftPercentile(0.9)},
                          {"ttft_p99_ms", r.TtftPercentile(0.99)},
                          {"prompt_tokens", r.prompt_tokens()},
                          {"computed_tokens", r.computed_tokens()},
                          {"reused_tokens", r.reused_tokens()},
                          {"kvtier_loaded_tokens", r.loaded_tokens},
                          {"kvtier_hits", r.kvtier_hits},
                          {"kvtier_stored_chunks", r.stored_chunks},
                          {"kvtier_cost_skips", r.cost_skips},
                          {"kvtier_load_bytes", r.load_bytes},
                          {"kvtier_misses", r.kvtier_misses},
                          {"kvtier_load_seconds", r.kvtier_load_s},
                          {"kvtier_prompt_start_seconds", r.kvtier_prompt_start_s},
                          {"kvtier_store_seconds", r.kvtier_store_s},
                          {"kvtier_stored_bytes", r.stored_bytes},
                          {"block_tokens", f.block_tokens},
                          {"chunk_tokens", f.chunk_tokens},
                          {"cache_ram_mib", cache_ram},
                          {"errors", r.errors()},
                          {"late", r.late()},
                          {"answers_differing", diff},
                          {"answers_reference", reference_of(r).name},
                          {"kvtierd_cpu_seconds", r.kvtierd_cpu_s},
                          {"kvtierd_peak_rss_kib", r.kvtierd_peak_rss_kib},
                          {"kvtierd_peak_private_kib", r.kvtierd_peak_private_kib},
                          {"kvtierd_budget_kib", r.kvtierd_budget_kib},
                          {"seconds", r.seconds},
                          {"csv", csv}};
      if (size_t e = r.errors(); e > 0) {
        for (const auto& a : r.answers)
          if (!a.ok) {
            j["first_error"] = a.error;
            break;
          }
      }
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("%-16s %9.1f %9.1f %9.1f %9llu %9llu %9llu %9llu %7zu %6zu %5zu %9.2f %9.1f\n",
                  r.name.c_str(), r.TtftPercentile(0.5), r.TtftPercentile(0.9),
                  r.TtftPercentile(0.99), static_cast<unsigned long long>(r.prompt_tokens()),
                  static_cast<unsigned long long>(r.computed_tokens()),
                  static_cast<unsigned long long>(r.reused_tokens()),
                  static_cast<unsigned long long>(r.loaded_tokens), r.errors(), r.late(), diff,
                  r.kvtierd_cpu_s, r.kvtierd_peak_rss_kib / 1024.0);
    }
  }
  if (!f.json) {
    // kvtier's own time on the requests' paths, from each server's /kvtier: what a hit
    // costs before its prefill starts (lookup + restore), against what it saved.
    for (const auto& r : results) {
      const uint64_t lookups = r.kvtier_hits + r.kvtier_misses;
      if (lookups == 0) continue;
      std::printf(
          "%s: kvtier on the requests' paths %.2f s over %llu lookups (%llu hits, %.1f ms "
          "per lookup), of which restoring %.2f s (%.1f ms per hit); storing on the task loop "
          "%.2f s (%.1f ms per request)\n",
          r.name.c_str(), r.kvtier_prompt_start_s, static_cast<unsigned long long>(lookups),
          static_cast<unsigned long long>(r.kvtier_hits), 1e3 * r.kvtier_prompt_start_s / lookups,
          r.kvtier_load_s,
          r.kvtier_hits > 0 ? 1e3 * r.kvtier_load_s / static_cast<double>(r.kvtier_hits) : 0.0,
          r.kvtier_store_s,
          r.answers.empty() ? 0.0 : 1e3 * r.kvtier_store_s / static_cast<double>(r.answers.size()));
    }
  }
  // Targets (issue 25).
  auto find = [&](const std::string& n) -> const ConfigResult* {
    for (const auto& r : results)
      if (r.name == n) return &r;
    return nullptr;
  };
  auto verdict = [&](const std::string& target, bool pass, const std::string& detail) {
    if (f.json) {
      std::printf(
          "%s\n",
          nlohmann::json(
              {{"mode", "trace-replay"}, {"target", target}, {"pass", pass}, {"detail", detail}})
              .dump()
              .c_str());
    } else {
      std::printf("  [%s] %s: %s\n", pass ? "PASS" : "FAIL", target.c_str(), detail.c_str());
    }
  };
  if (!f.json) std::printf("\ntargets:\n");
  for (const char* routing : {"affinity", "random"}) {
    const ConfigResult* p = find(absl::StrCat("plain-", routing));
    const ConfigResult* k = find(absl::StrCat("kvtier-", routing));
    if (p == nullptr || k == nullptr) continue;
    // The target's premise is kvtier under the same llama-server cache ("it may only
    // add"); with equal total RAM, plain's --cache-ram is larger: say so beside the figures.
    verdict(absl::StrCat("kvtier reuses >= plain's prompt tokens, ", routing, " routing"),
            k->reused_tokens() >= p->reused_tokens(),
            absl::StrFormat("%d vs %d tokens (kvtier: --cache-ram %d MiB + kvtierd %d MiB host "
                            "+ %d MiB disk; plain: --cache-ram %d MiB)",
                            k->reused_tokens(), p->reused_tokens(), f.cache_ram_mib,
                            f.kvtierd_host_mib, f.kvtierd_disk_mib, f.PlainCacheRamMib()));
  }
  for (const char* routing : {"", "-random"}) {
    const ConfigResult* p = find(absl::StrCat("vllm-prefix", routing));
    const ConfigResult* k = find(absl::StrCat("vllm-kvtier", routing));
    if (p == nullptr || k == nullptr) continue;
    verdict(
        absl::StrCat("vllm-kvtier", routing, " reuses >= vllm-prefix", routing, "'s prompt tokens"),
        k->reused_tokens() >= p->reused_tokens(),
        absl::StrFormat("%d vs %d tokens", k->reused_tokens(), p->reused_tokens()));
  }
  // Against plain with the same (random) routing, and against plain with affinity, what
  // an operator would deploy without a shared cache.
  for (const char* plain : {"plain-random", "plain-affinity"}) {
    const ConfigResult* p = find(plain);
    const ConfigResult* k = find("kvtier-random");
    if (p == nullptr || k == nullptr) continue;
    const double x =
        p->TtftPercentile(0.5) > 0 ? k->TtftPercentile(0.5) / p->TtftPercentile(0.5) : 0;
    verdict(absl::StrCat("kvtier-random p50 TTFT <= 0.6 x ", plain, "'s"), x > 0 && x <= 0.6,
            absl::StrFormat("%.1f ms vs %.1f ms (%.2f x)", k->TtftPercentile(0.5),
                            p->TtftPercentile(0.5), x));
  }
  for (const auto& r : results) {
    if (r.kvtierd_budget_kib == 0) continue;
    verdict(absl::StrCat("kvtierd's RSS within its budget, ", r.name),
            r.kvtierd_peak_private_kib <= r.kvtierd_budget_kib,
            absl::StrFormat("peak %.1f MiB without shared memory (%.1f MiB with the engines' "
                            "shm regions) vs %.1f MiB (host + in-flight + write-back + %d)",
                            r.kvtierd_peak_private_kib / 1024.0, r.kvtierd_peak_rss_kib / 1024.0,
                            r.kvtierd_budget_kib / 1024.0, kKvtierdFixedBytes >> 20));
  }
  size_t errors = 0;
  // [engine] -> (differing answers, compared answers) of its kvtier configurations.
  std::map<Engine, std::pair<size_t, size_t>> diffs;
  for (const auto& r : results) {
    errors += r.errors();
    const std::string ref = ReferenceConfigName(r.name);
    if (!ref.empty() && reference_of(r).name == ref) {
      auto& d = diffs[ParseConfigName(r.name)->engine];
      d.first += differing(r);
      d.second += r.answers.size();
    }
  }
  verdict("no request fails", errors == 0, absl::StrFormat("%d errors", errors));
  if (auto it = diffs.find(Engine::kLlama); it != diffs.end()) {
    verdict("every kvtier answer equals plain's with the same routing", it->second.first == 0,
            absl::StrFormat("%d of %d answers differ", it->second.first, it->second.second));
  }
  if (auto it = diffs.find(Engine::kVllm); it != diffs.end()) {
    verdict("every vllm-kvtier answer equals vllm-prefix's with the same routing",
            it->second.first == 0,
            absl::StrFormat("%d of %d answers differ", it->second.first, it->second.second));
  }
  return 0;
}

}  // namespace
}  // namespace kvt::bench

int main(int argc, char** argv) { return kvt::bench::Main(argc, argv); }
