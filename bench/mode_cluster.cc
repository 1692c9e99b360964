// kvtier-bench cluster: the Redis Cluster tier (ClusterTier) vs raw Redis and loopback TCP,
// all measured in the same run on this machine:
//   tcp                 one loopback TCP stream, the same bytes;
//   redis GET/SET       raw hiredis SET/GET of values of the piece size, one request at a
//                       time on one connection (redis-benchmark's default, -P 1), 1 shard;
//   tier put/get        ClusterTier Put/Get of whole chunk records (pieces pipelined),
//                       1 shard with 1 client, 1 shard with 3 clients, 3 shards with 3 clients
//                       (aggregate bytes / wall time).
// Clusters are started here: redis-server processes on loopback ports, no persistence,
// slots assigned with CLUSTER ADDSLOTSRANGE (1 shard) or spread over 3 masters.
// Targets (issue 13): tier get >= 0.8 x raw redis GET; 3 shards x 3 clients >= 1.5 x one shard.
#if __has_include("kvstore/cluster_tier.h")  // built with the daemon parts (KVT_BUILD_DAEMON)
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "bench_mode.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/chunk_key.h"
#include "kvstore/cluster_tier.h"
#include "nlohmann/json.hpp"

namespace kvt::bench {
namespace {

using Clock = std::chrono::steady_clock;
double Gbps(uint64_t bytes, double s) { return s > 0 ? static_cast<double>(bytes) / s / 1e9 : 0; }
double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

bool PortFree(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return ok;
}

// A redis-server --cluster-enabled process; killed by the destructor.
struct Server {
  int port = 0;
  pid_t pid = -1;
  ~Server() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

redisReply* Cmd(int port, const std::vector<std::string>& args) {
  redisContext* c = redisConnectWithTimeout("127.0.0.1", port, timeval{1, 0});
  if (c == nullptr || c->err) {
    if (c) redisFree(c);
    return nullptr;
  }
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  auto* r = static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data()));
  redisFree(c);
  return r;
}

std::string CmdText(int port, const std::vector<std::string>& args) {
  redisReply* r = Cmd(port, args);
  std::string s = (r != nullptr && r->str != nullptr) ? std::string(r->str, r->len) : "";
  if (r) freeReplyObject(r);
  return s;
}

// Starts `n` masters and splits the 16384 slots evenly among them. "" or why not.
std::string StartCluster(const std::string& dir, int n, std::vector<std::unique_ptr<Server>>* out) {
  std::mt19937 rng(static_cast<unsigned>(getpid()));
  for (int i = 0; i < n; ++i) {
    auto s = std::make_unique<Server>();
    for (int t = 0; t < 1000 && s->port == 0; ++t) {
      int p = 20000 + static_cast<int>(rng() % 10000);
      if (PortFree(p) && PortFree(p + 10000)) s->port = p;
    }
    const std::string ps = std::to_string(s->port);
    std::vector<std::string> args = {"redis-server",
                                     "--port",
                                     ps,
                                     "--bind",
                                     "127.0.0.1",
                                     "--dir",
                                     dir,
                                     "--save",
                                     "",
                                     "--appendonly",
                                     "no",
                                     "--cluster-enabled",
                                     "yes",
                                     "--cluster-config-file",
                                     "nodes-" + ps + ".conf",
                                     "--maxmemory",
                                     "3gb",
                                     "--maxmemory-policy",
                                     "allkeys-lru",
                                     "--logfile",
                                     dir + "/redis-" + ps + ".log"};
    s->pid = fork();
    if (s->pid == 0) {
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execvp("redis-server", argv.data());
      _exit(127);
    }
    bool up = false;
    for (int t = 0; t < 500 && !up; ++t) {
      up = CmdText(s->port, {"PING"}) == "PONG";
      if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!up) return "redis-server did not start (apt-get install redis-server)";
    out->push_back(std::move(s));
  }
  for (int i = 0; i < n; ++i) {
    const int lo = 16384 * i / n, hi = 16384 * (i + 1) / n - 1;
    CmdText((*out)[i]->port, {"CLUSTER", "ADDSLOTSRANGE", std::to_string(lo), std::to_string(hi)});
    if (i > 0)
      CmdText((*out)[i]->port, {"CLUSTER", "MEET", "127.0.0.1", std::to_string((*out)[0]->port)});
  }
  for (int t = 0; t < 1000; ++t) {
    bool ok = true;
    for (auto& s : *out) {
      ok =
          ok && CmdText(s->port, {"CLUSTER", "INFO"}).find("cluster_state:ok") != std::string::npos;
      redisReply* r = Cmd(s->port, {"CLUSTER", "SLOTS"});
      ok = ok && r != nullptr && r->type == REDIS_REPLY_ARRAY &&
           r->elements == static_cast<size_t>(n);
      if (r) freeReplyObject(r);
    }
    if (ok) return "";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return "cluster did not become ok";
}

std::vector<std::vector<std::byte>> MakeRecords(int n, uint64_t payload_bytes, uint64_t seed) {
  KvLayout layout;  // Llama-3-8B: 128 KiB per token
  layout.num_layers = 32;
  layout.num_kv_heads = 8;
  layout.head_dim = 128;
  layout.dtype = DType::kBF16;
  const uint32_t tokens =
      static_cast<uint32_t>(std::max<uint64_t>(1, payload_bytes / layout.payload_bytes(1)));
  NamespaceParams np;
  np.model_id = absl::StrFormat("bench-cluster-%d", seed);
  np.layout = layout;
  np.chunk_tokens = tokens;
  const NamespaceId ns = ComputeNamespace(np);
  std::mt19937_64 rng(seed);
  std::vector<std::vector<std::byte>> out;
  ChunkKey parent = RootKey(ns);
  for (int i = 0; i < n; ++i) {
    std::vector<TokenId> toks(tokens);
    for (auto& t : toks) t = static_cast<TokenId>(rng() % 32000);
    std::vector<std::byte> payload(layout.payload_bytes(tokens));
    for (size_t j = 0; j + 8 <= payload.size(); j += 8) {
      uint64_t v = rng();
      std::memcpy(payload.data() + j, &v, 8);
    }
    ChunkHeader h;
    h.ns = ns;
    h.key = ChainChunkKey(parent, toks);
    h.parent = parent;
    h.token_count = tokens;
    h.layout = layout;
    out.push_back(*EncodeChunk(h, payload));
    parent = h.key;
  }
  return out;
}

double MeasureTcp(uint64_t total, size_t block) {
  sockaddr_in a;
  const int ls = BindLoopback(&a);
  listen(ls, 1);
  std::thread server([&] {
    int fd = accept(ls, nullptr, nullptr);
    std::vector<char> buf(block);
    uint64_t got = 0;
    while (got < total) {
      ssize_t n = recv(fd, buf.data(), std::min<uint64_t>(buf.size(), total - got), 0);
      if (n <= 0) break;
      got += static_cast<uint64_t>(n);
    }
    char ack = 1;
    (void)!send(fd, &ack, 1, 0);
    close(fd);
  });
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  std::vector<char> buf(block, 'x');
  auto t = Clock::now();
  for (uint64_t sent = 0; sent < total;) {
    ssize_t n = send(fd, buf.data(), std::min<uint64_t>(block, total - sent), 0);
    if (n <= 0) break;
    sent += static_cast<uint64_t>(n);
  }
  char ack;
  (void)!recv(fd, &ack, 1, 0);
  const double s = Since(t);
  close(fd);
  server.join();
  close(ls);
  return Gbps(total, s);
}

// Raw SET then GET of `total` bytes in values of `piece` bytes, one request at a time.
void MeasureRawRedis(int port, uint64_t total, size_t piece, double* set_gbps, double* get_gbps) {
  redisContext* c = redisConnectWithTimeout("127.0.0.1", port, timeval{2, 0});
  std::string value(piece, 'v');
  const int n = static_cast<int>((total + piece - 1) / piece);
  // Keys tagged so they all live in the one shard's slots.
  auto t = Clock::now();
  for (int i = 0; i < n; ++i)
    freeReplyObject(redisCommand(c, "SET rawbench{x}:%d %b", i, value.data(), value.size()));
  *set_gbps = Gbps(uint64_t(n) * piece, Since(t));
  std::vector<char> out(piece);
  t = Clock::now();
  for (int i = 0; i < n; ++i) {
    auto* r = static_cast<redisReply*>(redisCommand(c, "GET rawbench{x}:%d", i));
    if (r != nullptr && r->type == REDIS_REPLY_STRING)
      std::memcpy(out.data(), r->str, std::min(piece, r->len));
    freeReplyObject(r);
  }
  *get_gbps = Gbps(uint64_t(n) * piece, Since(t));
  redisFree(c);
}

// `clients` threads, each its own ClusterTier, each getting (or putting) every record.
// Returns aggregate GB/s; "" in *error or why not.
double MeasureTier(const std::vector<std::string>& seeds, uint64_t piece,
                   const std::vector<std::vector<std::byte>>& recs, int clients, bool put,
                   std::string* error) {
  std::vector<std::unique_ptr<ClusterTier>> tiers;
  for (int i = 0; i < clients; ++i) {
    ClusterTierOptions o;
    o.client.nodes = seeds;
    o.client.deadline = std::chrono::milliseconds(10000);
    o.client.io_timeout = std::chrono::milliseconds(10000);
    o.piece_bytes = piece;
    o.keyspace = "bench";
    auto t = ClusterTier::Create(o);
    if (!t.ok()) {
      *error = t.status().ToString();
      return 0;
    }
    tiers.push_back(std::move(*t));
  }
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  auto t = Clock::now();
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      std::vector<std::byte> out(recs[0].size());
      for (size_t i = 0; i < recs.size(); ++i) {
        const auto& r = recs[(i + static_cast<size_t>(c)) % recs.size()];
        if (put) {
          if (!tiers[c]->Put(r).ok()) failures.fetch_add(1);
        } else {
          auto h = DecodeChunkHeader(r);
          auto n = tiers[c]->Get(h->key, out);
          if (!n.ok() || *n != r.size()) failures.fetch_add(1);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  const double s = Since(t);
  if (failures.load() > 0)
    *error = absl::StrFormat("%d tier %s calls failed", failures.load(), put ? "put" : "get");
  uint64_t bytes = 0;
  for (auto& r : recs) bytes += r.size();
  return Gbps(bytes * static_cast<uint64_t>(clients), s);
}

int RunCluster(int argc, char** argv) {
  CLI::App app{"ClusterTier (Redis Cluster) put/get vs raw redis GET/SET and loopback TCP"};
  int chunks = 8, rounds = 3;
  double chunk_mib = 32, piece_mib = 4;
  bool json = false;
  app.add_option("--chunks", chunks, "records per measurement")->check(CLI::Range(1, 64));
  app.add_option("--chunk-mib", chunk_mib, "payload MiB per record (32 = 256 Llama-3-8B tokens)")
      ->check(CLI::Range(0.125, 256.0));
  app.add_option("--piece-mib", piece_mib, "piece size, MiB")->check(CLI::Range(0.0625, 512.0));
  app.add_option("--rounds", rounds, "interleaved rounds (medians reported)")
      ->check(CLI::Range(1, 20));
  app.add_flag("--json", json, "one JSON object");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  const uint64_t piece = static_cast<uint64_t>(piece_mib * 1048576);
  char tmpl[] = "/tmp/kvt-bench-cluster-XXXXXX";
  const std::string dir = mkdtemp(tmpl) ? tmpl : "/tmp";
  std::string error;
  std::vector<std::unique_ptr<Server>> one, three;
  if (std::string e = StartCluster(dir, 1, &one); !e.empty()) error = e;
  if (error.empty())
    if (std::string e = StartCluster(dir, 3, &three); !e.empty()) error = e;
  auto seeds = [](const std::vector<std::unique_ptr<Server>>& s) {
    std::vector<std::string> v;
    for (auto& x : s) v.push_back(absl::StrFormat("127.0.0.1:%d", x->port));
    return v;
  };
  const auto recs = MakeRecords(chunks, static_cast<uint64_t>(chunk_mib * 1048576), 1);
  uint64_t total = 0;
  for (auto& r : recs) total += r.size();
  std::map<std::string, std::vector<double>> f;
  for (int round = 0; round < rounds && error.empty(); ++round) {
    f["tcp_gbps"].push_back(MeasureTcp(total, piece));
    double set = 0, get = 0;
    MeasureRawRedis(one[0]->port, total, piece, &set, &get);
    f["redis_set_gbps"].push_back(set);
    f["redis_get_gbps"].push_back(get);
    f["tier_put_gbps_1shard"].push_back(MeasureTier(seeds(one), piece, recs, 1, true, &error));
    f["tier_get_gbps_1shard"].push_back(MeasureTier(seeds(one), piece, recs, 1, false, &error));
    f["tier_get_gbps_1shard_3clients"].push_back(
        MeasureTier(seeds(one), piece, recs, 3, false, &error));
    f["tier_put_gbps_3shards"].push_back(MeasureTier(seeds(three), piece, recs, 3, true, &error));
    f["tier_get_gbps_3shards"].push_back(MeasureTier(seeds(three), piece, recs, 3, false, &error));
  }
  one.clear();
  three.clear();
  std::filesystem::remove_all(dir);
  nlohmann::json out;
  out["chunk_bytes"] = recs[0].size();
  out["piece_bytes"] = piece;
  out["chunks"] = chunks;
  out["rounds"] = rounds;
  out["cores"] = std::thread::hardware_concurrency();
  for (auto& [k, v] : f) out[k] = Median(v);
  auto num = [&](const char* k) {
    return out.contains(k) && out[k].is_number() ? out[k].get<double>() : 0.0;
  };
  auto ratio = [&](const char* a, const char* b) { return num(b) > 0 ? num(a) / num(b) : 0.0; };
  out["tier_get_over_redis_get"] = ratio("tier_get_gbps_1shard", "redis_get_gbps");
  out["tier_get_3shards_over_1shard"] = ratio("tier_get_gbps_3shards", "tier_get_gbps_1shard");
  out["tier_get_over_tcp"] = ratio("tier_get_gbps_1shard", "tcp_gbps");
  if (!error.empty()) out["error"] = error;
  if (json) {
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf(
        "kvtier-bench cluster: %d records of %.1f MiB in %.2f MiB pieces, %d interleaved rounds, "
        "medians, %u cores\n",
        chunks, recs[0].size() / 1048576.0, piece / 1048576.0, rounds,
        std::thread::hardware_concurrency());
    std::printf("  %-34s %8s  %s\n", "path", "GB/s", "ratio");
    std::printf("  %-34s %8.2f\n", "loopback TCP (1 stream)", num("tcp_gbps"));
    std::printf("  %-34s %8.2f\n", "raw redis SET (piece values, -P 1)", num("redis_set_gbps"));
    std::printf("  %-34s %8.2f  %.2f x TCP\n", "raw redis GET (piece values, -P 1)",
                num("redis_get_gbps"), ratio("redis_get_gbps", "tcp_gbps"));
    std::printf("  %-34s %8.2f\n", "tier put, 1 shard, 1 client", num("tier_put_gbps_1shard"));
    std::printf("  %-34s %8.2f  %.2f x raw redis GET (target 0.8), %.2f x TCP\n",
                "tier get, 1 shard, 1 client", num("tier_get_gbps_1shard"),
                ratio("tier_get_gbps_1shard", "redis_get_gbps"),
                ratio("tier_get_gbps_1shard", "tcp_gbps"));
    std::printf("  %-34s %8.2f  %.2f x 1 shard 1 client\n", "tier get, 1 shard, 3 clients",
                num("tier_get_gbps_1shard_3clients"),
                ratio("tier_get_gbps_1shard_3clients", "tier_get_gbps_1shard"));
    std::printf("  %-34s %8.2f\n", "tier put, 3 shards, 3 clients", num("tier_put_gbps_3shards"));
    std::printf("  %-34s %8.2f  %.2f x 1 shard (target 1.5)\n", "tier get, 3 shards, 3 clients",
                num("tier_get_gbps_3shards"),
                ratio("tier_get_gbps_3shards", "tier_get_gbps_1shard"));
    if (!error.empty()) std::printf("  error: %s\n", error.c_str());
  }
  return error.empty() ? 0 : 1;
}

KVT_BENCH_MODE(cluster,
               "Redis Cluster tier put/get (1 and 3 shards) vs raw redis GET/SET and loopback TCP",
               RunCluster);

}  // namespace
}  // namespace kvt::bench
#endif  // __has_include("kvstore/cluster_tier.h")
