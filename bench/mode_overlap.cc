// kvtier-bench overlap: load while computing (issue 14 item 5; Cake, ICML'25).
//
// A llama.cpp engine (a generated model, or --model) with a cached prefix in a host tier
// throttled to a set bandwidth (ThrottledTier: every Get takes at least bytes/bandwidth).
// For each bandwidth of the sweep, interleaved rounds of three ways to serve the same
// request (prefix + --tail-tokens new tokens), TTFT medians reported:
//   * load:    load the whole cached prefix, then prefill the tail (RunOptions kOff);
//   * compute: recompute everything (cold run, prefix then tail);
//   * overlap: CostModel::PlanOverlap picks s; the engine computes [0, s) while a loader
//              thread fetches [s, prefix), they are joined, then the tail (kPlan).
// The cost model learns the throttled bandwidth from the loads it sees and the prefill
// speed from a calibration pass plus every run. Logits of all three are compared bit
// for bit. Limit per row: min(load, compute); gain = limit / overlap (target: <= 1 never
// worse beyond noise, >= 1.3 somewhere in the sweep).
#ifdef KVT_BENCH_HAVE_LLAMACPP

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench_mode.h"
#include "connectors/kv_connector.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/host_tier.h"
#include "kvstore/store_factory.h"
#include "kvstore/throttled_tier.h"
#include "kvstore/tiered_store.h"
#include "llamacpp/gguf_generator.h"
#include "llamacpp/kv_adapter.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace kvt::bench {
namespace {

using Clock = std::chrono::steady_clock;
using llamacpp::LlamaEngine;
using llamacpp::LlamaKvAdapter;
using llamacpp::OverlapMode;
using llamacpp::RunOptions;
using llamacpp::RunResult;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && !a.empty() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

int RunOverlapBench(int argc, char** argv) {
  CLI::App app{"load while computing: TTFT of load / compute / overlap over a bandwidth sweep",
               "kvtier-bench overlap"};
  bool json = false;
  std::vector<double> bandwidths_gbps;
  std::vector<double> factors = {0.25, 0.5, 1, 2, 4};
  int rounds = 5;
  uint32_t prefix_tokens = 1024, tail_tokens = 16, chunk_tokens = 64;
  int32_t threads = 2;
  std::string model_path, preset = "tiny";
  bool flash_attn = false, fixed_split = false;
  app.add_flag("--fixed-split", fixed_split,
               "overlap with the planned split as is (default: adaptive, meet in the middle)");
  app.add_flag("--json", json, "machine-readable output");
  app.add_option("--bandwidth-gbps", bandwidths_gbps,
                 "throttle the cached tier to these bandwidths (GB/s; comma-separated sweep; "
                 "default: --factors x the crossover bandwidth)")
      ->delimiter(',');
  app.add_option("--factors", factors,
                 "default sweep: these multiples of the bandwidth at which loading the prefix "
                 "takes as long as computing it (from the calibrated prefill model)")
      ->delimiter(',');
  app.add_option("--rounds", rounds, "interleaved rounds per bandwidth (median reported)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--prefix-tokens", prefix_tokens, "cached prefix (a multiple of the chunk)");
  app.add_option("--tail-tokens", tail_tokens, "new tokens after the prefix")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--chunk-tokens", chunk_tokens, "tokens per chunk (= n_batch)")
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--threads", threads, "llama.cpp threads")->check(CLI::Range(1, 256));
  app.add_option("--model", model_path, "GGUF model (default: generate --preset)");
  app.add_option("--preset", preset, "generated model size: tiny | demo");
  app.add_flag("--flash-attn", flash_attn, "flash attention on");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (prefix_tokens == 0 || prefix_tokens % chunk_tokens != 0 || prefix_tokens < 2 * chunk_tokens) {
    std::fprintf(stderr,
                 "overlap: --prefix-tokens %u must be a multiple of --chunk-tokens %u and hold at "
                 "least 2 chunks\n",
                 prefix_tokens, chunk_tokens);
    return 2;
  }
  for (double b : bandwidths_gbps) {
    if (!(b > 0)) {
      std::fprintf(stderr, "overlap: --bandwidth-gbps %g must be > 0\n", b);
      return 2;
    }
  }
  for (double f : factors) {
    if (!(f > 0)) {
      std::fprintf(stderr, "overlap: --factors %g must be > 0\n", f);
      return 2;
    }
  }
  spdlog::set_level(spdlog::level::warn);

  std::filesystem::path tmp;
  if (model_path.empty()) {
    auto spec = llamacpp::SyntheticModelPreset(preset, llamacpp::DefaultVocabPath());
    if (!spec.ok()) {
      std::fprintf(stderr, "overlap: --preset %s: %s\n", preset.c_str(),
                   spec.status().ToString().c_str());
      return 2;
    }
    tmp =
        std::filesystem::temp_directory_path() / ("kvt-bench-overlap-" + std::to_string(getpid()));
    std::filesystem::create_directories(tmp);
    model_path = (tmp / (preset + ".gguf")).string();
    if (absl::Status s = llamacpp::WriteSyntheticModel(*spec, model_path); !s.ok()) {
      std::fprintf(stderr, "overlap: cannot write the model: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  struct Cleanup {
    std::filesystem::path dir;
    ~Cleanup() {
      std::error_code ec;
      if (!dir.empty()) std::filesystem::remove_all(dir, ec);
    }
  } cleanup{tmp};

  llamacpp::EngineOptions eo;
  eo.model_path = model_path;
  eo.n_ctx = prefix_tokens + tail_tokens + 16;
  eo.n_batch = chunk_tokens;
  eo.n_threads = threads;
  eo.flash_attn = flash_attn;
  auto engine = LlamaEngine::Create(eo);
  if (!engine.ok()) {
    std::fprintf(stderr, "overlap: engine: %s\n", engine.status().ToString().c_str());
    return 1;
  }
  const uint64_t bytes_per_token = (*engine)->state_spec().payload_bytes_per_token();

  HostTierOptions ho;
  ho.capacity_bytes = std::max<uint64_t>(64ull << 20, 2 * bytes_per_token * (prefix_tokens + 1024));
  auto host = HostTier::Create(ho);
  if (!host.ok()) {
    std::fprintf(stderr, "overlap: host tier: %s\n", host.status().ToString().c_str());
    return 1;
  }
  auto throttled_owned = std::make_unique<ThrottledTier>(std::move(*host), 1e12);
  ThrottledTier* throttled = throttled_owned.get();
  StoreOptions so;  // the host tier behind a throttle, alone
  so.host.capacity_bytes = 0;
  so.lower.push_back(UseTier(std::move(throttled_owned)));
  auto store = OpenTieredStore(so);
  if (!store.ok()) {
    std::fprintf(stderr, "overlap: store: %s\n", store.status().ToString().c_str());
    return 1;
  }
  ConnectorOptions co;
  co.ns = (*engine)->MakeNamespaceParams(chunk_tokens);
  co.use_cost_model = false;  // "load" loads everything; the overlap plan uses the estimates
  auto connector = KVConnector::Create(co, std::shared_ptr<TieredStore>(std::move(*store)));
  if (!connector.ok()) {
    std::fprintf(stderr, "overlap: connector: %s\n", connector.status().ToString().c_str());
    return 1;
  }
  std::shared_ptr<KVConnector> conn(std::move(*connector));
  auto adapter = LlamaKvAdapter::Create(engine->get(), conn);
  if (!adapter.ok()) {
    std::fprintf(stderr, "overlap: adapter: %s\n", adapter.status().ToString().c_str());
    return 1;
  }
  LlamaEngine& e = **engine;

  // The request: a deterministic prefix + tail. Store the prefix's chunks unthrottled.
  std::vector<TokenId> request(prefix_tokens + tail_tokens);
  for (size_t i = 0; i < request.size(); ++i)
    request[i] = static_cast<TokenId>(3 + (i * 7919 + 17) % static_cast<size_t>(e.n_vocab() - 3));
  {
    RunOptions o;
    o.overlap = OverlapMode::kOff;
    auto r = (*adapter)->Run(std::span<const TokenId>(request).first(prefix_tokens + 1), o);
    if (!r.ok() || r->stored_chunks != prefix_tokens / chunk_tokens) {
      std::fprintf(stderr, "overlap: storing the prefix failed\n");
      return 1;
    }
    conn->Flush();
  }
  // Prefill calibration: cold prefills of 1, 2, 4, ... chunks up to the prefix, twice.
  for (int rep = 0; rep < 2; ++rep) {
    for (uint64_t n = chunk_tokens; n <= prefix_tokens; n *= 2) {
      e.Clear();
      const Clock::time_point t0 = Clock::now();
      if (!e.Prefill(std::span<const TokenId>(request).first(n), 0, false).ok()) return 1;
      conn->ObservePrefill(n, 0, Clock::now() - t0);
    }
  }

  // Bandwidth at which loading the prefix's records takes as long as computing it.
  const double prefix_record_bytes =
      static_cast<double>(prefix_tokens / chunk_tokens) *
      static_cast<double>(conn->chunk_payload_bytes() + kChunkHeaderBytes);
  const double compute_pred_s = conn->cost_model().PredictPrefillSeconds(0, prefix_tokens);
  const double crossover_gbps = prefix_record_bytes / compute_pred_s / 1e9;
  std::fprintf(stderr, "overlap: calibrated prefix compute %.1f ms, crossover %.4f GB/s\n",
               compute_pred_s * 1e3, crossover_gbps);
  if (bandwidths_gbps.empty()) {
    for (double f : factors) bandwidths_gbps.push_back(f * crossover_gbps);
  }

  RunOptions load_opts;
  load_opts.overlap = OverlapMode::kOff;
  load_opts.store = false;
  RunOptions compute_opts;
  compute_opts.use_kvtier = false;
  compute_opts.recompute_prefix_tokens = prefix_tokens;
  RunOptions overlap_opts;
  overlap_opts.overlap = OverlapMode::kPlan;
  overlap_opts.store = false;
  overlap_opts.overlap_adaptive = !fixed_split;

  nlohmann::json rows = nlohmann::json::array();
  bool identical = true, loads_complete = true;
  double max_gain = 0, min_gain = 1e300;
  std::vector<float> reference;
  for (double gbps : bandwidths_gbps) {
    throttled->set_bandwidth(gbps * 1e9);
    std::vector<double> load_ms, compute_ms, overlap_ms, join_ms;
    std::vector<double> split;
    double predicted_ms = 0, pred_load_ms = 0, pred_compute_ms = 0;
    std::vector<double> planned, loader_ms, front_ms;
    auto run = [&](int which, bool record) -> bool {
      const RunOptions& o = which == 0 ? load_opts : which == 1 ? compute_opts : overlap_opts;
      auto r = (*adapter)->Run(request, o);
      if (!r.ok()) {
        std::fprintf(stderr, "overlap: run failed: %s\n", r.status().ToString().c_str());
        return false;
      }
      if (reference.empty()) reference = r->logits;
      identical = identical && SameBits(r->logits, reference);
      if (!record) return true;
      const double ms = r->ttft_s * 1e3;
      if (which == 0) {
        load_ms.push_back(ms);
        loads_complete = loads_complete && r->loaded_tokens == prefix_tokens;
      } else if (which == 1) {
        compute_ms.push_back(ms);
        // A measured prefill of the whole request: keeps the prefill fit current.
        conn->ObservePrefill(request.size(), 0, std::chrono::duration<double>(r->prefill_s));
      } else {
        overlap_ms.push_back(ms);
        join_ms.push_back(r->join_s * 1e3);
        loader_ms.push_back(r->load_s * 1e3);
        front_ms.push_back(r->front_prefill_s * 1e3);
        // Tokens computed before the loaded part: the front, the whole prefix when the
        // plan was to compute, 0 when it was to load everything.
        split.push_back(static_cast<double>(r->overlap_front_tokens > 0 ? r->overlap_front_tokens
                                            : r->loaded_tokens == 0     ? prefix_tokens
                                                                        : 0));
        predicted_ms = r->overlap_plan.predicted_s * 1e3;
        pred_load_ms = r->overlap_plan.load_only_s * 1e3;
        pred_compute_ms = r->overlap_plan.compute_only_s * 1e3;
        planned.push_back(static_cast<double>(r->overlap_plan.front_chunks * chunk_tokens));
      }
      return true;
    };
    // Warm-up at this bandwidth (the cost model learns it from these loads).
    for (int w : {0, 0, 2}) {
      if (!run(w, false)) return 1;
    }
    for (int round = 0; round < rounds; ++round) {
      for (int k = 0; k < 3; ++k) {
        if (!run((round + k) % 3, true)) return 1;
      }
    }
    const double l = Median(load_ms), c = Median(compute_ms), ov = Median(overlap_ms);
    const double limit = std::min(l, c);
    const double gain = limit / ov;
    max_gain = std::max(max_gain, gain);
    min_gain = std::min(min_gain, gain);
    nlohmann::json row;
    row["bandwidth_gbps"] = gbps;
    row["ttft_load_ms"] = l;
    row["ttft_compute_ms"] = c;
    row["ttft_overlap_ms"] = ov;
    row["split_tokens"] = static_cast<uint64_t>(Median(split));
    row["limit_ms"] = limit;
    row["gain_vs_best"] = gain;
    row["predicted_overlap_ms"] = predicted_ms;
    row["predicted_load_ms"] = pred_load_ms;
    row["predicted_compute_ms"] = pred_compute_ms;
    row["planned_split_tokens"] = static_cast<uint64_t>(Median(planned));
    row["join_ms"] = Median(join_ms);
    row["overlap_loader_ms"] = Median(loader_ms);
    row["overlap_front_compute_ms"] = Median(front_ms);
    rows.push_back(row);
    std::fprintf(stderr,
                 "overlap: %.4f GB/s: load %.1f ms, compute %.1f ms, overlap %.1f ms (split %.0f), "
                 "gain %.2fx; predicted load %.1f, compute %.1f, overlap %.1f ms (split %.0f); "
                 "overlap loader %.1f ms, front compute %.1f ms\n",
                 gbps, l, c, ov, Median(split), gain, pred_load_ms, pred_compute_ms, predicted_ms,
                 Median(planned), Median(loader_ms), Median(front_ms));
  }

  const double target_gain = 1.3, noise = 0.95;
  nlohmann::json out;
  out["mode"] = "overlap";
  out["rows"] = rows;
  out["prefix_tokens"] = prefix_tokens;
  out["tail_tokens"] = tail_tokens;
  out["chunk_tokens"] = chunk_tokens;
  out["kv_bytes_per_token"] = bytes_per_token;
  out["model"] = model_path.rfind(tmp.string(), 0) == 0 && !tmp.empty() ? preset : model_path;
  out["threads"] = threads;
  out["flash_attn"] = flash_attn;
  out["overlap_split"] = fixed_split ? "fixed" : "adaptive";
  out["rounds"] = rounds;
  out["crossover_gbps"] = crossover_gbps;
  out["predicted_prefix_compute_ms"] = compute_pred_s * 1e3;
  out["cpus"] = std::thread::hardware_concurrency();
  out["logits_identical"] = identical;
  out["loads_complete"] = loads_complete;
  out["max_gain_vs_best"] = max_gain;
  out["min_gain_vs_best"] = min_gain;
  out["target_gain"] = target_gain;
  out["never_worse"] = min_gain >= noise;
  out["target_met"] = max_gain >= target_gain && min_gain >= noise;
  if (json) {
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf(
        "kvtier-bench overlap: %u-token cached prefix + %u new tokens, %u-token chunks, %llu KV "
        "bytes/token, model %s, %d threads, flash attention %s, %d rounds (medians), %s split\n",
        prefix_tokens, tail_tokens, chunk_tokens, static_cast<unsigned long long>(bytes_per_token),
        out["model"].get<std::string>().c_str(), threads, flash_attn ? "on" : "off", rounds,
        fixed_split ? "fixed" : "adaptive");
    std::printf(
        "calibrated prefill of the prefix: %.1f ms -> loading it takes as long at %.4f GB/s "
        "(crossover)\n",
        compute_pred_s * 1e3, crossover_gbps);
    std::printf("%14s %13s %15s %15s %12s %9s %13s %8s %8s\n", "bandwidth_gbps", "ttft_load_ms",
                "ttft_compute_ms", "ttft_overlap_ms", "split_tokens", "gain", "predicted_ms",
                "planned", "join_ms");
    for (const auto& r : rows) {
      std::printf("%14.4f %13.1f %15.1f %15.1f %12llu %8.2fx %13.1f %8llu %8.2f\n",
                  r["bandwidth_gbps"].get<double>(), r["ttft_load_ms"].get<double>(),
                  r["ttft_compute_ms"].get<double>(), r["ttft_overlap_ms"].get<double>(),
                  static_cast<unsigned long long>(r["split_tokens"].get<uint64_t>()),
                  r["gain_vs_best"].get<double>(), r["predicted_overlap_ms"].get<double>(),
                  static_cast<unsigned long long>(r["planned_split_tokens"].get<uint64_t>()),
                  r["join_ms"].get<double>());
    }
    std::printf(
        "gain = min(load, compute) / overlap. max %.2fx (target >= %.1fx), min %.2fx (never "
        "worse: >= %.2f allowing noise); logits bit-identical across all runs: %s\n",
        max_gain, target_gain, min_gain, noise, identical ? "yes" : "NO");
  }
  return identical && loads_complete ? 0 : 1;
}

}  // namespace

KVT_BENCH_MODE(overlap, "load while computing: TTFT load/compute/overlap over throttled bandwidths",
               RunOverlapBench);

}  // namespace kvt::bench

#endif  // KVT_BENCH_HAVE_LLAMACPP
