// kvtier-bench trace: what to keep, measured on real request traces (issue 24).
//
// Replays the Mooncake FAST'25 traces (bench/traces/) through each cache policy at tier
// capacities given as fractions of the trace's distinct blocks, one record per block.
// A request does what an engine does through the connector: the leading run of held
// blocks is the hit (read), the first block not held is a miss, every block after the
// run is stored. Per (trace, capacity, policy) it prints the token hit ratio beside the
// offline optimum (farthest next use, never-reused blocks not stored: the limit) and the
// share of the LRU -> optimum gap the policy closes, the records written (a policy that
// skips never-reused blocks also saves the tier's writes) and the policy's time per chunk.
// The targets of issue 24 are printed with PASS/FAIL.
//
// Hit ratios and bytes written come from the real TieredStore (trace_store.h: host tier,
// and for the two-tier run a disk tier below it, each with its own policy) for the
// policies in --store-policies (default: default and lru, the targets' pairs) at host
// capacities up to --store-max-capacity (2 %: HostTier's eviction check walks every held
// record per Put, so a 10-50 % host tier takes minutes to replay) and in the two-tier
// run. Every policy is also replayed directly (trace_sim.h: the policy object with a
// plain array for the tier), which times the policy's calls alone and gives the hit
// ratio of the rows not replayed through the store (`direct_token_hit_ratio`; the
// `replay` key and the "via" column say which). `--replay direct` skips the store. The
// optimum comes from a plain simulator.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_split.h"
#include "bench_mode.h"
#include "kvstore/cache_policy.h"
#include "kvstore/store_factory.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"
#include "trace_daemon.h"
#include "trace_file.h"
#include "trace_sim.h"
#include "trace_store.h"

#ifndef KVT_BENCH_TRACES_DIR
#define KVT_BENCH_TRACES_DIR "bench/traces"
#endif

namespace kvt::bench {
namespace {

// The classic baselines the default policy must stay within 2 % of (issue 24).
const std::vector<std::string> kBaselines = {"lru", "lfu", "arc", "s3fifo"};

struct TwoTier {
  std::string trace;
  std::string policy;
  TwoTierResult result;
  std::string replayed = "direct";
  std::optional<DaemonReplayResult> kvtierd;  // the same run through kvtierd, when asked
  double store_seconds_per_chunk = 0;         // the TieredStore replay's wall time per chunk
};

struct Row {
  std::string trace;
  double capacity_fraction = 0;
  uint64_t capacity_records = 0;
  std::string policy;       // "default", "lru", ..., "optimum"
  std::string policy_name;  // the policy's own name ("adaptive" for "default")
  SimResult result;
  double optimum = 0;
  double lru = 0;
  double direct_ratio = 0;          // the direct replay's token hit ratio
  std::string replayed = "direct";  // where token_hit_ratio comes from: store, direct
};

// A policy as the bench names it; "default" is what OpenTieredStore gives a tier whose
// policy is not chosen (DefaultCachePolicy: adaptive declining first-seen chunks beyond
// its budget, or storing them in a tier below another one).
// Variants for the two-tier run: "adaptive-declines" is adaptive with
// adaptive_declines_first_seen in every tier, "adaptive-disk-declines" only in the disk
// below host memory (the defaults before: host memory stored first-seen chunks).
CachePolicyOptions PolicyOptions(const std::string& name, bool below_another_tier) {
  if (name == "default") return DefaultCachePolicy(below_another_tier);
  CachePolicyOptions o;
  if (name == "adaptive-declines" || name == "adaptive-disk-declines") {
    o.name = "adaptive";
    o.adaptive_declines_first_seen = name == "adaptive-declines" || below_another_tier;
    return o;
  }
  o.name = name;
  return o;
}

// A host tier with no tier below (the host-only rows): OpenTieredStore's default stores
// first-seen chunks there (first to go), as a chunk it declined would reach no tier. The
// direct replay runs the same policy, so its rows and the store's measure one thing.
CachePolicyOptions HostAloneOptions(const std::string& name) {
  CachePolicyOptions o = PolicyOptions(name, false);
  if (name == "default") o.adaptive_declines_first_seen = false;
  return o;
}

// What the store replay passes: "default" as the name, which OpenTieredStore resolves for
// the tier's place, so the replay runs the store factory's own defaults.
CachePolicyOptions StoreOptionsFor(const std::string& name, bool below_another_tier) {
  if (name != "default") return PolicyOptions(name, below_another_tier);
  CachePolicyOptions o;
  o.name = "default";
  return o;
}

// Comma-separated fractions in (0, 1] into *out; false (after a message) on a bad one.
bool ParseFractions(const char* flag, const std::string& arg, std::vector<double>* out) {
  out->clear();
  for (auto part : absl::StrSplit(arg, ',', absl::SkipEmpty())) {
    char* end = nullptr;
    const std::string s(part);
    const double f = std::strtod(s.c_str(), &end);
    if (end == s.c_str() || *end != '\0' || !(f > 0) || f > 1) {
      std::fprintf(stderr, "trace: %s: '%s' is not a fraction in (0, 1]\n", flag, s.c_str());
      return false;
    }
    out->push_back(f);
  }
  return true;
}

double GapClosed(double ratio, double lru, double optimum) {
  return optimum > lru ? (ratio - lru) / (optimum - lru) : 0;
}

std::string Pct(double f) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g %%", f * 100);
  return buf;
}

int RunTrace(int argc, char** argv) {
  CLI::App app{"cache policies replayed on the Mooncake FAST'25 traces (hit ratio vs optimum)",
               "trace"};
  bool json = false, sweep = false;
  std::string traces_dir = KVT_BENCH_TRACES_DIR;
  std::string trace_list = "conversation,synthetic";
  std::string capacities_arg;
  std::string policies_arg = "default,lru,lfu,arc,s3fifo";
  size_t max_requests = 0;
  uint64_t record_bytes = 4096;
  std::string two_tier_arg = "0.01,0.1";
  std::string replay = "store";
  std::string store_policies_arg = "default,lru";
  double store_max_capacity = 0.02;
  std::string disk_base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp";
  int kvtierd_clients = 0;
  std::string kvtierd_bin;
  bool no_flush = false;
  size_t miss_record_entries = AbsenceRecord::kDefaultEntries;  // as kvtierd
  app.add_flag("--no-flush", no_flush,
               "two-tier store replay: do not flush the write-back after each request (its "
               "queue then serves records beyond the tiers' capacities while it lags)");
  app.add_option("--miss-record-entries", miss_record_entries,
                 "two-tier store replay: keys of the store's record of why keys are not held "
                 "(kvtierd's miss_record_entries; 0 = none)")
      ->check(CLI::Range(size_t{0}, size_t{1} << 24));
  app.add_flag("--json", json, "one JSON object per (trace, capacity, policy) line");
  app.add_flag("--sweep", sweep, "capacities 1, 2, 5, 10, 20, 50 % of each trace's blocks");
  app.add_option("--traces-dir", traces_dir, "folder holding <trace>_trace.jsonl.gz");
  app.add_option("--traces", trace_list, "comma-separated: conversation, synthetic");
  app.add_option("--capacities", capacities_arg,
                 "comma-separated fractions of the distinct blocks (default 0.01,0.02,0.1)");
  app.add_option("--policies", policies_arg,
                 "comma-separated policy names (default = the default policy)");
  app.add_option("--max-requests", max_requests, "replay only the first N requests (0 = all)");
  app.add_option("--record-bytes", record_bytes, "bytes of one block's record")
      ->check(CLI::Range(uint64_t{64}, uint64_t{1} << 30));
  app.add_option("--host-disk", two_tier_arg,
                 "host,disk capacity fractions of the two-tier replay (\"\" = none)");
  app.add_option("--replay", replay,
                 "store: hit ratios from the real TieredStore; direct: the policies alone")
      ->check(CLI::IsMember({"store", "direct"}));
  app.add_option("--store-policies", store_policies_arg,
                 "policies replayed through the TieredStore too (the others: direct only)");
  app.add_option("--store-max-capacity", store_max_capacity,
                 "largest host-only capacity replayed through the TieredStore (HostTier's "
                 "eviction check walks every held record per Put: large ones take minutes)");
  app.add_option("--disk-dir", disk_base,
                 "where the two-tier run's disk tier lives (a fresh folder inside, removed)");
  app.add_option("--kvtierd-clients", kvtierd_clients,
                 "also replay the two-tier run through one kvtierd shared by this many client "
                 "processes (0 = not)")
      ->check(CLI::Range(0, 16));
  app.add_option("--kvtierd", kvtierd_bin, "the kvtierd binary (default: the one built here)");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);  // not a line per store opened
  if (replay == "store" && record_bytes % 4096 != 0) {
    std::fprintf(stderr, "trace: --record-bytes must be a multiple of 4096 with --replay store\n");
    return 2;
  }

  std::vector<double> capacities = {0.01, 0.02, 0.1};
  if (sweep) capacities = {0.01, 0.02, 0.05, 0.1, 0.2, 0.5};
  if (!capacities_arg.empty() && !ParseFractions("--capacities", capacities_arg, &capacities)) {
    return 2;
  }
  std::vector<double> two_tier;
  if (!ParseFractions("--host-disk", two_tier_arg, &two_tier)) return 2;
  if (!two_tier.empty() && two_tier.size() != 2) {
    std::fprintf(stderr, "trace: --host-disk: expected two fractions (host,disk)\n");
    return 2;
  }
  std::vector<std::string> policies = absl::StrSplit(policies_arg, ',', absl::SkipEmpty());
  for (const std::string& p : policies) {
    if (absl::Status s = PolicyOptions(p, false).Validate(); !s.ok()) {
      std::fprintf(stderr, "trace: --policies: %s\n", std::string(s.message()).c_str());
      return 2;
    }
  }
  std::vector<std::string> traces = absl::StrSplit(trace_list, ',', absl::SkipEmpty());
  const std::vector<std::string> store_policies =
      absl::StrSplit(store_policies_arg, ',', absl::SkipEmpty());
  auto through_store = [&](const std::string& p, double f) {
    return replay == "store" && f <= store_max_capacity + 1e-9 &&
           std::find(store_policies.begin(), store_policies.end(), p) != store_policies.end();
  };

  std::vector<Row> rows;
  std::vector<TwoTier> two_tier_rows;
  for (const std::string& name : traces) {
    const std::string path = traces_dir + "/" + name + "_trace.jsonl.gz";
    auto trace = LoadTrace(path, name, max_requests);
    if (!trace.ok()) {
      std::fprintf(stderr, "trace: %s\n", trace.status().ToString().c_str());
      return 1;
    }
    if (!json) {
      std::printf(
          "\n%s trace: %zu requests, %u distinct blocks of %u tokens, %llu block "
          "references, %llu B records (%s)\n",
          name.c_str(), trace->requests.size(), trace->distinct_blocks, trace->block_tokens,
          static_cast<unsigned long long>(trace->total_blocks),
          static_cast<unsigned long long>(record_bytes),
          replay == "store" ? "via: where the hit ratio comes from; direct = the policy alone"
                            : "direct replay");
      std::printf("%9s %8s %8s %8s %8s %6s %9s %9s %9s %9s  %s\n", "capacity", "policy", "hit",
                  "direct", "optimum", "x LRU", "gap-shut", "written", "ns/chunk", "cpu-bound",
                  "via");
    }
    for (double f : capacities) {
      const uint64_t cap =
          std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(f * trace->distinct_blocks)));
      Row opt{name, f, cap, "optimum", "optimum", SimulateOptimum(*trace, cap)};
      opt.direct_ratio = opt.result.token_hit_ratio();
      std::vector<Row> group;
      for (const std::string& p : policies) {
        auto policy = MakeCachePolicy(HostAloneOptions(p), cap * record_bytes);
        if (!policy.ok()) {
          std::fprintf(stderr, "trace: %s\n", policy.status().ToString().c_str());
          return 1;
        }
        Row row{name, f, cap, p, std::string((*policy)->name()), {}};
        row.result = SimulatePolicy(*trace, **policy, cap, record_bytes);
        row.direct_ratio = row.result.token_hit_ratio();
        if (through_store(p, f)) {
          row.replayed = "store";
          StoreReplayOptions so;
          so.host_policy = StoreOptionsFor(p, false);
          so.host_records = cap;
          so.record_bytes = record_bytes;
          auto st = ReplayThroughStore(*trace, so);
          if (!st.ok()) {
            std::fprintf(stderr, "trace: %s %s: %s\n", name.c_str(), p.c_str(),
                         st.status().ToString().c_str());
            return 1;
          }
          row.result.hit_tokens = st->host_hit_tokens + st->disk_hit_tokens;
          row.result.records_written = st->host_bytes_written / record_bytes;
          row.result.admission_rejects = st->host_admission_rejects;
          row.result.seconds = st->seconds;
        }
        group.push_back(std::move(row));
      }
      group.push_back(std::move(opt));
      double lru = 0;
      for (const Row& r : group) {
        if (r.policy == "lru") lru = r.result.token_hit_ratio();
      }
      for (Row& r : group) {
        r.optimum = group.back().result.token_hit_ratio();
        r.lru = lru;
        const double ratio = r.result.token_hit_ratio();
        if (json) {
          nlohmann::json j = {
              {"mode", "trace"},
              {"trace", r.trace},
              {"tiers", "host"},
              {"capacity_fraction", r.capacity_fraction},
              {"capacity_records", r.capacity_records},
              {"record_bytes", record_bytes},
              {"policy", r.policy},
              {"policy_name", r.policy_name},
              {"token_hit_ratio", ratio},
              {"optimum_token_hit_ratio", r.optimum},
              {"lru_token_hit_ratio", lru},
              {"gap_closed", GapClosed(ratio, lru, r.optimum)},
              {"records_written", r.result.records_written},
              {"bytes_written", r.result.records_written * record_bytes},
              {"admission_rejects", r.result.admission_rejects},
              {"seconds_per_chunk", r.result.seconds_per_chunk()},
              {"seconds_per_call", r.result.seconds_per_call()},
              {"cpu_seconds_per_chunk", r.result.cpu_seconds_per_chunk()},
              {"requests", trace->requests.size()},
              {"replay", r.policy == "optimum" ? "simulator" : r.replayed},
              {"direct_token_hit_ratio", r.direct_ratio},
          };
          std::printf("%s\n", j.dump().c_str());
        } else {
          std::printf("%9s %8s %8.4f %8.4f %8.4f %6.2f %8.0f%% %9llu %9.0f %9.0f  %s\n",
                      Pct(r.capacity_fraction).c_str(), r.policy.c_str(), ratio,
                      r.policy == "optimum" ? ratio : r.direct_ratio, r.optimum,
                      lru > 0 ? ratio / lru : 0, 100 * GapClosed(ratio, lru, r.optimum),
                      static_cast<unsigned long long>(r.result.records_written),
                      r.result.seconds_per_chunk() * 1e9, r.result.cpu_seconds_per_chunk() * 1e9,
                      r.policy == "optimum" ? "simulator" : r.replayed.c_str());
        }
        rows.push_back(r);
      }
    }
    if (!two_tier.empty()) {
      const uint64_t host = std::max<uint64_t>(
          1, static_cast<uint64_t>(std::llround(two_tier[0] * trace->distinct_blocks)));
      const uint64_t disk = std::max<uint64_t>(
          1, static_cast<uint64_t>(std::llround(two_tier[1] * trace->distinct_blocks)));
      if (!json) {
        std::printf("\n%s: host memory %s + disk %s, every store written through to disk (%s)\n",
                    name.c_str(), Pct(two_tier[0]).c_str(), Pct(two_tier[1]).c_str(),
                    replay == "store" ? "TieredStore" : "direct replay");
        std::printf("%9s %9s %9s %9s %12s %12s %9s %9s  %s\n", "policy", "host hit", "disk hit",
                    "total", "host writes", "disk writes", "ns/chunk", "cpu-bound", "via");
      }
      for (const std::string& p : policies) {
        auto hp = MakeCachePolicy(PolicyOptions(p, false), host * record_bytes);
        auto dp = MakeCachePolicy(PolicyOptions(p, true), disk * record_bytes);
        if (!hp.ok() || !dp.ok()) return 1;
        TwoTier t{name, p, SimulateTwoTier(*trace, **hp, host, **dp, disk, record_bytes)};
        if (through_store(p, 0)) {
          t.replayed = "store";
          std::string dir = disk_base + "/kvtier-bench-trace-XXXXXX";
          if (mkdtemp(dir.data()) == nullptr) {
            std::fprintf(stderr, "trace: cannot create a folder in %s\n", disk_base.c_str());
            return 1;
          }
          StoreReplayOptions so;
          so.host_policy = StoreOptionsFor(p, false);
          so.disk_policy = StoreOptionsFor(p, true);
          so.host_records = host;
          so.disk_records = disk;
          so.disk_dir = dir;
          so.record_bytes = record_bytes;
          so.flush = !no_flush;
          so.miss_record_entries = miss_record_entries;
          auto st = ReplayThroughStore(*trace, so);
          std::error_code ec;
          std::filesystem::remove_all(dir, ec);
          if (!st.ok()) {
            std::fprintf(stderr, "trace: %s %s (host + disk): %s\n", name.c_str(), p.c_str(),
                         st.status().ToString().c_str());
            return 1;
          }
          t.result.host_hit_tokens = st->host_hit_tokens;
          t.result.disk_hit_tokens = st->disk_hit_tokens;
          t.result.host_records_written = st->host_bytes_written / record_bytes;
          t.result.disk_records_written = st->disk_bytes_written / record_bytes;
          t.store_seconds_per_chunk = st->seconds_per_chunk();
        }
        if (kvtierd_clients > 0 && through_store(p, 0)) {
          std::string dir = "/tmp/kvtier-bench-trace-kvtierd-XXXXXX";
          if (mkdtemp(dir.data()) == nullptr) return 1;
          DaemonReplayOptions dro;
          dro.host_policy = p == "default" ? "" : p;
          dro.disk_policy = dro.host_policy;
          dro.host_records = host;
          dro.disk_records = disk;
          dro.record_bytes = record_bytes;
          dro.clients = kvtierd_clients;
          dro.kvtierd = FindKvtierd(kvtierd_bin);
          dro.work_dir = dir;
          auto dr = ReplayThroughKvtierd(*trace, dro);
          if (!dr.ok()) {
            std::fprintf(stderr, "trace: %s %s through kvtierd: %s (kept %s)\n", name.c_str(),
                         p.c_str(), dr.status().ToString().c_str(), dir.c_str());
            return 1;
          }
          std::error_code ec;
          std::filesystem::remove_all(dir, ec);
          t.kvtierd = *dr;
        }
        const TwoTierResult& r = t.result;
        if (json) {
          nlohmann::json j = {
              {"mode", "trace"},
              {"trace", name},
              {"tiers", "host+disk"},
              {"capacity_fraction", two_tier[0]},
              {"disk_capacity_fraction", two_tier[1]},
              {"policy", p},
              {"policy_name", std::string((*hp)->name())},
              {"token_hit_ratio", r.total_ratio()},
              {"host_token_hit_ratio", r.host_ratio()},
              {"disk_token_hit_ratio", r.disk_ratio()},
              {"host_bytes_written", r.host_records_written * record_bytes},
              {"disk_bytes_written", r.disk_records_written * record_bytes},
              {"seconds_per_chunk", r.seconds_per_chunk()},
              {"cpu_seconds_per_chunk", r.cpu_seconds_per_chunk()},
              {"store_seconds_per_chunk", t.store_seconds_per_chunk},
              {"miss_record_entries", t.replayed == "store" ? miss_record_entries : 0},
              {"replay", t.replayed},
          };
          std::printf("%s\n", j.dump().c_str());
          if (t.kvtierd) {
            const DaemonReplayResult& k = *t.kvtierd;
            nlohmann::json kj = {
                {"mode", "trace"},
                {"trace", name},
                {"tiers", "host+disk"},
                {"capacity_fraction", two_tier[0]},
                {"disk_capacity_fraction", two_tier[1]},
                {"policy", p},
                {"token_hit_ratio", k.total_ratio()},
                {"in_process_token_hit_ratio", r.total_ratio()},
                {"host_chunk_hits", k.host_hits},
                {"disk_chunk_hits", k.disk_hits},
                {"host_bytes_written", k.host_bytes_written},
                {"disk_bytes_written", k.disk_bytes_written},
                {"host_admission_rejects", k.host_admission_rejects},
                {"disk_admission_rejects", k.disk_admission_rejects},
                {"clients", kvtierd_clients},
                {"seconds", k.seconds},
                {"replay", "kvtierd"},
            };
            std::printf("%s\n", kj.dump().c_str());
          }
        } else {
          std::printf("%9s %9.4f %9.4f %9.4f %12llu %12llu %9.0f %9.0f  %s\n", p.c_str(),
                      r.host_ratio(), r.disk_ratio(), r.total_ratio(),
                      static_cast<unsigned long long>(r.host_records_written * record_bytes),
                      static_cast<unsigned long long>(r.disk_records_written * record_bytes),
                      r.seconds_per_chunk() * 1e9, r.cpu_seconds_per_chunk() * 1e9,
                      t.replayed.c_str());
          if (t.kvtierd) {
            const DaemonReplayResult& k = *t.kvtierd;
            std::printf(
                "%9s %9s %9s %9.4f %12llu %12llu %9.0f %9s  kvtierd, %d clients (host "
                "%llu, disk %llu chunk hits)\n",
                p.c_str(), "-", "-", k.total_ratio(),
                static_cast<unsigned long long>(k.host_bytes_written),
                static_cast<unsigned long long>(k.disk_bytes_written),
                k.chunks ? k.seconds / static_cast<double>(k.chunks) * 1e9 : 0.0, "-",
                kvtierd_clients, static_cast<unsigned long long>(k.host_hits),
                static_cast<unsigned long long>(k.disk_hits));
          }
        }
        two_tier_rows.push_back(std::move(t));
      }
    }
  }

  // The targets (issue 24), over the rows this run measured.
  auto find = [&](const std::string& t, double f, const std::string& p) -> const Row* {
    for (const Row& r : rows) {
      if (r.trace == t && std::abs(r.capacity_fraction - f) < 1e-9 && r.policy == p) return &r;
    }
    return nullptr;
  };
  bool all_pass = true;
  std::vector<nlohmann::json> verdicts;
  auto verdict = [&](const std::string& target, bool pass, const std::string& detail) {
    all_pass = all_pass && pass;
    if (json) {
      verdicts.push_back(
          {{"mode", "trace"}, {"target", target}, {"pass", pass}, {"detail", detail}});
    } else {
      std::printf("  [%s] %s: %s\n", pass ? "PASS" : "FAIL", target.c_str(), detail.c_str());
    }
  };
  if (!json) std::printf("\ntargets (issue 24):\n");
  char buf[256];
  for (double f : {0.01, 0.02}) {
    const Row* d = find("conversation", f, "default");
    const Row* l = find("conversation", f, "lru");
    if (d == nullptr || l == nullptr) continue;
    const double x = l->result.token_hit_ratio() > 0
                         ? d->result.token_hit_ratio() / l->result.token_hit_ratio()
                         : 0;
    std::snprintf(buf, sizeof(buf), "%.4f = %.2f x LRU's %.4f (optimum %.4f)",
                  d->result.token_hit_ratio(), x, l->result.token_hit_ratio(), d->optimum);
    verdict("conversation " + Pct(f) + ": default >= 1.8 x LRU", x >= 1.8, buf);
  }
  for (const Row& d : rows) {
    if (d.policy != "default" || d.capacity_fraction < 0.01 - 1e-9 ||
        d.capacity_fraction > 0.5 + 1e-9) {
      continue;
    }
    double best = 0;
    std::string best_name;
    for (const std::string& b : kBaselines) {
      if (const Row* r = find(d.trace, d.capacity_fraction, b);
          r != nullptr && r->result.token_hit_ratio() > best) {
        best = r->result.token_hit_ratio();
        best_name = b;
      }
    }
    if (best_name.empty()) continue;
    std::snprintf(buf, sizeof(buf), "%.4f vs %s %.4f (%.3f x)", d.result.token_hit_ratio(),
                  best_name.c_str(), best, d.result.token_hit_ratio() / best);
    verdict(d.trace + " " + Pct(d.capacity_fraction) + ": default >= 0.98 x best classic",
            d.result.token_hit_ratio() >= 0.98 * best, buf);
  }
  for (const std::string& t : traces) {
    const TwoTier *d = nullptr, *l = nullptr;
    for (const TwoTier& r : two_tier_rows) {
      if (r.trace == t && r.policy == "default") d = &r;
      if (r.trace == t && r.policy == "lru") l = &r;
    }
    if (d == nullptr || l == nullptr) continue;
    std::snprintf(buf, sizeof(buf),
                  "total %.4f vs LRU-in-both %.4f; disk writes %llu vs %llu records",
                  d->result.total_ratio(), l->result.total_ratio(),
                  static_cast<unsigned long long>(d->result.disk_records_written),
                  static_cast<unsigned long long>(l->result.disk_records_written));
    verdict(t + " host " + Pct(two_tier[0]) + " + disk " + Pct(two_tier[1]) +
                ": default beats LRU-in-both, disk writes no more",
            d->result.total_ratio() > l->result.total_ratio() &&
                d->result.disk_records_written <= l->result.disk_records_written,
            buf);
  }
  // The same replay through kvtierd, several client processes: the hit ratio matches the
  // in-process store within noise (2 % of it; the daemon writes down in the background).
  for (const TwoTier& t : two_tier_rows) {
    if (!t.kvtierd) continue;
    const double in_process = t.result.total_ratio(), via = t.kvtierd->total_ratio();
    std::snprintf(buf, sizeof(buf), "%.4f through kvtierd (%d clients) vs %.4f in-process", via,
                  kvtierd_clients, in_process);
    verdict(t.trace + " " + t.policy + " host + disk: kvtierd replay within 2 % of in-process",
            std::abs(via - in_process) <= 0.02 * in_process, buf);
  }
  // The policy's time per chunk: its calls timed one by one (wall time, which a busy
  // machine inflates when the thread is preempted inside a call) and the replay's CPU time
  // (policy + the replay's own index: an upper bound that preemption does not inflate).
  // The verdict takes the smaller of the two bounds.
  double worst_wall = 0, worst_cpu = 0;
  for (const Row& r : rows) {
    if (r.policy != "default") continue;
    worst_wall = std::max(worst_wall, r.result.seconds_per_chunk());
    worst_cpu = std::max(worst_cpu, r.result.cpu_seconds_per_chunk());
  }
  if (worst_wall > 0) {
    std::snprintf(buf, sizeof(buf),
                  "worst %.0f ns per chunk timed call by call (wall), %.0f ns replay CPU "
                  "(policy + index) per chunk",
                  worst_wall * 1e9, worst_cpu * 1e9);
    verdict("default policy time <= 1 us per chunk", std::min(worst_wall, worst_cpu) <= 1e-6, buf);
  }
  if (json) {
    for (const auto& v : verdicts) std::printf("%s\n", v.dump().c_str());
  }
  (void)all_pass;  // a benchmark reports; the ctest and the reader judge
  return 0;
}

KVT_BENCH_MODE(trace, "cache policies on the Mooncake traces: hit ratio vs optimum", RunTrace);

}  // namespace
}  // namespace kvt::bench
