// kvtier-bench soak: N client processes against one kvtierd for a given number of minutes.
//
// The daemon is the real kvtierd binary (next to this binary in ../daemon/, or --kvtierd,
// or $KVTIERD) on a unix socket in a temp dir. Each client is a forked process with its
// own kvt::RemoteClient (gRPC) that loops: store a new prompt (--chunks-per-prompt chained
// chunk records of --tokens tokens, Llama-3.2-1B's layout by default: 16 layers, 8 KV
// heads, head_dim 64, bf16 = 32 KiB per token, 8 MiB per 256-token chunk), then revisit a
// random earlier prompt: Lookup its keys, Get the leading hits, verify each record
// (VerifyChunk) and compare every payload byte with the bytes it was stored with
// (regenerated from the key). It prints:
//  * peak RSS of kvtierd (VmHWM, and the highest VmRSS sampled every 100 ms) against the
//    configured budget = host_capacity + max_inflight_bytes + writeback_queue_bytes +
//    128 MiB for code, gRPC and
//    the RocksDB index (the bounds the daemon is configured with: docs/daemon.md);
//  * errors: failed Puts, failed Lookups, Gets failing with anything but NotFound
//    (a miss after eviction is not an error), clients that died;
//  * wrong_bytes: bytes of returned records that differ from what was stored (a record
//    that fails verification counts whole). Must be 0.
// Exit 0 only when errors == 0, wrong_bytes == 0 and peak RSS is within the budget.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench_mode.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/chunk_key.h"
#include "kvstore/remote_client.h"
#include "nlohmann/json.hpp"

namespace kvt::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct SoakOptions {
  double minutes = 1;
  int clients = 8;
  uint32_t tokens = 256;
  int chunks_per_prompt = 4;
  KvLayout layout{16, 8, 64, DType::kBF16, LayoutKind::kFlashAttnNHD};
  uint64_t host_bytes = 512ull << 20;
  uint64_t disk_bytes = 2ull << 30;
  uint64_t inflight_bytes = 256ull << 20;
  uint64_t writeback_bytes = 128ull << 20;
  std::string durability = "async";
  std::string kvtierd;
};

struct ClientResult {
  uint64_t puts = 0, gets = 0, hits = 0, misses = 0, lookups = 0, errors = 0, wrong_bytes = 0,
           bytes_put = 0, bytes_got = 0;
  std::string first_error;
};

uint64_t ProcStatusKiB(pid_t pid, const char* field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  const size_t n = std::strlen(field);
  while (std::getline(in, line)) {
    if (line.compare(0, n, field) == 0) return std::strtoull(line.c_str() + n, nullptr, 10);
  }
  return 0;
}

// Payload of a chunk: a splitmix64 stream seeded by its key, so a reader can regenerate
// exactly what the writer stored.
void FillPayload(const ChunkKey& key, std::span<std::byte> out) {
  uint64_t x = key.lo ^ (key.hi * 0x9E3779B97F4A7C15ull);
  size_t i = 0;
  for (; i + 8 <= out.size(); i += 8) {
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    std::memcpy(out.data() + i, &z, 8);
  }
  for (; i < out.size(); ++i) out[i] = std::byte(x >> (i % 8));
}

// Keys of prompt `p` of client `c`: chained over tokens derived from (c, p).
std::vector<ChunkKey> PromptKeys(NamespaceId ns, int c, uint64_t p, const SoakOptions& o) {
  std::mt19937 rng(static_cast<uint32_t>(c * 1000003u + p * 7919u + 17u));
  std::vector<TokenId> tokens(o.tokens * o.chunks_per_prompt);
  for (auto& t : tokens) t = static_cast<TokenId>(rng() % 128000);
  return ComputeChunkKeys(ns, tokens, ChunkKeyOptions{.chunk_tokens = o.tokens});
}

void Fail(ClientResult& r, const std::string& what, const absl::Status& s) {
  ++r.errors;
  if (r.first_error.empty()) r.first_error = what + ": " + s.ToString();
}

ClientResult RunClient(int c, const std::string& target, NamespaceId ns, const SoakOptions& o,
                       Clock::time_point until) {
  ClientResult r;
  RemoteClientOptions co;
  co.target = target;
  co.deadline = std::chrono::milliseconds(30000);
  auto client = RemoteClient::Create(co);
  if (!client.ok()) {
    Fail(r, "connect", client.status());
    return r;
  }
  const uint64_t payload_bytes = o.layout.payload_bytes(o.tokens);
  std::vector<std::byte> record(kChunkHeaderBytes + payload_bytes), got(record.size()),
      want(payload_bytes);
  std::mt19937_64 rng(c * 31 + 7);
  uint64_t prompts = 0;
  while (Clock::now() < until) {
    // Store a new prompt, chunk by chunk (parent chain as an engine would).
    const std::vector<ChunkKey> keys = PromptKeys(ns, c, prompts, o);
    for (size_t i = 0; i < keys.size(); ++i) {
      ChunkHeader h;
      h.ns = ns;
      h.key = keys[i];
      h.parent = i == 0 ? RootKey(ns) : keys[i - 1];
      h.token_count = o.tokens;
      h.layout = o.layout;
      std::span<std::byte> payload(record.data() + kChunkHeaderBytes, payload_bytes);
      FillPayload(h.key, payload);
      if (absl::Status s = EncodeChunk(h, payload, record); !s.ok()) {
        Fail(r, "encode", s);
        continue;
      }
      absl::Status s = (*client)->Put(record);
      if (!s.ok()) {
        Fail(r, "put", s);
      } else {
        ++r.puts;
        r.bytes_put += record.size();
      }
    }
    ++prompts;
    // Revisit a random earlier prompt: Lookup, then Get + verify the leading hits.
    const uint64_t p = rng() % prompts;
    const std::vector<ChunkKey> old = PromptKeys(ns, c, p, o);
    auto lookup = (*client)->Lookup(old);
    ++r.lookups;
    if (!lookup.ok()) {
      Fail(r, "lookup", lookup.status());
      continue;
    }
    for (size_t i = 0; i < lookup->num_leading_hits && i < old.size(); ++i) {
      auto n = (*client)->Get(old[i], got);
      ++r.gets;
      if (!n.ok()) {
        if (n.status().code() == absl::StatusCode::kNotFound) {
          ++r.misses;  // evicted between Lookup and Get
        } else {
          Fail(r, "get", n.status());
        }
        continue;
      }
      ++r.hits;
      r.bytes_got += *n;
      std::span<const std::byte> rec(got.data(), *n);
      auto h = VerifyChunk(rec, DecodeExpectations{ns, old[i], &o.layout, o.tokens});
      if (!h.ok() || *n != record.size()) {
        r.wrong_bytes += *n;
        if (r.first_error.empty()) r.first_error = "wrong record: " + h.status().ToString();
        continue;
      }
      FillPayload(old[i], want);
      const std::byte* a = rec.data() + kChunkHeaderBytes;
      for (size_t b = 0; b < payload_bytes; ++b) r.wrong_bytes += a[b] != want[b];
      const ChunkKey parent = i == 0 ? RootKey(ns) : old[i - 1];
      if (h->parent != parent) r.wrong_bytes += 16;
    }
  }
  return r;
}

nlohmann::json ToJson(const ClientResult& r) {
  return {{"puts", r.puts},
          {"gets", r.gets},
          {"hits", r.hits},
          {"misses", r.misses},
          {"lookups", r.lookups},
          {"errors", r.errors},
          {"wrong_bytes", r.wrong_bytes},
          {"bytes_put", r.bytes_put},
          {"bytes_got", r.bytes_got},
          {"first_error", r.first_error}};
}

pid_t SpawnDaemon(const std::string& bin, const std::string& dir) {
  return Spawn({bin, "--config", dir + "/kvtierd.yaml"}, dir + "/kvtierd.log");
}

int RunSoak(int argc, char** argv) {
  CLI::App app{"N client processes (remote client, real chunk sizes) against one kvtierd"};
  SoakOptions o;
  bool json = false;
  app.add_flag("--json", json, "print one JSON object");
  app.add_option("--minutes", o.minutes, "how long the clients run")
      ->check(CLI::Range(0.01, 1440.0));
  app.add_option("--clients", o.clients, "client processes")->check(CLI::Range(1, 64));
  app.add_option("--tokens", o.tokens, "tokens per chunk")->check(CLI::Range(1, 2048));
  app.add_option("--chunks-per-prompt", o.chunks_per_prompt, "chunks per stored prompt")
      ->check(CLI::Range(1, 64));
  app.add_option("--layers", o.layout.num_layers, "model layers (default Llama-3.2-1B: 16)")
      ->check(CLI::Range(1, 256));
  app.add_option("--kv-heads", o.layout.num_kv_heads, "KV heads (8)")->check(CLI::Range(1, 256));
  app.add_option("--head-dim", o.layout.head_dim, "head dim (64)")->check(CLI::Range(1, 1024));
  uint64_t host_mib = o.host_bytes >> 20, disk_mib = o.disk_bytes >> 20;
  app.add_option("--host-capacity-mib", host_mib, "kvtierd host tier, MiB (512)")
      ->check(CLI::Range(16, 1 << 20));
  app.add_option("--disk-capacity-mib", disk_mib, "kvtierd disk tier, MiB (2048)")
      ->check(CLI::Range(64, 1 << 24));
  app.add_option("--durability", o.durability, "kvtierd durability")
      ->check(CLI::IsMember({"sync", "async"}));
  app.add_option("--kvtierd", o.kvtierd, "path of the kvtierd binary");
  CLI11_PARSE(app, argc, argv);
  o.host_bytes = host_mib << 20;
  o.disk_bytes = disk_mib << 20;
  const uint64_t record_bytes = kChunkHeaderBytes + o.layout.payload_bytes(o.tokens);
  if (record_bytes > o.inflight_bytes / 2 || record_bytes * 4 > o.host_bytes) {
    std::fprintf(
        stderr,
        "kvtier-bench soak: %llu-byte records do not fit the host tier / in-flight budget\n",
        static_cast<unsigned long long>(record_bytes));
    return 2;
  }

  std::string tmpl = "/tmp/kvt-bench-soak-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) return 1;
  const std::string dir = tmpl;
  const std::string target = "unix://" + dir + "/kvtierd.sock";
  const uint64_t file_bytes =
      std::max<uint64_t>(64ull << 20, (record_bytes + 4095) / 4096 * 4096 * 4);
  {
    std::ofstream cfg(dir + "/kvtierd.yaml");
    cfg << "listen: " << target << "\ndata_dir: " << dir << "/data\nhost_capacity: " << o.host_bytes
        << "\ndisk_capacity: " << o.disk_bytes << "\ndisk_file_bytes: " << file_bytes
        << "\nmax_record_bytes: " << std::min<uint64_t>(file_bytes, 256ull << 20)
        << "\nmax_inflight_bytes: " << o.inflight_bytes
        << "\nwriteback_queue_bytes: " << o.writeback_bytes << "\ndurability: " << o.durability
        << "\nworkers: 2\nlog_level: warn\nmetrics:\n  listen: \"\"\nready_file: " << dir
        << "/ready.json\n";
  }
  const uint64_t budget = o.host_bytes + o.inflight_bytes + o.writeback_bytes + (128ull << 20);
  const std::string bin = FindKvtierd(o.kvtierd);
  pid_t daemon = SpawnDaemon(bin, dir);
  bool ready = false;
  for (int i = 0; i < 3000 && !ready; ++i) {
    ready = std::filesystem::exists(dir + "/ready.json");
    if (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!ready) {
    std::fprintf(stderr,
                 "kvtier-bench soak: kvtierd (%s) did not start in 30 s (log %s/kvtierd.log)\n",
                 bin.c_str(), dir.c_str());
    kill(daemon, SIGKILL);
    return 1;
  }
  const NamespaceId ns = ComputeNamespace(NamespaceParams{
      .model_id = "kvtier-bench-soak", .layout = o.layout, .chunk_tokens = o.tokens});
  const auto start = Clock::now();
  const auto until = start + std::chrono::milliseconds(static_cast<int64_t>(o.minutes * 60000));
  std::vector<pid_t> kids;
  for (int c = 0; c < o.clients; ++c) {
    pid_t pid = fork();
    if (pid == 0) {  // gRPC is first initialised here, after the fork
      ClientResult r = RunClient(c, target, ns, o, until);
      std::ofstream(dir + "/client-" + std::to_string(c) + ".json") << ToJson(r).dump();
      _exit(0);
    }
    kids.push_back(pid);
  }
  uint64_t peak_rss_kib = 0;
  size_t running = kids.size();
  std::vector<bool> done(kids.size(), false);
  int died = 0;
  while (running > 0) {
    peak_rss_kib = std::max(peak_rss_kib, ProcStatusKiB(daemon, "VmRSS:"));
    for (size_t i = 0; i < kids.size(); ++i) {
      int st = 0;
      if (!done[i] && waitpid(kids[i], &st, WNOHANG) == kids[i]) {
        done[i] = true;
        --running;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) ++died;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  peak_rss_kib = std::max(peak_rss_kib, ProcStatusKiB(daemon, "VmHWM:"));
  int dst = 0;
  const bool daemon_alive = waitpid(daemon, &dst, WNOHANG) == 0;
  kill(daemon, SIGTERM);
  waitpid(daemon, &dst, 0);
  const bool clean_exit = WIFEXITED(dst) && WEXITSTATUS(dst) == 0;

  ClientResult total;
  nlohmann::json per_client = nlohmann::json::array();
  for (int c = 0; c < o.clients; ++c) {
    std::ifstream in(dir + "/client-" + std::to_string(c) + ".json");
    auto j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded()) {
      ++died;
      continue;
    }
    per_client.push_back(j);
    total.puts += j["puts"].get<uint64_t>();
    total.gets += j["gets"].get<uint64_t>();
    total.hits += j["hits"].get<uint64_t>();
    total.misses += j["misses"].get<uint64_t>();
    total.errors += j["errors"].get<uint64_t>();
    total.wrong_bytes += j["wrong_bytes"].get<uint64_t>();
    total.bytes_put += j["bytes_put"].get<uint64_t>();
    total.bytes_got += j["bytes_got"].get<uint64_t>();
    if (total.first_error.empty()) total.first_error = j["first_error"].get<std::string>();
  }
  const uint64_t errors = total.errors + died + (daemon_alive ? 0 : 1) + (clean_exit ? 0 : 1);
  const double peak_mib = peak_rss_kib / 1024.0, budget_mib = budget / double(1 << 20);
  const bool ok = errors == 0 && total.wrong_bytes == 0 && peak_mib <= budget_mib;
  nlohmann::json out = {{"minutes", o.minutes},
                        {"clients", o.clients},
                        {"peak_rss_mib", peak_mib},
                        {"budget_mib", budget_mib},
                        {"wrong_bytes", total.wrong_bytes},
                        {"errors", errors},
                        {"seconds", seconds},
                        {"record_bytes", record_bytes},
                        {"puts", total.puts},
                        {"gets", total.gets},
                        {"hits", total.hits},
                        {"misses_after_lookup", total.misses},
                        {"put_mib_per_s", total.bytes_put / seconds / (1 << 20)},
                        {"get_mib_per_s", total.bytes_got / seconds / (1 << 20)},
                        {"clients_died", died},
                        {"daemon_alive_at_end", daemon_alive},
                        {"daemon_clean_exit", clean_exit},
                        {"host_capacity_mib", o.host_bytes >> 20},
                        {"disk_capacity_mib", o.disk_bytes >> 20},
                        {"max_inflight_mib", o.inflight_bytes >> 20},
                        {"writeback_queue_mib", o.writeback_bytes >> 20},
                        {"durability", o.durability},
                        {"first_error", total.first_error},
                        {"ok", ok}};
  if (json) {
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("soak: %d clients x %.1f min against kvtierd (durability %s), %llu-byte records\n",
                o.clients, o.minutes, o.durability.c_str(),
                static_cast<unsigned long long>(record_bytes));
    std::printf(
        "  peak RSS      %8.1f MiB   budget %.1f MiB (host %llu + in-flight %llu + write-back %llu "
        "+ 128) -> %.2f of budget\n",
        peak_mib, budget_mib, static_cast<unsigned long long>(o.host_bytes >> 20),
        static_cast<unsigned long long>(o.inflight_bytes >> 20),
        static_cast<unsigned long long>(o.writeback_bytes >> 20), peak_mib / budget_mib);
    std::printf("  puts %llu (%.0f MiB/s), gets %llu: %llu hits, %llu misses after lookup\n",
                static_cast<unsigned long long>(total.puts), total.bytes_put / seconds / (1 << 20),
                static_cast<unsigned long long>(total.gets),
                static_cast<unsigned long long>(total.hits),
                static_cast<unsigned long long>(total.misses));
    std::printf("  errors %llu, wrong bytes %llu%s%s\n", static_cast<unsigned long long>(errors),
                static_cast<unsigned long long>(total.wrong_bytes),
                total.first_error.empty() ? "" : "; first: ", total.first_error.c_str());
    std::printf("  %s\n", ok ? "OK" : "FAILED (errors, wrong bytes or over budget)");
  }
  std::error_code ec;
  if (ok)
    std::filesystem::remove_all(dir, ec);
  else
    std::fprintf(stderr, "kvtier-bench soak: kept %s (kvtierd.log, client-*.json)\n", dir.c_str());
  return ok ? 0 : 1;
}

}  // namespace

KVT_BENCH_MODE(soak,
               "N client processes against one kvtierd: peak RSS vs budget, errors, wrong bytes",
               RunSoak);

}  // namespace kvt::bench
