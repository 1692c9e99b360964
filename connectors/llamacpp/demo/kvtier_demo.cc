// kvtier-demo: llama.cpp on real text, cold vs warm from kvtier's host and disk tiers
// and from kvtierd.
//
//   kvtier-demo                 # 270M demo model (generated on first run), ./.kvtier-demo/
//   kvtier-demo --small         # tiny model, seconds
//   kvtier-demo --model x.gguf  # any GGUF llama.cpp can run
//   kvtier-demo --json          # rows as JSON lines on stdout
//   kvtier-demo --kvtierd PATH  # the kvtierd binary to start (default: the one built here)
//
// Phases (one request list: chat turns, document questions, no-reuse prompts):
//   1. cold: each request prefilled by the engine alone (TTFT cold).
//   2. warm-host: requests in order through kvtier (host tier + disk tier, write-through):
//      each loads what earlier requests stored, prefills the rest and stores its chunks.
//      Its logits are compared bit for bit with a recompute (same engine calls, prefix
//      prefilled instead of loaded).
//   3. warm-disk: this program re-executes itself (--fresh-phase) as a fresh process on
//      the disk tier alone, loading the same prefix lengths as phase 2 from disk.
//   4. warm-kvtierd: the demo starts kvtierd on a unix socket in <dir>/run, stores every
//      chunk of phase 2 into it through the remote tier (RemoteTier::Put, records read
//      from the disk tier; a dedicated pass, so phase 2's figures are unchanged), then a
//      fresh process whose store has only the remote tier loads the same prefix lengths
//      from kvtierd. The daemon is stopped with SIGTERM at the end, also on error (and
//      gets SIGTERM from the kernel if the demo dies). If it cannot be started (no
//      binary, built with KVT_BUILD_DAEMON=OFF) the column shows n/a with the reason.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "connectors/kv_connector.h"
#include "demo_support.h"
#include "kvstore/disk_tier.h"
#include "kvstore/host_tier.h"
#include "kvstore/store_factory.h"
#include "kvstore/tiered_store.h"
#include "kvtierd_process.h"
#include "llamacpp/gguf_generator.h"
#include "llamacpp/kv_adapter.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"
#include "workload.h"
#ifdef KVT_DEMO_HAVE_REMOTE
#include "kvstore/remote_tier.h"
#endif

namespace kvt::llamacpp::demo {
namespace {

using json = nlohmann::json;

struct Row {
  std::string workload;
  int index = 0;
  uint64_t prompt_tokens = 0;
  uint64_t loaded_host = 0;
  uint64_t loaded_disk = 0;
  uint64_t loaded_kvtierd = 0;
  double cold_s = 0, host_s = 0, disk_s = 0, kvtierd_s = 0;
  double cold_wall_s = 0, host_wall_s = 0;
  double tail_s = 0;  // recompute's tail prefill (same calls as the warm tail)
  uint64_t load_bytes = 0;
  bool identical_host = false, identical_disk = false, identical_kvtierd = false;
};

// Re-executes this program as a fresh process running FreshPhase on `tier` and returns
// its per-request results (ttft_s, loaded, identical), one per row.
absl::StatusOr<json> RunFreshPhase(const Flags& flags, const std::string& model,
                                   const std::vector<Row>& rows, const std::string& tier,
                                   const std::string& target) {
  json plan;
  plan["tier"] = tier;
  plan["target"] = target;
  plan["model"] = model;
  plan["out"] = absl::StrFormat("%s/%s-results.json", RunDir(flags), tier);
  json caps = json::array();
  for (const Row& row : rows) caps.push_back(row.loaded_host);
  plan["caps"] = caps;
  const std::string plan_path = absl::StrFormat("%s/%s-plan.json", RunDir(flags), tier);
  std::filesystem::remove(plan["out"].get<std::string>());
  std::ofstream(plan_path) << plan.dump();
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string threads = std::to_string(flags.threads),
                    chunk = std::to_string(flags.chunk_tokens);
  std::vector<std::string> args = {self,      "--fresh-phase", plan_path,      "--dir",
                                   flags.dir, "--data-dir",    flags.data_dir, "--threads",
                                   threads,   "--chunk",       chunk};
  if (flags.flash_attn) args.push_back("--flash-attn");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrFormat("fork: %s", std::strerror(errno)));
  if (pid == 0) {
    execv(self.c_str(), argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(
        absl::StrFormat("%s phase process failed (status %d)", tier, status));
  }
  std::ifstream in(plan["out"].get<std::string>());
  json results = json::parse(in, nullptr, false);
  if (results.is_discarded() || !results.is_array() || results.size() != rows.size()) {
    return absl::InternalError(
        absl::StrFormat("bad %s phase results in %s", tier, plan["out"].get<std::string>()));
  }
  return results;
}

// Phase 4. kvtierd_na is set (and OK returned) when the daemon cannot be started;
// errors after it started are returned. The daemon is stopped before this returns.
absl::Status KvtierdPhase(const Flags& flags, const std::string& model, std::vector<Row>& rows,
                          std::string* kvtierd_na) {
#ifndef KVT_DEMO_HAVE_REMOTE
  (void)model;
  (void)rows;
  *kvtierd_na = flags.kvtierd.empty()
                    ? "built with KVT_BUILD_DAEMON=OFF (no kvtierd, no remote tier)"
                    : "built with KVT_BUILD_DAEMON=OFF (no remote tier)";
  return absl::OkStatus();
#else
  if (flags.kvtierd.empty()) {
    *kvtierd_na = "no kvtierd binary (build target kvtierd, or pass --kvtierd PATH)";
    return absl::OkStatus();
  }
  // What phase 2 stored (the disk tier holds every chunk: write-through, flushed).
  auto disk = DiskTier::Open(DemoDiskTierOptions(flags));
  if (!disk.ok()) return disk.status();
  std::vector<ChunkInfo> chunks;
  uint64_t total = 0, largest = 0;
  ListOptions lo;
  do {
    auto page = (*disk)->List(lo);
    if (!page.ok()) return page.status();
    for (const ChunkInfo& c : page->chunks) {
      total += c.record_bytes;
      largest = std::max(largest, c.record_bytes);
      chunks.push_back(c);
    }
    lo.page_token = page->next_page_token;
  } while (!lo.page_token.empty());

  auto round_up = [](uint64_t v, uint64_t m) { return (v + m - 1) / m * m; };
  KvtierdProcessOptions ko;
  ko.binary = flags.kvtierd;
  ko.run_dir = RunDir(flags);
  ko.data_dir = flags.dir + "/cache/kvtierd";
  ko.host_capacity_bytes =
      round_up(total + total / 4 + (16ull << 20), 1ull << 20);  // all of it in memory
  ko.disk_file_bytes = std::max<uint64_t>(256ull << 20, round_up(largest, 1ull << 20));
  ko.disk_capacity_bytes = round_up(total + total / 4 + ko.disk_file_bytes, ko.disk_file_bytes);
  const auto ts = Clock::now();
  auto daemon = KvtierdProcess::Start(ko);
  if (!daemon.ok()) {
    *kvtierd_na = daemon.status().ToString();
    return absl::OkStatus();
  }
  std::fprintf(stderr, "  kvtierd %s started (pid %d, %s) in %.0f ms\n", flags.kvtierd.c_str(),
               (*daemon)->pid(), (*daemon)->target().c_str(), Seconds(ts) * 1e3);
  absl::Status result = [&]() -> absl::Status {
    // Store every chunk into the daemon through the remote tier.
    auto remote = RemoteTier::Create(DemoRemoteTierOptions((*daemon)->target()));
    if (!remote.ok()) return remote.status();
    const auto tc = Clock::now();
    std::vector<std::byte> buf;
    for (const ChunkInfo& c : chunks) {
      buf.resize(c.record_bytes);
      auto n = (*disk)->Get(c.key, buf);
      if (!n.ok()) return n.status();
      if (absl::Status s = (*remote)->Put(std::span<const std::byte>(buf.data(), *n)); !s.ok())
        return s;
    }
    std::fprintf(stderr,
                 "  stored %zu chunks (%.1f MB) into kvtierd through the remote tier in %.0f ms\n",
                 chunks.size(), static_cast<double>(total) / 1e6, Seconds(tc) * 1e3);
    disk->reset();  // the disk tier is single-process; the fresh process does not use it, but close
                    // it anyway
    auto results = RunFreshPhase(flags, model, rows, "kvtierd", (*daemon)->target());
    if (!results.ok()) return results.status();
    for (size_t i = 0; i < rows.size(); ++i) {
      rows[i].kvtierd_s = (*results)[i]["ttft_s"].get<double>();
      rows[i].loaded_kvtierd = (*results)[i]["loaded"].get<uint64_t>();
      rows[i].identical_kvtierd = (*results)[i]["identical"].get<bool>();
    }
    return absl::OkStatus();
  }();
  absl::Status stopped = (*daemon)->Stop();
  if (stopped.ok()) std::fprintf(stderr, "  kvtierd stopped (SIGTERM, exit code 0)\n");
  return result.ok() ? stopped : result;
#endif
}

int Main(const Flags& flags) {
  if (!flags.fresh_phase.empty()) return FreshPhase(flags);
  std::error_code ec;
  std::filesystem::remove_all(flags.dir + "/cache", ec);  // every run starts cold
  std::filesystem::create_directories(RunDir(flags), ec);
  auto model = EnsureModel(flags);
  if (!model.ok()) {
    std::fprintf(stderr, "kvtier-demo: %s\n", model.status().ToString().c_str());
    return 1;
  }
  auto engine_or = LlamaEngine::Create(MakeEngineOptions(flags, *model));
  if (!engine_or.ok()) {
    std::fprintf(stderr, "kvtier-demo: %s\n", engine_or.status().ToString().c_str());
    return 1;
  }
  LlamaEngine& engine = **engine_or;
  WorkloadOptions wo;
  wo.data_dir = flags.data_dir;
  auto requests_or = BuildWorkloads(engine, wo);
  if (!requests_or.ok()) {
    std::fprintf(stderr, "kvtier-demo: %s\n", requests_or.status().ToString().c_str());
    return 1;
  }
  const std::vector<Request>& requests = *requests_or;
  const KvLayout& layout = engine.layout();
  std::fprintf(
      stderr,
      "kvtier-demo: model %s (%s), %d threads, flash attention %s, KV %s = %llu bytes/token, "
      "chunk %u tokens\n  llama.cpp %s (llama-cpp-python %s); %zu requests; tiers in %s\n",
      model->c_str(), engine.has_vocab() ? "tokenizer from GGUF" : "no tokenizer: bytes->ids",
      flags.threads, flags.flash_attn ? "on" : "off", layout.DebugString().c_str(),
      static_cast<unsigned long long>(layout.bytes_per_token()), flags.chunk_tokens,
      std::string(LlamaCppCommit()).c_str(), std::string(LlamaCppPackageVersion()).c_str(),
      requests.size(), flags.dir.c_str());
  const double memcpy_bw = MeasureMemcpyBandwidth();

  std::vector<Row> rows(requests.size());
  auto no_kvtier = LlamaKvAdapter::Create(&engine, nullptr);
  if (!no_kvtier.ok()) return 1;
  // Phase 1: cold.
  std::fprintf(stderr, "phase 1/4: cold (engine alone)\n");
  std::vector<std::vector<float>> cold_logits(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const Request& rq = requests[i];
    RunOptions o;
    o.use_kvtier = false;
    o.progress = MakeProgress(absl::StrFormat("cold %s #%d", rq.workload, rq.index), 1024);
    const auto t0 = Clock::now();
    auto r = (*no_kvtier)->Run(rq.tokens, o);
    if (!r.ok()) {
      std::fprintf(stderr, "kvtier-demo: %s\n", r.status().ToString().c_str());
      return 1;
    }
    rows[i].cold_wall_s = Seconds(t0);
    rows[i].workload = rq.workload;
    rows[i].index = rq.index;
    rows[i].prompt_tokens = rq.tokens.size();
    rows[i].cold_s = r->ttft_s;
    cold_logits[i] = std::move(r->logits);
    std::fprintf(stderr, "  %-9s #%d  %5zu tokens  TTFT %8.1f ms\n", rq.workload.c_str(), rq.index,
                 rq.tokens.size(), r->ttft_s * 1e3);
  }

  // Phase 2: warm from the host tier (and write-through to disk).
  std::fprintf(stderr, "phase 2/4: kvtier, host tier (+ disk write-through)\n");
  double decode1_s = 0;
  double no_reuse_flush_s = 0;
  {
    auto store = OpenStore(flags, /*host=*/true);
    if (!store.ok()) {
      std::fprintf(stderr, "kvtier-demo: %s\n", store.status().ToString().c_str());
      return 1;
    }
    auto connector = OpenConnector(engine, flags, *store);
    if (!connector.ok()) {
      std::fprintf(stderr, "kvtier-demo: %s\n", connector.status().ToString().c_str());
      return 1;
    }
    auto adapter = LlamaKvAdapter::Create(&engine, *connector);
    if (!adapter.ok()) {
      std::fprintf(stderr, "kvtier-demo: %s\n", adapter.status().ToString().c_str());
      return 1;
    }
    for (size_t i = 0; i < requests.size(); ++i) {
      const Request& rq = requests[i];
      if (rq.workload == "no-reuse" && (i == 0 || requests[i - 1].workload != "no-reuse")) {
        (*store)->Flush();  // the no-reuse set starts with an idle store
      }
      if (rq.workload == "no-reuse") {
        // Cold again right before the kvtier run, so both see the same machine load.
        RunOptions co;
        co.use_kvtier = false;
        const auto tc = Clock::now();
        auto c = (*adapter)->Run(rq.tokens, co);
        if (!c.ok()) {
          std::fprintf(stderr, "kvtier-demo: %s\n", c.status().ToString().c_str());
          return 1;
        }
        rows[i].cold_wall_s = Seconds(tc);
        rows[i].cold_s = c->ttft_s;
        cold_logits[i] = std::move(c->logits);
      }
      RunOptions o;
      o.progress = MakeProgress(absl::StrFormat("host %s #%d", rq.workload, rq.index), 1024);
      const auto t0 = Clock::now();
      auto r = (*adapter)->Run(rq.tokens, o);
      if (!r.ok()) {
        std::fprintf(stderr, "kvtier-demo: %s\n", r.status().ToString().c_str());
        return 1;
      }
      rows[i].host_wall_s = Seconds(t0);
      rows[i].host_s = r->ttft_s;
      rows[i].loaded_host = r->loaded_tokens;
      rows[i].load_bytes = r->load_bytes;
      // Recompute reference: the same calls with the loaded prefix prefilled instead.
      std::vector<float> ref;
      if (r->loaded_tokens > 0) {
        RunOptions ro;
        ro.use_kvtier = false;
        // With a load/compute overlap the state held [0, front) computed and the back
        // loaded after it: the reference prefills both, then the rest.
        ro.recompute_prefix_tokens = r->overlap_front_tokens + r->loaded_tokens;
        ro.progress =
            MakeProgress(absl::StrFormat("recompute %s #%d", rq.workload, rq.index), 1024);
        auto rr = (*adapter)->Run(rq.tokens, ro);
        if (!rr.ok()) {
          std::fprintf(stderr, "kvtier-demo: %s\n", rr.status().ToString().c_str());
          return 1;
        }
        rows[i].tail_s = rr->tail_prefill_s;
        ref = std::move(rr->logits);
        if (decode1_s == 0 && r->loaded_tokens >= 4000) {
          // One-token decode on top of this long context (for the TTFT target).
          const TokenId next[1] = {rq.tokens.back()};
          const auto td = Clock::now();
          if (engine.Prefill(next, static_cast<uint32_t>(rq.tokens.size()), true).ok())
            decode1_s = Seconds(td);
        }
      } else {
        ref = cold_logits[i];  // nothing loaded: the recompute is the cold run
        rows[i].tail_s = r->tail_prefill_s;
      }
      rows[i].identical_host = SameBits(r->logits, ref);
      if (absl::Status s = WriteFloats(absl::StrFormat("%s/ref-%d.bin", RunDir(flags), i), ref);
          !s.ok()) {
        std::fprintf(stderr, "kvtier-demo: %s\n", s.ToString().c_str());
        return 1;
      }
      std::fprintf(stderr, "  %-9s #%d  %5zu tokens  loaded %5llu  TTFT %8.1f ms  logits %s\n",
                   rq.workload.c_str(), rq.index, rq.tokens.size(),
                   static_cast<unsigned long long>(r->loaded_tokens), r->ttft_s * 1e3,
                   rows[i].identical_host ? "identical" : "DIFFERENT");
      // Later requests see this one's chunks (a real server's next request would too);
      // outside TTFT. For the no-reuse set the flush is counted against kvtier.
      const auto tf = Clock::now();
      (*connector)->Flush();
      if (rq.workload == "no-reuse") no_reuse_flush_s += Seconds(tf);
    }
    (*connector)->Flush();
    (*store)->Flush();
  }  // closes the disk tier so the next process can open it

  // Phase 3: a fresh process on the disk tier.
  std::fprintf(stderr, "phase 3/4: kvtier, disk tier, fresh process\n");
  {
    auto results = RunFreshPhase(flags, *model, rows, "disk", "");
    if (!results.ok()) {
      std::fprintf(stderr, "kvtier-demo: %s\n", results.status().ToString().c_str());
      return 1;
    }
    for (size_t i = 0; i < rows.size(); ++i) {
      rows[i].disk_s = (*results)[i]["ttft_s"].get<double>();
      rows[i].loaded_disk = (*results)[i]["loaded"].get<uint64_t>();
      rows[i].identical_disk = (*results)[i]["identical"].get<bool>();
    }
  }

  // Phase 4: kvtierd (started here, stopped before KvtierdPhase returns), fresh process.
  std::fprintf(stderr, "phase 4/4: kvtier, remote tier -> kvtierd, fresh process\n");
  std::string kvtierd_na;
  if (absl::Status s = KvtierdPhase(flags, *model, rows, &kvtierd_na); !s.ok()) {
    std::fprintf(stderr, "kvtier-demo: kvtierd phase: %s\n", s.ToString().c_str());
    return 1;
  }
  const bool have_kvtierd = kvtierd_na.empty();
  if (!have_kvtierd) std::fprintf(stderr, "  kvtierd n/a: %s\n", kvtierd_na.c_str());
  auto row_identical = [&](const Row& r) {
    return r.identical_host && r.identical_disk && r.loaded_disk == r.loaded_host &&
           (!have_kvtierd || (r.identical_kvtierd && r.loaded_kvtierd == r.loaded_host));
  };

  // Report.
  if (flags.json_out) {
    for (const Row& r : rows) {
      json j = {{"workload", r.workload},
                {"request", r.index},
                {"prompt_tokens", r.prompt_tokens},
                {"loaded_tokens", r.loaded_host},
                {"loaded_tokens_disk", r.loaded_disk},
                {"ttft_cold_ms", r.cold_s * 1e3},
                {"ttft_host_ms", r.host_s * 1e3},
                {"ttft_disk_ms", r.disk_s * 1e3},
                {"ttft_kvtierd_ms", have_kvtierd ? json(r.kvtierd_s * 1e3) : json(nullptr)},
                {"loaded_tokens_kvtierd", have_kvtierd ? json(r.loaded_kvtierd) : json(nullptr)},
                {"logits_identical", row_identical(r)}};
      std::printf("%s\n", j.dump().c_str());
    }
  } else {
    std::printf("\n%-9s %3s %7s %7s %10s %10s %10s %10s %8s %8s %9s %9s\n", "workload", "#",
                "prompt", "loaded", "cold ms", "host ms", "disk ms", "kvtierd ms", "x host",
                "x disk", "x kvtierd", "identical");
    for (const Row& r : rows) {
      const std::string kvtierd_ms =
          have_kvtierd ? absl::StrFormat("%.1f", r.kvtierd_s * 1e3) : "n/a";
      const std::string kvtierd_x =
          have_kvtierd ? absl::StrFormat("%.2fx", r.cold_s / r.kvtierd_s) : "n/a";
      std::printf("%-9s %3d %7llu %7llu %10.1f %10.1f %10.1f %10s %7.2fx %7.2fx %9s %9s\n",
                  r.workload.c_str(), r.index, static_cast<unsigned long long>(r.prompt_tokens),
                  static_cast<unsigned long long>(r.loaded_host), r.cold_s * 1e3, r.host_s * 1e3,
                  r.disk_s * 1e3, kvtierd_ms.c_str(), r.cold_s / r.host_s, r.cold_s / r.disk_s,
                  kvtierd_x.c_str(), row_identical(r) ? "yes" : "NO");
    }
    if (!have_kvtierd) std::printf("kvtierd: n/a (%s)\n", kvtierd_na.c_str());
  }
  // Targets (stderr in --json mode so stdout stays rows only).
  FILE* out = flags.json_out ? stderr : stdout;
  std::fprintf(out, "\nmemcpy bandwidth (1 thread, this run): %.2f GB/s\n", memcpy_bw / 1e9);
  bool reported = false;
  for (const Row& r : rows) {
    if (r.loaded_host < 4000) continue;
    const double bound = static_cast<double>(r.load_bytes) / memcpy_bw + decode1_s + r.tail_s;
    std::fprintf(
        out,
        "target warm TTFT <= 1.5 x bound [%s #%d, %llu cached tokens]: bound = %.1f MB / memcpy "
        "(%.1f ms) + 1-token decode (%.1f ms) + tail prefill of %llu tokens (%.1f ms) = %.1f ms; "
        "warm-host %.1f ms -> ratio %.2f; warm-disk %.1f ms -> ratio %.2f%s\n",
        r.workload.c_str(), r.index, static_cast<unsigned long long>(r.loaded_host),
        static_cast<double>(r.load_bytes) / 1e6,
        static_cast<double>(r.load_bytes) / memcpy_bw * 1e3, decode1_s * 1e3,
        static_cast<unsigned long long>(r.prompt_tokens - r.loaded_host), r.tail_s * 1e3,
        bound * 1e3, r.host_s * 1e3, r.host_s / bound, r.disk_s * 1e3, r.disk_s / bound,
        have_kvtierd ? absl::StrFormat("; warm-kvtierd %.1f ms -> ratio %.2f", r.kvtierd_s * 1e3,
                                       r.kvtierd_s / bound)
                           .c_str()
                     : "");
    reported = true;
  }
  if (!reported)
    std::fprintf(out, "target warm TTFT: no request loaded >= 4000 tokens in this run\n");
  double cold_total = 0, kvt_total = no_reuse_flush_s;
  for (const Row& r : rows) {
    if (r.workload != "no-reuse") continue;
    cold_total += r.cold_wall_s;
    kvt_total += r.host_wall_s;
  }
  if (cold_total > 0) {
    std::fprintf(
        out,
        "target no-reuse time <= 1.02 x without kvtier: %.1f ms with kvtier (lookup, miss, store, "
        "flush) vs %.1f ms without -> ratio %.3f\n",
        kvt_total * 1e3, cold_total * 1e3, kvt_total / cold_total);
  }
  bool all_identical = true;
  for (const Row& r : rows) all_identical = all_identical && row_identical(r);
  std::fprintf(out, "logits bit-identical to recompute for every request: %s\n",
               all_identical ? "yes" : "NO");
  return all_identical ? 0 : 3;
}

}  // namespace
}  // namespace kvt::llamacpp::demo

namespace kvt::llamacpp::demo {
namespace {

bool HasDemoTexts(const std::filesystem::path& dir) {
  std::error_code ec;
  for (const char* f : {"chat.txt", "gpl-3.0.txt", "apache-2.0.txt"}) {
    if (!std::filesystem::is_regular_file(dir / f, ec)) return false;
  }
  return true;
}

// The folder with the demo texts, found at run time: --data-dir when given; else
// $KVTIER_DEMO_DATA; else data/ next to the binary or in ../share/kvtier/; else the
// source tree's data/ recorded at build time, if it still exists. Empty (after printing
// what was searched) when none has the three files.
std::string ResolveDataDir(const std::string& given) {
  if (!given.empty()) {
    if (HasDemoTexts(given)) return given;
    std::fprintf(
        stderr,
        "kvtier-demo: --data-dir %s: expected chat.txt, gpl-3.0.txt and apache-2.0.txt in it\n",
        given.c_str());
    return "";
  }
  std::vector<std::filesystem::path> candidates;
  if (const char* env = std::getenv("KVTIER_DEMO_DATA"); env != nullptr && *env != '\0')
    candidates.push_back(env);
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    candidates.push_back(exe.parent_path() / "data");
    candidates.push_back(exe.parent_path().parent_path() / "share" / "kvtier" / "data");
  }
#ifdef KVT_DEMO_DATA_DIR
  candidates.push_back(KVT_DEMO_DATA_DIR);
#endif
  std::string searched;
  for (const auto& c : candidates) {
    if (HasDemoTexts(c)) return c.string();
    searched += "\n  " + c.string();
  }
  std::fprintf(stderr,
               "kvtier-demo: no folder with the demo texts (chat.txt, gpl-3.0.txt, apache-2.0.txt) "
               "found; looked "
               "in:%s\npass --data-dir DIR (the kvtier source tree's data/ folder) or set "
               "KVTIER_DEMO_DATA\n",
               searched.c_str());
  return "";
}

}  // namespace
}  // namespace kvt::llamacpp::demo

int main(int argc, char** argv) {
  kvt::llamacpp::demo::Flags flags;
  CLI::App app{
      "kvtier-demo: llama.cpp prefill vs kvtier host/disk tiers and kvtierd on real text.\n"
      "Phases: 1 recompute (no kvtier), 2 kvtier host tier in this process, 3 disk tier in a fresh "
      "process, 4 kvtierd: the demo starts its own kvtierd (--kvtierd), stores every chunk into it "
      "through the remote tier, loads them in a fresh process and stops it (column n/a when "
      "--kvtierd is '' or the build has no daemon).\n"
      "Exit codes: 0 ok, 1 runtime error (model, engine, tier or kvtierd failure), 2 bad usage, "
      "3 logits not bit-identical to recompute for some request."};
  // Validators without a description, so --help shows no "INT:INT in [1 - 256]" noise.
  auto range = [](int lo, int hi) { return CLI::Range(lo, hi).description(""); };
  app.add_option("--model", flags.model, "GGUF model (default: generate the 270M demo model)");
  app.add_flag("--small", flags.small, "use the tiny generated model (quick run)");
  app.add_option("--threads", flags.threads, "engine threads, 1..256")
      ->check(range(1, 256))
      ->capture_default_str();
  app.add_option("--dir", flags.dir, "folder for models, host+disk tier files and run files")
      ->capture_default_str();
  app.add_option(
      "--data-dir", flags.data_dir,
      "folder with chat.txt, gpl-3.0.txt, apache-2.0.txt (default: $KVTIER_DEMO_DATA, data/ next "
      "to this binary, or the source tree's data/ if it still exists)");
  app.add_option("--chunk", flags.chunk_tokens, "tokens per kvtier chunk, 1..65536")
      ->check(range(1, 65536))
      ->capture_default_str();
  app.add_flag("--flash-attn", flags.flash_attn, "enable flash attention");
  app.add_flag("--json", flags.json_out, "print rows as JSON lines");
  app.add_option("--kvtierd", flags.kvtierd,
                 "kvtierd binary the demo starts for phase 4 ('' = skip, column n/a)")
      ->capture_default_str();
  app.add_option("--fresh-phase", flags.fresh_phase,
                 "internal: run a fresh-process phase from this plan")
      ->group("");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);  // prints the message; CLI11's own codes (105, 109, ...) are not used
    return 2;
  }
  flags.data_dir = kvt::llamacpp::demo::ResolveDataDir(flags.data_dir);
  if (flags.data_dir.empty()) return 2;
  spdlog::set_level(spdlog::level::warn);
  return kvt::llamacpp::demo::Main(flags);
}
