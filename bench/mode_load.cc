// kvtier-bench load: kvtierd under many engines (issue 25, "kvtierd under many engines").
//
// One real kvtierd (found next to this binary in ../daemon/, or --kvtierd, or $KVTIERD;
// temp dir, config file, ready file) listens on a unix socket and on a loopback TCP port.
// For each transport (unix, tcp), shm (off, on) and client count (1, 4, 16, 64 by
// default) the bench forks that many client processes, each with its own
// kvt::RemoteClient and so its own gRPC channel and connection. Processes, not threads:
// threads in one process would share one gRPC runtime (its polling threads, its
// allocator, one channel pool), and contention there would be counted as the daemon's;
// engines are separate processes too. Every client loops, closed loop, until the step's
// time is up:
//   put     one new chunk record (--tokens tokens of Llama-3.2-1B's layout: 32 KiB per
//           token, 4 MiB per 128-token chunk) under a key never used before;
//           with shm: RemoteClient::PutShmFrom (the client's copy into its region runs
//           beside the daemon's, counted);
//   lookup  the keys of its last --lookup-keys puts, one batched Lookup;
//   get     one of its last 2 records into the caller's buffer (shm: GetShmInto, the
//           client's copy out of the region counted), header checked against the key.
// Reported per (transport, shm, clients): aggregate GB/s (put + get bytes over the step's
// wall time) and ops/s, p50/p99 latency of each RPC kind, errors (any status but OK, a
// NotFound get counted apart as a miss) and kvtierd's RSS (VmRSS of /proc/<pid>/status,
// sampled every 50 ms, the highest).
//
// RSS budget, from the daemon's config (docs/daemon.md "Memory"): host_capacity +
// max_inflight_bytes + writeback_queue_bytes + shm.max_regions x shm.max_region_bytes
// (regions are the daemon's memfds; pages it touches count in its RSS) + 128 MiB fixed
// overhead (code, gRPC, RocksDB index, per-connection buffers).
//
// Targets (printed PASS/FAIL; n/a when a step was not run): for each transport and shm
// setting, 16 clients reach >= 0.8 x the aggregate GB/s of 4 clients, and p99 Get latency
// <= 3 x p50 at 16 clients; overall, errors == 0 and peak RSS <= the budget.
// Exit 0 when errors == 0 and RSS is within budget (timing targets do not fail the exit).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "bench_mode.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/chunk_key.h"
#include "kvstore/remote_client.h"
#include "kvstore/shm_progress.h"
#include "nlohmann/json.hpp"
#include "remote_peers.h"

namespace kvt::bench {
namespace {

using remote::Clock;
using remote::Stop;

struct LoadOptions {
  std::vector<int> clients = {1, 4, 16, 64};
  std::vector<std::string> transports = {"unix", "tcp"};
  std::vector<std::string> shm = {"off", "on"};
  double seconds = 5;
  uint32_t tokens = 128;
  int lookup_keys = 8;
  KvLayout layout{16, 8, 64, DType::kBF16, LayoutKind::kFlashAttnNHD};
  uint64_t host_bytes = 1ull << 30;
  uint64_t writeback_bytes = 128ull << 20;
  int workers = 4;
  std::string kvtierd;
};

// The kinds of RPC a client issues, in the order of its loop.
constexpr const char* kKinds[] = {"put", "lookup", "get"};
constexpr int kNumKinds = 3;

struct ClientResult {
  std::vector<float> us[kNumKinds];  // latency of every call, microseconds
  uint64_t bytes_put = 0, bytes_got = 0, errors = 0, misses = 0;
  // RPC attempts of the client's ShmAttach beyond the first: a retried attach whose first
  // attempt reached the daemon leaves a region attached there that no client knows.
  uint64_t attach_retries = 0;
  double start_s = 0, end_s = 0;  // steady clock, seconds: first call issued, last answered
  std::string first_error;
};

uint64_t ProcStatusKiB(pid_t pid, const char* field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  const size_t n = std::strlen(field);
  while (std::getline(in, line))
    if (line.compare(0, n, field) == 0) return std::strtoull(line.c_str() + n, nullptr, 10);
  return 0;
}

double SteadySeconds(Clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

void Fail(ClientResult& r, const std::string& what, const absl::Status& s) {
  ++r.errors;
  if (r.first_error.empty()) r.first_error = what + ": " + s.ToString();
}

// The key of put `seq` of client `c` in step `step`: never reused across the run.
ChunkKey KeyOf(NamespaceId ns, int step, int c, uint64_t seq, uint32_t tokens) {
  std::vector<TokenId> t(tokens);
  std::mt19937 rng(static_cast<uint32_t>(step * 7919u + c * 104729u + seq * 15485863u + 1u));
  for (auto& x : t) x = static_cast<TokenId>(rng() % 128000);
  return ComputeChunkKeys(ns, t, ChunkKeyOptions{.chunk_tokens = tokens})[0];
}

struct StepSpec {
  int step = 0;
  std::string target;
  bool shm = false;
  Clock::time_point start, until;
};

ClientResult RunClient(int c, const StepSpec& spec, NamespaceId ns, const LoadOptions& o) {
  ClientResult r;
  RemoteClientOptions co;
  co.target = spec.target;
  co.deadline = std::chrono::seconds(60);
  auto client = RemoteClient::Create(co);
  if (!client.ok()) {
    Fail(r, "connect", client.status());
    return r;
  }
  const uint64_t payload_bytes = o.layout.payload_bytes(o.tokens);
  const uint64_t rec_bytes = kChunkHeaderBytes + payload_bytes;
  const uint64_t slot = (rec_bytes + kShmProgressBlockBytes + 4095) & ~uint64_t{4095};
  std::unique_ptr<ShmSession> session;
  if (spec.shm) {
    const uint64_t before = (*client)->rpcs();
    auto s = (*client)->AttachShm(2 * slot);
    r.attach_retries = (*client)->rpcs() - before - 1;
    if (!s.ok()) {
      Fail(r, "shm attach", s.status());
      return r;
    }
    session = std::move(*s);
  } else if (auto h = (*client)->Health(); !h.ok()) {  // connect before the start
    Fail(r, "health", h.status());
  }
  std::vector<std::byte> record(rec_bytes), got(rec_bytes);
  std::mt19937_64 rng(c * 31 + spec.step * 1009 + 7);
  for (size_t i = 0; i + 8 <= payload_bytes; i += 8) {
    const uint64_t v = rng();
    std::memcpy(record.data() + kChunkHeaderBytes + i, &v, 8);
  }
  std::memset(got.data(), 0, got.size());
  std::vector<ChunkKey> keys;  // every key this client stored, in order
  std::this_thread::sleep_until(spec.start);
  r.start_s = SteadySeconds(Clock::now());
  auto timed = [&](int kind, auto&& call) {
    const auto t0 = Clock::now();
    call();
    r.us[kind].push_back(
        static_cast<float>(std::chrono::duration<double, std::micro>(Clock::now() - t0).count()));
  };
  for (uint64_t seq = 0; Clock::now() < spec.until; ++seq) {
    ChunkHeader h;
    h.ns = ns;
    h.key = KeyOf(ns, spec.step, c, seq, o.tokens);
    h.parent = RootKey(ns);
    h.token_count = o.tokens;
    h.layout = o.layout;
    std::span<const std::byte> payload(record.data() + kChunkHeaderBytes, payload_bytes);
    if (absl::Status s = EncodeChunk(h, payload, record); !s.ok()) {
      Fail(r, "encode", s);
      break;
    }
    timed(0, [&] {
      absl::Status s =
          session ? (*client)->PutShmFrom(*session, 0, slot, record) : (*client)->Put(record);
      if (s.ok()) {
        r.bytes_put += rec_bytes;
        keys.push_back(h.key);
      } else {
        Fail(r, "put", s);
      }
    });
    if (keys.empty()) continue;
    const size_t n = std::min<size_t>(keys.size(), o.lookup_keys);
    std::span<const ChunkKey> recent(keys.data() + keys.size() - n, n);
    timed(1, [&] {
      if (auto l = (*client)->Lookup(recent); !l.ok()) Fail(r, "lookup", l.status());
    });
    const ChunkKey want = keys[keys.size() - 1 - rng() % std::min<size_t>(keys.size(), 2)];
    timed(2, [&] {
      auto got_n = session ? (*client)->GetShmInto(*session, want, slot, slot, got)
                           : (*client)->Get(want, got);
      if (got_n.ok()) {
        auto gh = DecodeChunkHeader(std::span<const std::byte>(got.data(), *got_n));
        if (*got_n != rec_bytes || !gh.ok() || !(gh->key == want))
          Fail(r, "get", absl::DataLossError("returned record is not the one stored"));
        else
          r.bytes_got += *got_n;
      } else if (got_n.status().code() == absl::StatusCode::kNotFound) {
        ++r.misses;
      } else {
        Fail(r, "get", got_n.status());
      }
    });
  }
  r.end_s = SteadySeconds(Clock::now());
  // A failed detach leaves the region counted at the daemon (shm.max_regions): an error.
  if (session)
    if (absl::Status s = (*client)->DetachShm(*session); !s.ok()) Fail(r, "shm detach", s);
  return r;
}

void WriteResult(const ClientResult& r, const std::string& path) {
  nlohmann::json j = {{"bytes_put", r.bytes_put},     {"bytes_got", r.bytes_got},
                      {"errors", r.errors},           {"misses", r.misses},
                      {"start_s", r.start_s},         {"end_s", r.end_s},
                      {"first_error", r.first_error}, {"attach_retries", r.attach_retries}};
  for (int k = 0; k < kNumKinds; ++k) j[kKinds[k]] = r.us[k];
  std::ofstream(path) << j.dump();
}

double Percentile(std::vector<float>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(std::ceil(p * v.size())) - (p > 0 ? 1 : 0);
  return v[std::min(i, v.size() - 1)];
}

// CPU seconds kvtierd has used so far, user and system (/proc/<pid>/stat fields 14, 15).
std::pair<double, double> ProcCpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos) return {0, 0};
  std::istringstream rest(text.substr(close + 2));
  std::string field;
  double user = 0, sys = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) user = std::strtod(field.c_str(), nullptr);
    if (i == 15) sys = std::strtod(field.c_str(), nullptr);
  }
  const double hz = static_cast<double>(sysconf(_SC_CLK_TCK));
  return {user / hz, sys / hz};
}

// Seconds kvtierd's threads have run on a CPU and waited for one on a run queue, summed
// over its threads (/proc/<pid>/task/*/schedstat, nanoseconds; threads that exited are
// not counted). The wait is what a CPU-starved daemon shows.
std::pair<double, double> ProcSchedSeconds(pid_t pid) {
  double run = 0, wait = 0;
  std::error_code ec;
  for (const auto& t :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::ifstream in(t.path() / "schedstat");
    double r = 0, w = 0;
    if (in >> r >> w) {
      run += r / 1e9;
      wait += w / 1e9;
    }
  }
  return {run, wait};
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

int RunLoad(int argc, char** argv) {
  CLI::App app{"1..64 client processes doing put/lookup/get against one kvtierd"};
  LoadOptions o;
  bool json = false, quick = false;
  app.add_flag("--json", json, "print one JSON object");
  app.add_flag("--quick", quick,
               "a short check: clients 1,4, 1 s per step, 16-token (512 KiB) records");
  app.add_option("--clients", o.clients, "client process counts, one step each (1,4,16,64)")
      ->delimiter(',')
      ->check(CLI::Range(1, 64));
  app.add_option("--transports", o.transports, "unix and/or tcp (unix,tcp)")
      ->delimiter(',')
      ->check(CLI::IsMember({"unix", "tcp"}));
  app.add_option("--shm", o.shm, "off and/or on (off,on)")
      ->delimiter(',')
      ->check(CLI::IsMember({"off", "on"}));
  app.add_option("--seconds", o.seconds, "seconds each step runs")->check(CLI::Range(0.2, 600.0));
  app.add_option("--tokens", o.tokens, "tokens per chunk record (32 KiB each; 128 = 4 MiB)")
      ->check(CLI::Range(1, 2048));
  app.add_option("--lookup-keys", o.lookup_keys, "keys per Lookup (the client's last puts)")
      ->check(CLI::Range(1, 4096));
  uint64_t host_mib = o.host_bytes >> 20;
  app.add_option("--host-capacity-mib", host_mib, "kvtierd host tier, MiB (1024)")
      ->check(CLI::Range(64, 1 << 20));
  app.add_option("--workers", o.workers, "kvtierd store workers (its default: 4)")
      ->check(CLI::Range(1, 256));
  app.add_option("--kvtierd", o.kvtierd, "path of the kvtierd binary");
  CLI11_PARSE(app, argc, argv);
  if (quick) {
    o.clients = {1, 4};
    o.seconds = 1;
    o.tokens = 16;
  }
  o.host_bytes = host_mib << 20;
  const int max_clients = *std::max_element(o.clients.begin(), o.clients.end());
  const uint64_t rec_bytes = kChunkHeaderBytes + o.layout.payload_bytes(o.tokens);
  const uint64_t slot = (rec_bytes + kShmProgressBlockBytes + 4095) & ~uint64_t{4095};
  // Every client may have one Put being received: the in-flight bound holds them all
  // twice over, so a refusal (RESOURCE_EXHAUSTED) is the daemon's fault, not the config's.
  const uint64_t inflight_bytes = std::max<uint64_t>(64ull << 20, 2 * rec_bytes * max_clients);
  // One region of two slots per client; max_region_bytes in whole MiB (1 MiB at least).
  const uint64_t region_bytes =
      std::max<uint64_t>(1ull << 20, ((2 * slot + (1 << 20) - 1) >> 20) << 20);
  const uint64_t shm_bound = region_bytes * static_cast<uint64_t>(max_clients);
  const uint64_t fixed_bytes = 128ull << 20;
  const uint64_t budget =
      o.host_bytes + inflight_bytes + o.writeback_bytes + shm_bound + fixed_bytes;
  if (rec_bytes * 4 > o.host_bytes) {
    std::fprintf(stderr, "kvtier-bench load: %llu-byte records do not fit the host tier\n",
                 static_cast<unsigned long long>(rec_bytes));
    return 2;
  }

  std::string tmpl = "/tmp/kvt-bench-load-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) return 1;
  const std::string dir = tmpl;
  const std::string unix_target = "unix://" + dir + "/kvtierd.sock";
  const std::string tcp_target = absl::StrFormat("127.0.0.1:%d", remote::FreePort());
  const uint64_t file_bytes = std::max<uint64_t>(64ull << 20, (rec_bytes + 4095) / 4096 * 4096 * 4);
  {
    std::ofstream cfg(dir + "/kvtierd.yaml");
    cfg << "listen: [\"" << unix_target << "\", \"" << tcp_target << "\"]\ndata_dir: " << dir
        << "/data\nhost_capacity: " << o.host_bytes << "\ndisk_capacity: " << 4 * o.host_bytes
        << "\ndisk_file_bytes: " << file_bytes
        << "\nmax_record_bytes: " << std::min<uint64_t>(file_bytes, 256ull << 20)
        << "\nmax_inflight_bytes: " << inflight_bytes
        << "\nwriteback_queue_bytes: " << o.writeback_bytes
        << "\ndurability: async\nworkers: " << o.workers
        << "\nshm:\n  enabled: true\n  max_region_bytes: " << region_bytes
        << "\n  max_regions: " << max_clients
        << "\nlog_level: warn\nmetrics:\n  listen: \"\"\nready_file: " << dir << "/ready.json\n";
  }
  const std::string bin = FindKvtierd(o.kvtierd);
  const pid_t daemon = Spawn({bin, "--config", dir + "/kvtierd.yaml"}, dir + "/kvtierd.log");
  bool ready = false;
  for (int i = 0; i < 3000 && !ready; ++i) {
    ready = std::filesystem::exists(dir + "/ready.json");
    if (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!ready) {
    std::fprintf(stderr,
                 "kvtier-bench load: kvtierd (%s) did not start in 30 s (log %s/kvtierd.log)\n",
                 bin.c_str(), dir.c_str());
    Stop(daemon);
    return 1;
  }
  const NamespaceId ns = ComputeNamespace(NamespaceParams{
      .model_id = "kvtier-bench-load", .layout = o.layout, .chunk_tokens = o.tokens});

  // No gRPC in this process: the clients are forked, and gRPC must not exist before a fork.
  nlohmann::json steps = nlohmann::json::array();
  uint64_t total_errors = 0, peak_rss_kib = 0;
  const std::string load_before = LoadAverage();
  int step = 0;
  for (const std::string& transport : o.transports) {
    for (const std::string& shm : o.shm) {
      for (int clients : o.clients) {
        StepSpec spec;
        spec.step = step++;
        spec.target = transport == "unix" ? unix_target : tcp_target;
        spec.shm = shm == "on";
        // Time for every client to fork, connect (and attach its region) before the start.
        spec.start = Clock::now() + std::chrono::milliseconds(500 + 40 * clients);
        spec.until = spec.start + std::chrono::milliseconds(static_cast<int64_t>(o.seconds * 1e3));
        std::vector<pid_t> kids;
        std::pair<double, double> cpu0{0, 0}, sched0{0, 0};
        bool cpu0_taken = false;
        for (int c = 0; c < clients; ++c) {
          const pid_t pid = fork();
          if (pid == 0) {
            WriteResult(RunClient(c, spec, ns, o),
                        absl::StrFormat("%s/client-%d-%d.json", dir, spec.step, c));
            _exit(0);
          }
          kids.push_back(pid);
        }
        uint64_t rss_kib = 0, shmem_kib = 0;
        size_t running = kids.size();
        std::vector<bool> done(kids.size(), false);
        int died = 0;
        while (running > 0) {
          if (!cpu0_taken && Clock::now() >= spec.start) {  // the daemon's CPU from the start
            cpu0 = ProcCpuSeconds(daemon);
            sched0 = ProcSchedSeconds(daemon);
            cpu0_taken = true;
          }
          rss_kib = std::max(rss_kib, ProcStatusKiB(daemon, "VmRSS:"));
          shmem_kib = std::max(shmem_kib, ProcStatusKiB(daemon, "RssShmem:"));
          for (size_t i = 0; i < kids.size(); ++i) {
            int st = 0;
            if (!done[i] && waitpid(kids[i], &st, WNOHANG) == kids[i]) {
              done[i] = true;
              --running;
              if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) ++died;
            }
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        const std::pair<double, double> cpu1 = ProcCpuSeconds(daemon);
        const std::pair<double, double> sched1 = ProcSchedSeconds(daemon);
        peak_rss_kib = std::max(peak_rss_kib, rss_kib);
        // Merge the clients' results.
        std::vector<float> us[kNumKinds];
        uint64_t bytes = 0, errors = died, misses = 0, attach_retries = 0;
        double start_s = 1e300, end_s = 0;
        std::string first_error;
        for (int c = 0; c < clients; ++c) {
          std::ifstream in(absl::StrFormat("%s/client-%d-%d.json", dir, spec.step, c));
          auto j = nlohmann::json::parse(in, nullptr, false);
          if (j.is_discarded()) {
            ++errors;
            continue;
          }
          bytes += j["bytes_put"].get<uint64_t>() + j["bytes_got"].get<uint64_t>();
          errors += j["errors"].get<uint64_t>();
          misses += j["misses"].get<uint64_t>();
          attach_retries += j["attach_retries"].get<uint64_t>();
          start_s = std::min(start_s, j["start_s"].get<double>());
          end_s = std::max(end_s, j["end_s"].get<double>());
          if (first_error.empty()) first_error = j["first_error"].get<std::string>();
          for (int k = 0; k < kNumKinds; ++k) {
            auto v = j[kKinds[k]].get<std::vector<float>>();
            us[k].insert(us[k].end(), v.begin(), v.end());
          }
        }
        const double secs = end_s > start_s ? end_s - start_s : 0;
        uint64_t ops = 0;
        nlohmann::json rpc;
        for (int k = 0; k < kNumKinds; ++k) {
          ops += us[k].size();
          rpc[kKinds[k]] = {{"count", us[k].size()},
                            {"p50_us", Percentile(us[k], 0.5)},
                            {"p99_us", Percentile(us[k], 0.99)}};
        }
        total_errors += errors;
        steps.push_back(
            {{"transport", transport},
             {"shm", spec.shm},
             {"clients", clients},
             {"seconds", secs},
             {"gbps", secs > 0 ? bytes / secs / 1e9 : 0},
             {"ops_per_s", secs > 0 ? ops / secs : 0},
             {"rpc", rpc},
             {"errors", errors},
             {"get_misses", misses},
             {"shm_attach_retries", attach_retries},
             {"first_error", first_error},
             {"rss_max_mib", rss_kib / 1024.0},
             // kvtierd's CPU over the step: cores busy on average (this host: 2).
             {"daemon_cpu_cores",
              secs > 0 ? (cpu1.first + cpu1.second - cpu0.first - cpu0.second) / secs : 0},
             // Time its threads waited for a CPU on a run queue, per second of the step.
             {"daemon_runqueue_wait_per_s", secs > 0 ? (sched1.second - sched0.second) / secs : 0},
             {"daemon_sys_share", cpu1.first + cpu1.second - cpu0.first - cpu0.second > 0
                                      ? (cpu1.second - cpu0.second) /
                                            (cpu1.first + cpu1.second - cpu0.first - cpu0.second)
                                      : 0},
             {"rss_shmem_max_mib", shmem_kib / 1024.0}});
        if (!json)
          std::fprintf(stderr, "  step %d: %s shm %s %d clients: %.2f GB/s, %llu errors\n",
                       spec.step, transport.c_str(), shm.c_str(), clients,
                       steps.back()["gbps"].get<double>(), static_cast<unsigned long long>(errors));
      }
    }
  }
  peak_rss_kib = std::max(peak_rss_kib, ProcStatusKiB(daemon, "VmHWM:"));
  int dst = 0;
  const bool daemon_alive = waitpid(daemon, &dst, WNOHANG) == 0;
  Stop(daemon);
  if (!daemon_alive) ++total_errors;

  // Targets.
  auto find = [&](const std::string& t, bool shm, int clients) -> const nlohmann::json* {
    for (const auto& s : steps)
      if (s["transport"] == t && s["shm"] == shm && s["clients"] == clients) return &s;
    return nullptr;
  };
  nlohmann::json targets = nlohmann::json::array();
  for (const std::string& t : o.transports) {
    for (const std::string& shm_s : o.shm) {
      const bool shm = shm_s == "on";
      const auto* s4 = find(t, shm, 4);
      const auto* s16 = find(t, shm, 16);
      nlohmann::json bw = {{"name", "gbps_16_over_4"}, {"transport", t},   {"shm", shm},
                           {"limit", ">= 0.8"},        {"value", nullptr}, {"pass", nullptr}};
      nlohmann::json tail = {{"name", "get_p99_over_p50_at_16"},
                             {"transport", t},
                             {"shm", shm},
                             {"limit", "<= 3"},
                             {"value", nullptr},
                             {"pass", nullptr}};
      if (s4 && s16 && (*s4)["gbps"].get<double>() > 0) {
        const double v = (*s16)["gbps"].get<double>() / (*s4)["gbps"].get<double>();
        bw["value"] = v;
        bw["pass"] = v >= 0.8;
      }
      if (s16 && (*s16)["rpc"]["get"]["p50_us"].get<double>() > 0) {
        const double v = (*s16)["rpc"]["get"]["p99_us"].get<double>() /
                         (*s16)["rpc"]["get"]["p50_us"].get<double>();
        tail["value"] = v;
        tail["pass"] = v <= 3;
      }
      targets.push_back(bw);
      targets.push_back(tail);
    }
  }
  const double peak_mib = peak_rss_kib / 1024.0, budget_mib = budget / 1048576.0;
  targets.push_back({{"name", "errors"},
                     {"limit", "== 0"},
                     {"value", total_errors},
                     {"pass", total_errors == 0}});
  targets.push_back({{"name", "rss_within_budget"},
                     {"limit", absl::StrFormat("<= %.0f MiB", budget_mib)},
                     {"value", peak_mib},
                     {"pass", peak_mib <= budget_mib}});
  const bool ok = total_errors == 0 && peak_mib <= budget_mib;
  nlohmann::json out = {{"record_bytes", rec_bytes},
                        {"seconds_per_step", o.seconds},
                        {"lookup_keys", o.lookup_keys},
                        {"workers", o.workers},
                        {"durability", "async"},
                        {"budget",
                         {{"host_capacity_mib", o.host_bytes >> 20},
                          {"max_inflight_mib", inflight_bytes / 1048576.0},
                          {"writeback_queue_mib", o.writeback_bytes >> 20},
                          {"shm_regions_mib", shm_bound / 1048576.0},
                          {"fixed_mib", fixed_bytes >> 20},
                          {"total_mib", budget_mib}}},
                        {"steps", steps},
                        {"targets", targets},
                        {"errors", total_errors},
                        {"rss_max_mib", peak_mib},
                        {"daemon_alive_at_end", daemon_alive},
                        {"load_average_before", load_before},
                        {"load_average_after", LoadAverage()},
                        {"ok", ok}};
  if (json) {
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf(
        "kvtier-bench load: %.1f MiB records, %.1f s per step, kvtierd workers %d, durability "
        "async; load average before %s, after %s\n",
        rec_bytes / 1048576.0, o.seconds, o.workers, load_before.c_str(), LoadAverage().c_str());
    std::printf("  %-5s %-3s %7s %7s %8s %9s %9s %9s %9s %9s %9s %6s %7s %8s %7s %7s\n", "trans",
                "shm", "clients", "GB/s", "ops/s", "put p50", "put p99", "look p50", "look p99",
                "get p50", "get p99", "errors", "misses", "RSS MiB", "d.cores", "d.wait");
    for (const auto& s : steps) {
      const auto& r = s["rpc"];
      auto ms = [&](const char* k, const char* p) { return r[k][p].get<double>() / 1000; };
      std::printf(
          "  %-5s %-3s %7d %7.2f %8.0f %7.2fms %7.2fms %7.2fms %7.2fms %7.2fms %7.2fms %6llu "
          "%7llu %8.0f %7.2f %7.2f\n",
          s["transport"].get<std::string>().c_str(), s["shm"].get<bool>() ? "on" : "off",
          s["clients"].get<int>(), s["gbps"].get<double>(), s["ops_per_s"].get<double>(),
          ms("put", "p50_us"), ms("put", "p99_us"), ms("lookup", "p50_us"), ms("lookup", "p99_us"),
          ms("get", "p50_us"), ms("get", "p99_us"),
          static_cast<unsigned long long>(s["errors"].get<uint64_t>()),
          static_cast<unsigned long long>(s["get_misses"].get<uint64_t>()),
          s["rss_max_mib"].get<double>(), s["daemon_cpu_cores"].get<double>(),
          s["daemon_runqueue_wait_per_s"].get<double>());
      if (!s["first_error"].get<std::string>().empty())
        std::printf("        first error: %s\n", s["first_error"].get<std::string>().c_str());
    }
    std::printf(
        "  RSS budget %.0f MiB = host %llu + in-flight %.0f + write-back %llu + shm regions %.0f "
        "+ fixed %llu\n",
        budget_mib, static_cast<unsigned long long>(o.host_bytes >> 20), inflight_bytes / 1048576.0,
        static_cast<unsigned long long>(o.writeback_bytes >> 20), shm_bound / 1048576.0,
        static_cast<unsigned long long>(fixed_bytes >> 20));
    for (const auto& t : targets) {
      std::string where = t.contains("transport")
                              ? absl::StrFormat(" (%s, shm %s)", t["transport"].get<std::string>(),
                                                t["shm"].get<bool>() ? "on" : "off")
                              : "";
      std::printf(
          "  target %-24s%-20s %-12s value %-10s %s\n", t["name"].get<std::string>().c_str(),
          where.c_str(), t["limit"].get<std::string>().c_str(),
          t["value"].is_null() ? "-" : absl::StrFormat("%.2f", t["value"].get<double>()).c_str(),
          t["pass"].is_null() ? "n/a" : (t["pass"].get<bool>() ? "PASS" : "FAIL"));
    }
  }
  std::error_code ec;
  if (ok)
    std::filesystem::remove_all(dir, ec);
  else
    std::fprintf(stderr, "kvtier-bench load: kept %s (kvtierd.log, client-*.json)\n", dir.c_str());
  return ok ? 0 : 1;
}

}  // namespace

KVT_BENCH_MODE(load,
               "1..64 client processes: put/lookup/get GB/s, ops/s, p50/p99 per RPC, RSS, errors",
               RunLoad);

}  // namespace kvt::bench
