#include "kvtier_server/server_tiers.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "connectors/daemon_probe.h"
#include "kvstore/disk_tier.h"
#include "kvstore/host_tier.h"
#include "kvstore/store_factory.h"
#include "kvstore/throttled_tier.h"
#include "spdlog/spdlog.h"
#ifdef KVT_SERVER_HAVE_REMOTE
#include "kvstore/remote_tier.h"
#endif

namespace kvt::llamacpp {

absl::StatusOr<std::unique_ptr<ServerTiers>> ServerTiers::Open(const ServerKvtierOptions& options) {
  std::unique_ptr<ServerTiers> t(new ServerTiers(options));
  StoreOptions so;
  std::vector<std::string> names;
  so.host.capacity_bytes = static_cast<uint64_t>(options.effective_host_mib()) << 20;
  if (so.host.capacity_bytes > 0) {
    if (absl::Status s = so.host.Validate(); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--kvtier-host-mib '", options.effective_host_mib(), "': ", s.message()));
    }
    names.push_back("host");
  }
  if (!options.dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options.dir, ec);
    if (ec) {
      return absl::InvalidArgumentError(
          absl::StrCat("--kvtier-dir '", options.dir, "': cannot create it: ", ec.message()));
    }
    DiskTierOptions& d = so.disk.emplace();
    d.cache_policy.name = "default";  // the measured default (docs/cache-policy.md)
    d.dir = options.dir;
    d.capacity_bytes = static_cast<uint64_t>(options.disk_mib) << 20;
    d.file_bytes = std::min<uint64_t>(d.capacity_bytes, 256ull << 20);
    if (absl::Status s = d.Validate(); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--kvtier-dir '", options.dir, "': ", s.message()));
    }
    names.push_back("disk");
  }
  if (!options.daemon.empty()) {
#ifdef KVT_SERVER_HAVE_REMOTE
    RemoteTierOptions r;
    r.client.target = options.daemon;
    r.client.token = options.token;
    r.client.deadline = std::chrono::milliseconds(options.daemon_timeout_ms);
    r.client.max_attempts = 1;  // a dead daemon is a quick miss; the next request tries again
    // Same host (a unix socket): chunks through shared memory, gRPC where it cannot.
    if (absl::StartsWith(options.daemon, "unix:"))
      r.shm_slots = static_cast<uint32_t>(options.shm_slots);
    if (absl::Status s = r.Validate(); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--kvtier-daemon '", options.daemon, "': ", s.message()));
    }
    so.lower.push_back(RemoteTier::Factory(r));
    names.push_back("kvtierd");
#else
    return absl::InvalidArgumentError(
        "--kvtier-daemon: this build has no remote tier (KVT_BUILD_DAEMON=OFF)");
#endif
  }
  t->names_ = absl::StrJoin(names, "+");
  if (options.throttle_gbps > 0) {  // benchmarks: the host tier alone, behind a slow link
    auto host = HostTier::Create(so.host);
    if (!host.ok()) return host.status();
    StoreOptions throttled_so;
    throttled_so.host.capacity_bytes = 0;
    throttled_so.store = so.store;
    throttled_so.lower.push_back(
        UseTier(std::make_unique<ThrottledTier>(std::move(*host), options.throttle_gbps * 1e9)));
    auto throttled = OpenTieredStore(throttled_so);
    if (!throttled.ok()) return throttled.status();
    t->names_ = absl::StrCat("host(throttled ", options.throttle_gbps, " GB/s)");
    t->store_ = std::shared_ptr<TieredStore>(std::move(*throttled));
    return t;
  }
  auto store = OpenTieredStore(so);
  if (!store.ok()) {
    // The disk tier is opened here (its directory, its RocksDB lock): name the flag.
    if (!options.dir.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--kvtier-dir '", options.dir, "': ", store.status().message()));
    }
    return store.status();
  }
  t->store_ = std::shared_ptr<TieredStore>(std::move(*store));
  if (!options.daemon.empty()) {
    ServerTiers* self = t.get();
    t->daemon_watch_ = std::thread([self] { self->WatchDaemon(); });
  }
  return t;
}

ServerTiers::~ServerTiers() {
  if (daemon_watch_.joinable()) {
    {
      absl::MutexLock lock(&watch_mu_);
      watch_stop_ = true;
    }
    daemon_watch_.join();
  }
}

void ServerTiers::WatchDaemon() {
  const std::chrono::milliseconds deadline(std::min<int64_t>(options_.daemon_timeout_ms, 2000));
  absl::Status s = ProbeDaemon(options_.daemon, options_.token, deadline);
  if (s.ok()) {
    spdlog::info("kvtier: kvtierd at {} answers", options_.daemon);
    return;
  }
  spdlog::warn(
      "kvtier: the cache daemon kvtierd at {} does not answer ({}): kvtier-llama-server runs "
      "cold (computes every prompt, stores nothing) until it answers; kvtier keeps trying and "
      "logs when it does",
      options_.daemon, s.ToString());
  while (true) {
    {
      absl::MutexLock lock(&watch_mu_);
      if (watch_mu_.AwaitWithTimeout(absl::Condition(&watch_stop_), absl::Seconds(1))) return;
    }
    if (ProbeDaemon(options_.daemon, options_.token, deadline).ok()) {
      spdlog::info(
          "kvtier: kvtierd at {} answers now: loads and stores resume (after the remote tier's "
          "reconnect cool-down, about a second)",
          options_.daemon);
      return;
    }
  }
}

}  // namespace kvt::llamacpp
