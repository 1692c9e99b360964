#include "trace_daemon.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench_mode.h"
#include "kvstore/remote_client.h"
#include "kvstore/remote_tier.h"
#include "kvstore/store_factory.h"
#include "nlohmann/json.hpp"
#include "trace_store.h"

namespace kvt::bench {
namespace {

using Clock = std::chrono::steady_clock;

// The turnstile the client processes share (MAP_SHARED | MAP_ANONYMOUS, made before the
// fork): the index of the next request to start, and whether a client gave up.
struct Turnstile {
  std::atomic<uint64_t> next{0};
  std::atomic<uint32_t> failed{0};
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "the turnstile crosses processes");

void StopProcess(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGTERM);
  int st = 0;
  for (int i = 0; i < 1000; ++i) {
    if (waitpid(pid, &st, WNOHANG) == pid) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
}

// One client process: its RemoteTier store, its slice of the trace; client 0 also reads
// kvtierd's Stats once every request is done. Writes its result as JSON to `path`.
void RunClient(int c, const Trace& trace, const DaemonReplayOptions& o, const std::string& target,
               Turnstile* turn, const std::string& path) {
  nlohmann::json j = {{"client", c}};
  auto fail = [&](const std::string& what, const absl::Status& s) {
    j["error"] = absl::StrCat(what, ": ", s.ToString());
    turn->failed.store(1);
  };
  RemoteTierOptions ro;
  ro.client.target = target;
  ro.client.deadline = std::chrono::seconds(60);
  StoreOptions so;
  so.host.capacity_bytes = 0;  // kvtierd's tiers alone, as kvtier's connectors on kvtierd
  so.lower.push_back(RemoteTier::Factory(ro));
  auto store = OpenTieredStore(so);
  RemoteClientOptions co;
  co.target = target;
  auto drain_client = RemoteClient::Create(co);
  StoreReplayResult res;
  if (!store.ok()) {
    fail("store", store.status());
  } else if (!drain_client.ok()) {
    fail("stats client", drain_client.status());
  } else {
    ReplaySlice slice;
    slice.offset = static_cast<size_t>(c);
    slice.stride = static_cast<size_t>(o.clients);
    // The client's own store has nothing to write down (RemoteTier alone); kvtierd's is
    // drained below, in done, before the next request may start.
    slice.flush = false;
    slice.wait_turn = [turn](size_t i) {
      // Yield a little, then sleep: a spinning client would take the CPU kvtierd and
      // the other client need (a 2-core machine).
      for (int spins = 0;
           turn->next.load(std::memory_order_acquire) != i && turn->failed.load() == 0; ++spins) {
        if (spins < 64) {
          std::this_thread::yield();
        } else {
          std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
      }
    };
    // kvtierd's write-back queue serves what it holds (Lookup and Get find queued
    // records), so while it lags behind the clients it is an extra cache beyond the
    // tiers' capacities (up to writeback_queue_bytes, 1 GiB by default): with two clients
    // on a loaded machine it lifted the hit ratio by half. The in-process replay flushes
    // its queue after each request; this waits for kvtierd's to be empty, so both measure
    // the tiers at the same capacities.
    RemoteClient* stats = drain_client->get();
    slice.done = [turn, stats, &fail](size_t i) {
      for (int tries = 0;; ++tries) {
        absl::StatusOr<RemoteStats> st = stats->Stats();
        if (!st.ok()) {
          fail("Stats (drain)", st.status());
          break;
        }
        if (st->pending_write_bytes == 0) break;
        if (tries >= 300000) {  // about 60 s: kvtierd's write-back is stuck
          fail("drain", absl::DeadlineExceededError(
                            absl::StrCat("kvtierd's write-back still holds ",
                                         st->pending_write_bytes, " bytes after 60 s")));
          break;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      turn->next.store(i + 1, std::memory_order_release);
    };
    if (absl::Status s = ReplayRequests(**store, trace, o.record_bytes, slice, &res); !s.ok()) {
      fail("replay", s);
    }
    if (turn->failed.load() != 0 && !j.contains("error")) j["error"] = "another client failed";
  }
  j["hit_tokens"] = res.host_hit_tokens + res.disk_hit_tokens;
  j["total_tokens"] = res.total_tokens;
  j["chunks"] = res.chunks;
  if (c == 0 && !j.contains("error")) {
    while (turn->next.load() < trace.requests.size() && turn->failed.load() == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    absl::StatusOr<RemoteStats> st = (*drain_client)->Stats();
    if (!st.ok()) {
      fail("Stats", st.status());
    } else {
      nlohmann::json tiers = nlohmann::json::array();
      for (const RemoteTierStats& t : st->tiers) {
        tiers.push_back({{"name", t.name},
                         {"hits", t.stats.hits},
                         {"bytes_in", t.stats.bytes_in},
                         {"admission_rejects", t.stats.admission_rejects}});
      }
      j["tiers"] = tiers;
    }
  }
  store = absl::UnknownError("closed");  // the connections go before the result is read
  drain_client = absl::UnknownError("closed");
  std::ofstream(path) << j.dump();
}

}  // namespace

absl::StatusOr<DaemonReplayResult> ReplayThroughKvtierd(const Trace& trace,
                                                        const DaemonReplayOptions& o) {
  if (o.clients < 1 || o.clients > 16) {
    return absl::InvalidArgumentError(absl::StrCat("clients = ", o.clients, "; expected 1..16"));
  }
  const uint64_t host_bytes = o.host_records * o.record_bytes;
  const uint64_t disk_bytes = o.disk_records * o.record_bytes;
  if (host_bytes < (1ull << 20) || o.disk_records == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "kvtierd replay: host tier of %d bytes (kvtierd needs >= 1 MiB) and disk of %d records",
        host_bytes, o.disk_records));
  }
  const std::string dir = o.work_dir;
  const std::string target = "unix://" + dir + "/kvtierd.sock";
  {
    std::ofstream cfg(dir + "/kvtierd.yaml");
    cfg << "listen: [\"" << target << "\"]\ndata_dir: " << dir
        << "/data\nhost_capacity: " << host_bytes << "\ndisk_capacity: " << disk_bytes
        << "\ndisk_file_bytes: " << std::min<uint64_t>(disk_bytes, 64ull << 20)
        << "\ndisk_direct_io: false\nmax_record_bytes: " << std::max<uint64_t>(o.record_bytes, 4096)
        << "\ndurability: async\ndisk_commit: grouped\nshm:\n  enabled: false\n"
        << "log_level: warn\nmetrics:\n  listen: \"\"\nready_file: " << dir << "/ready.json\n";
    if (!o.host_policy.empty()) cfg << "host_cache_policy:\n  name: " << o.host_policy << "\n";
    if (!o.disk_policy.empty()) cfg << "disk_cache_policy:\n  name: " << o.disk_policy << "\n";
  }
  const pid_t daemon = Spawn({o.kvtierd, "--config", dir + "/kvtierd.yaml"}, dir + "/kvtierd.log");
  bool ready = false;
  for (int i = 0; i < 3000 && !ready; ++i) {
    ready = std::filesystem::exists(dir + "/ready.json");
    int st = 0;
    if (!ready && waitpid(daemon, &st, WNOHANG) == daemon) break;
    if (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!ready) {
    StopProcess(daemon);
    return absl::UnavailableError(
        absl::StrFormat("kvtierd (%s) did not start in 30 s; see %s/kvtierd.log", o.kvtierd, dir));
  }
  void* mem =
      mmap(nullptr, sizeof(Turnstile), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    StopProcess(daemon);
    return absl::InternalError("mmap of the clients' turnstile failed");
  }
  auto* turn = new (mem) Turnstile();
  const auto start = Clock::now();
  std::vector<pid_t> kids;
  for (int c = 0; c < o.clients; ++c) {
    const pid_t pid = fork();
    if (pid == 0) {
      RunClient(c, trace, o, target, turn, absl::StrFormat("%s/client-%d.json", dir, c));
      _exit(0);
    }
    kids.push_back(pid);
  }
  int died = 0;
  for (pid_t pid : kids) {
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) ++died;
  }
  DaemonReplayResult res;
  res.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  munmap(mem, sizeof(Turnstile));
  StopProcess(daemon);
  if (died > 0) return absl::InternalError(absl::StrCat(died, " replay client(s) died"));
  for (int c = 0; c < o.clients; ++c) {
    std::ifstream in(absl::StrFormat("%s/client-%d.json", dir, c));
    auto j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded()) return absl::InternalError(absl::StrCat("client ", c, ": no result"));
    if (j.contains("error")) {
      return absl::InternalError(absl::StrCat("client ", c, ": ", j["error"].get<std::string>()));
    }
    res.hit_tokens += j["hit_tokens"].get<uint64_t>();
    res.total_tokens += j["total_tokens"].get<uint64_t>();
    res.chunks += j["chunks"].get<uint64_t>();
    if (j.contains("tiers")) {
      for (const auto& t : j["tiers"]) {
        const bool host = t["name"].get<std::string>() == "host";
        (host ? res.host_hits : res.disk_hits) += t["hits"].get<uint64_t>();
        (host ? res.host_bytes_written : res.disk_bytes_written) += t["bytes_in"].get<uint64_t>();
        (host ? res.host_admission_rejects : res.disk_admission_rejects) +=
            t["admission_rejects"].get<uint64_t>();
      }
    }
  }
  return res;
}

}  // namespace kvt::bench
