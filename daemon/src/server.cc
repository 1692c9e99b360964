#include "daemon/server.h"

#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "catalog.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/cluster_tier.h"
#include "kvstore/daemon_address.h"
#include "kvstore/disk_tier.h"
#include "kvstore/health_registry.h"
#include "kvstore/host_tier.h"
#include "kvstore/prometheus_text.h"
#include "kvstore/remote_client.h"
#include "kvstore/store_factory.h"
#include "kvstore/supervised_thread.h"
#include "kvstore/tiered_store.h"
#include "metrics.h"
#include "nlohmann/json.hpp"
#include "record_buffers.h"
#include "service.h"
#include "spdlog/spdlog.h"
#include "worker_pool.h"

namespace kvt::daemon {

namespace {

// For "unix:///p" or "unix:p": the socket path; else "".
std::string UnixPath(const std::string& address) {
  absl::StatusOr<DaemonAddress> a = ParseDaemonAddress(address, AddressUse::kListen);
  return a.ok() && a->kind == DaemonAddress::Kind::kUnix ? a->unix_path : "";
}

// Removes a stale socket file; FailedPrecondition when a live server answers on it.
absl::Status PrepareUnixSocket(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return absl::OkStatus();
  if (!S_ISSOCK(st.st_mode))
    return absl::FailedPreconditionError(
        absl::StrFormat("listen: %s exists and is not a socket", path));
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  const bool live = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  if (live)
    return absl::FailedPreconditionError(
        absl::StrFormat("listen: another server is listening on %s", path));
  unlink(path.c_str());
  return absl::OkStatus();
}

}  // namespace

class KvtierServer::Impl {
 public:
  DaemonConfig config;
  std::unique_ptr<TieredStore> store;
  std::unique_ptr<Catalog> catalog;
  Metrics metrics;
  std::unique_ptr<WorkerPool> pool;
  std::unique_ptr<WorkerPool> lookup_pool;  // Lookups only (ServiceDeps::lookup_pool)
  std::unique_ptr<KvTierService> service;
  std::unique_ptr<grpc::Server> grpc_server;
  std::unique_ptr<httplib::Server> http;
  // Every background thread of this daemon reports here (kvstore/health_registry.h):
  // the store's write-back, the disk committer, the workers, the metrics HTTP thread.
  const std::shared_ptr<HealthRegistry> health = std::make_shared<HealthRegistry>();
  std::shared_ptr<Clock> clock;  // the store's and the clients' time; null = SystemClock()
  SupervisedThread http_thread;  // "metrics-http"
  std::atomic<bool> http_stopping{false};
  std::vector<std::string> bound;
  int metrics_port = 0;
  bool wrote_ready_file = false;
  absl::Mutex shutdown_mu;
  bool shut_down ABSL_GUARDED_BY(shutdown_mu) = false;

  std::string RenderMetrics() {
    using Type = PrometheusText::Type;
    PrometheusText out;
    metrics.Render(out);
    struct TierRow {
      std::string label;  // TierKindName: the one name of a tier in metrics, stats and ls
      TierStats stats;
      bool chunks_counted;  // a remote tier (the cluster) cannot count its chunks cheaply
    };
    std::vector<TierRow> tiers;
    const std::vector<TierCaps> caps = store->tiers();
    TieredStoreStats ss = store->stats();
    for (size_t t = 0; t < caps.size() && t < ss.tiers.size(); ++t) {
      tiers.push_back({std::string(TierKindName(caps[t].kind)), ss.tiers[t], !caps[t].remote});
    }
    auto per_tier = [&](const char* name, Type type, const char* help, auto field) {
      out.Family(name, type, help);
      for (const TierRow& r : tiers) {
        if (std::string_view(name) == "kvtier_tier_chunks" && !r.chunks_counted) continue;
        out.Sample(name, {{"tier", r.label}}, field(r.stats));
      }
    };
    per_tier("kvtier_tier_capacity_bytes", Type::kGauge, "",
             [](const TierStats& s) { return s.capacity_bytes; });
    per_tier("kvtier_tier_used_bytes", Type::kGauge, "",
             [](const TierStats& s) { return s.used_bytes; });
    per_tier("kvtier_tier_chunks", Type::kGauge,
             "Chunks a tier holds (absent for the remote tier, which does not count them).",
             [](const TierStats& s) { return s.chunks; });
    per_tier("kvtier_tier_pinned_bytes", Type::kGauge, "",
             [](const TierStats& s) { return s.pinned_bytes; });
    per_tier("kvtier_tier_hits_total", Type::kCounter, "",
             [](const TierStats& s) { return s.hits; });
    per_tier("kvtier_tier_misses_total", Type::kCounter, "",
             [](const TierStats& s) { return s.misses; });
    per_tier("kvtier_tier_evictions_total", Type::kCounter, "",
             [](const TierStats& s) { return s.evictions; });
    per_tier("kvtier_tier_admitted_total", Type::kCounter,
             "Records a tier stored: offered and admitted by its cache policy.",
             [](const TierStats& s) { return s.puts; });
    per_tier("kvtier_tier_admission_rejects_total", Type::kCounter,
             "Records offered to a tier that its cache policy declined.",
             [](const TierStats& s) { return s.admission_rejects; });
    per_tier("kvtier_tier_ttl_expired_total", Type::kCounter,
             "Records a tier dropped because its cache policy's TTL ran out.",
             [](const TierStats& s) { return s.ttl_expired; });
    per_tier("kvtier_tier_integrity_errors_total", Type::kCounter, "",
             [](const TierStats& s) { return s.integrity_errors; });
    per_tier("kvtier_tier_bytes_in_total", Type::kCounter, "",
             [](const TierStats& s) { return s.bytes_in; });
    per_tier("kvtier_tier_bytes_out_total", Type::kCounter, "",
             [](const TierStats& s) { return s.bytes_out; });
    per_tier("kvtier_tier_io_errors_total", Type::kCounter, "",
             [](const TierStats& s) { return s.io_errors; });
    std::string detail;
    const bool ok = service->Healthy(&detail);
    auto one = [&](const char* name, Type type, const char* help, auto value) {
      out.Family(name, type, help);
      out.Sample(name, value);
    };
    one("kvtier_store_hits_total", Type::kCounter, "", ss.hits);
    one("kvtier_store_misses_total", Type::kCounter, "", ss.misses);
    one("kvtier_store_promotions_total", Type::kCounter, "", ss.promotions);
    one("kvtier_store_writeback_errors_total", Type::kCounter, "", ss.writeback_errors);
    one("kvtier_store_pending_write_bytes", Type::kGauge, "", ss.pending_write_bytes);
    one("kvtier_pinned_bytes", Type::kGauge, "", ss.pinned_bytes);
    one("kvtier_integrity_errors_total", Type::kCounter,
        "Records that failed verification in any tier.", ss.integrity_errors);
    one("kvtier_shm_regions", Type::kGauge, "", service->shm_regions());
    one("kvtier_worker_task_failures_total", Type::kCounter, "",
        pool->task_failures() + lookup_pool->task_failures());
    one("kvtier_healthy", Type::kGauge, "1 while every background thread is alive.", ok ? 1 : 0);
    RenderThreads(out);
    const LeaseCounts lc = service->leases().counts();
    one("kvtier_leases_granted_total", Type::kCounter, "Lookups with pin that pinned chunks.",
        lc.granted);
    one("kvtier_leases_released_total", Type::kCounter, "Leases released by the Get naming them.",
        lc.released);
    one("kvtier_leases_expired_total", Type::kCounter,
        "Leases that reached lease_timeout_ms without a Get.", lc.expired);
    one("kvtier_leases_active", Type::kGauge, "", lc.active);
    return out.Take();
  }

  // One sample per supervised thread (name = its registry name).
  void RenderThreads(PrometheusText& out) {
    using Type = PrometheusText::Type;
    const std::vector<ThreadHealth> threads = health->Snapshot();
    auto family = [&](const char* name, Type type, const char* help, auto value) {
      out.Family(name, type, help);
      for (const ThreadHealth& t : threads) out.Sample(name, {{"name", t.name}}, value(t));
    };
    family("kvtier_thread_up", Type::kGauge,
           "1 while the background thread runs; 0 once it stopped or failed.",
           [](const ThreadHealth& t) { return t.state == ThreadState::kRunning ? 1 : 0; });
    family("kvtier_thread_failed", Type::kGauge,
           "1 once an exception ended the thread (its error is in /healthz).",
           [](const ThreadHealth& t) { return t.state == ThreadState::kFailed ? 1 : 0; });
    family("kvtier_thread_restarts_total", Type::kCounter,
           "Times the thread was started again after it threw.",
           [](const ThreadHealth& t) { return t.restarts; });
    family("kvtier_thread_heartbeats_total", Type::kCounter, "Rounds of the thread's loop.",
           [](const ThreadHealth& t) { return t.heartbeats; });
  }

  // /healthz's body after its first line: one line per supervised thread.
  std::string ThreadLines() {
    std::string out;
    for (const ThreadHealth& t : health->Snapshot()) {
      absl::StrAppendFormat(&out, "thread %s %s restarts=%d heartbeats=%d%s\n", t.name,
                            ThreadStateName(t.state), t.restarts, t.heartbeats,
                            t.last_error.empty() ? "" : " error=" + t.last_error);
    }
    return out;
  }

  absl::Status StartHttp() {
    if (config.metrics_listen.empty()) return absl::OkStatus();
    absl::StatusOr<DaemonAddress> addr = ParseHostPort(config.metrics_listen, AddressUse::kListen);
    if (!addr.ok())
      return absl::InvalidArgumentError(absl::StrCat("metrics.listen: ", addr.status().message()));
    if (!config.allow_remote && !addr->is_local())
      return absl::InvalidArgumentError(absl::StrFormat(
          "metrics.listen: '%s' is not loopback; set allow_remote: true to expose it",
          config.metrics_listen));
    const std::string host = addr->host;
    const int port = addr->port;
    http = std::make_unique<httplib::Server>();
    // SO_REUSEADDR only: cpp-httplib's default adds SO_REUSEPORT, which let a second
    // kvtierd bind the same metrics port and answer scrapes at random.
    http->set_socket_options([](socket_t sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    });
    http->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(RenderMetrics(), "text/plain; version=0.0.4");
    });
    http->Get("/healthz", [this](const httplib::Request&, httplib::Response& res) {
      std::string detail;
      if (service->Healthy(&detail)) {
        res.set_content("ok\n" + ThreadLines(), "text/plain");
      } else {
        res.status = 503;
        res.set_content("unhealthy: " + detail + "\n" + ThreadLines(), "text/plain");
      }
    });
    if (port == 0) {
      metrics_port = http->bind_to_any_port(host);
    } else {
      metrics_port = http->bind_to_port(host, port) ? port : -1;
    }
    if (metrics_port <= 0 && !config.metrics_listen_explicit) {
      // The default port is one per host: a second kvtierd (another user's, a test's, a
      // docs example's) runs without metrics rather than not at all.
      spdlog::warn(
          "kvtierd: the default metrics address {} is in use (another kvtierd?): serving "
          "without /metrics and /healthz; set metrics.listen or --metrics-listen (port 0 = any "
          "free port) to have them",
          config.metrics_listen);
      http.reset();
      metrics_port = 0;
      return absl::OkStatus();
    }
    if (metrics_port <= 0)
      return absl::UnavailableError(
          absl::StrFormat("metrics.listen: cannot bind %s (in use? another kvtierd? pass "
                          "--metrics-listen 127.0.0.1:0 for any free port, or \"\" to disable)",
                          config.metrics_listen));
    http_thread.Start({.name = "metrics-http", .health = health}, [this] {
      http->listen_after_bind();
      if (!http_stopping.load())
        throw std::runtime_error("the metrics HTTP server stopped listening on its own");
    });
    return absl::OkStatus();
  }

  void Shutdown() {
    {
      absl::MutexLock lock(&shutdown_mu);
      if (shut_down) return;
      shut_down = true;
    }
    spdlog::info("kvtierd: shutting down (grace {} ms)", config.shutdown_grace.count());
    if (grpc_server) {
      // Refuse new calls, let the calls in flight finish (up to the grace period), then
      // stop gRPC (which cancels whatever is still running). gRPC's own Shutdown deadline
      // would also wait for idle client connections, hence our own count.
      service->BeginDrain();
      const auto until = std::chrono::steady_clock::now() + config.shutdown_grace;
      while (service->active_calls() > 0 && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      if (service->active_calls() > 0)
        spdlog::warn("kvtierd: {} calls still running after the grace period; cancelling them",
                     service->active_calls());
      grpc_server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(100));
      grpc_server->Wait();
      spdlog::info("kvtierd: gRPC server stopped");
    }
    if (pool) pool->Stop();
    if (lookup_pool) lookup_pool->Stop();
    if (http) {
      http_stopping.store(true);
      // cpp-httplib's stop() does nothing until listen_after_bind, on the metrics-http
      // thread, has marked the server running: stopped before that (a SIGTERM right after
      // start-up, on a loaded machine), the thread would then listen for good and the Join
      // below would never return. Wait for it to run (or to have ended) first.
      while (!http->is_running() && http_thread.state() == ThreadState::kRunning)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      http->stop();
      http_thread.Join();
    }
    if (store) {
      store->Flush();
      spdlog::info("kvtierd: write-back queue drained");
    }
    grpc_server.reset();
    service.reset();
    // A Get's in-place view of a host-tier record lives until gRPC drops its last slice,
    // which may be after the call ended: the store (and its arena) must outlive them.
    const auto views_until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (LiveRecordViews() > 0 && std::chrono::steady_clock::now() < views_until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (LiveRecordViews() > 0) {
      spdlog::error("kvtierd: {} host-tier records still lent to gRPC; leaving the store open",
                    LiveRecordViews());
      store->Flush();
      (void)store.release();  // never freed under a slice that still points into it
    }
    store.reset();  // drains and closes the tiers (the disk tier writes its access times)
    for (const auto& a : bound)
      if (std::string p = UnixPath(a); !p.empty()) unlink(p.c_str());
    if (wrote_ready_file) unlink(config.ready_file.c_str());  // no longer serving
    spdlog::info("kvtierd: stopped; every acknowledged put is on disk");
  }
};

absl::StatusOr<std::unique_ptr<KvtierServer>> KvtierServer::Start(const DaemonConfig& config,
                                                                  std::shared_ptr<Clock> clock) {
  if (absl::Status s = config.Validate(); !s.ok()) return s;
  if (absl::Status s = CheckDaemonPaths(config); !s.ok()) return s;
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->clock = std::move(clock);
  std::error_code ec;
  std::filesystem::create_directories(config.data_dir, ec);
  if (ec)
    return absl::InternalError(absl::StrFormat("data_dir %s: %s", config.data_dir, ec.message()));

  StoreOptions so;
  so.host = config.host;
  so.store.max_pending_write_bytes = config.writeback_queue_bytes;
  so.store.buffer_pool_bytes = 0;  // kvtierd's puts arrive as their own buffers
  DiskTierOptions& dopt = so.disk.emplace(config.disk);
  dopt.dir = config.data_dir + "/disk";
  dopt.file_bytes = std::min(config.disk.file_bytes, config.disk.capacity_bytes);
  ClusterTier* cluster = nullptr;
  if (config.cluster) {  // shared by every kvtierd naming the same cluster: below the disk
    so.lower.push_back([&cluster, &config]() -> absl::StatusOr<std::unique_ptr<Tier>> {
      // One name for this tier everywhere (metrics, kvtier stats and ls, docs): "remote".
      ClusterTierOptions co = *config.cluster;
      co.name = std::string(TierKindName(TierKind::kRemote));
      auto ct = ClusterTier::Create(co);
      if (!ct.ok())
        return absl::Status(ct.status().code(), "cluster: " + std::string(ct.status().message()));
      cluster = ct->get();
      spdlog::info("kvtierd: cluster tier on {} masters (keyspace '{}', pieces of {} bytes)",
                   cluster->client().slot_map().masters().size(), config.cluster->keyspace,
                   config.cluster->piece_bytes);
      return std::unique_ptr<Tier>(std::move(*ct));
    });
  }
  // durability sync: each Put is acknowledged once the disk tier holds it (PutAck::kDurable,
  // in the service); the background writes the rest: with a cluster, every put is written
  // through to it too (once: the durable ack already wrote the disk).
  so.store.placement.write_through = config.cluster ? WriteThrough::kAll : WriteThrough::kLocal;
  so.store.lease_timeout = config.lease_timeout;
  if (config.miss_record_entries > 0) {
    auto absence = AbsenceRecord::Create(config.miss_record_entries);
    if (!absence.ok()) return absence.status();
    so.store.absence = std::move(*absence);
  }
  so.store.clock = impl->clock;
  so.store.health = impl->health;  // the disk tier's committer reports here too
  auto store = OpenTieredStore(so);
  if (!store.ok()) return store.status();
  impl->store = std::move(*store);

  // Tenancy asks the store which namespace a chunk is in (tenancy.h); the catalog holds
  // only who owns each namespace. Without tenants, a namespace nobody here owns (chunks
  // another kvtierd put into a shared cluster tier) is the default tenant's.
  auto catalog =
      Catalog::Open(config.data_dir + "/namespaces.log",
                    config.auth_enabled() ? std::nullopt : std::optional<std::string>(""));
  if (!catalog.ok()) return catalog.status();
  impl->catalog = std::move(*catalog);
  {
    const TieredStoreStats ss = impl->store->stats();
    spdlog::info(
        "kvtierd: {} chunks on disk in {} (durability {}, disk commit {}, shared memory {})",
        ss.tiers.size() > 1 ? ss.tiers[1].chunks : 0, dopt.dir,
        config.durability == Durability::kSync ? "sync" : "async",
        dopt.commit == DiskCommit::kGrouped
            ? absl::StrFormat("grouped within %d ms", dopt.commit_delay_ms)
            : std::string("each put"),
        config.shm_enabled
            ? absl::StrFormat("on, regions up to %d bytes", config.shm_max_region_bytes)
            : std::string("off"));
  }

  impl->pool = std::make_unique<WorkerPool>(config.workers, "worker", impl->health);
  // Two threads: a Lookup is an index probe (memory, at most RocksDB's cached index), so
  // two keep Lookups moving while every store worker waits on a slow client.
  impl->lookup_pool = std::make_unique<WorkerPool>(2, "lookup", impl->health);
  ServiceDeps deps;
  deps.config = &impl->config;
  deps.store = impl->store.get();
  deps.catalog = impl->catalog.get();
  deps.metrics = &impl->metrics;
  deps.pool = impl->pool.get();
  deps.lookup_pool = impl->lookup_pool.get();
  deps.health = impl->health.get();
  deps.clock = impl->clock;
  impl->service = std::make_unique<KvTierService>(deps);

  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(kKvtierMaxMessageBytes);
  builder.SetMaxSendMessageSize(kKvtierMaxMessageBytes);
  std::vector<std::unique_ptr<int>> ports;
  for (const auto& a : config.listen) {
    if (std::string p = UnixPath(a); !p.empty()) {
      if (absl::Status s = PrepareUnixSocket(p); !s.ok()) return s;
    }
    ports.push_back(std::make_unique<int>(0));
    builder.AddListeningPort(a, grpc::InsecureServerCredentials(), ports.back().get());
  }
  builder.RegisterService(impl->service.get());
  const mode_t old_umask = umask(0077);  // unix sockets: owner only
  impl->grpc_server = builder.BuildAndStart();
  umask(old_umask);
  if (!impl->grpc_server)
    return absl::UnavailableError("gRPC server failed to start (address in use?)");
  for (size_t i = 0; i < config.listen.size(); ++i) {
    const std::string& a = config.listen[i];
    if (*ports[i] == 0) return absl::UnavailableError(absl::StrFormat("listen: cannot bind %s", a));
    absl::StatusOr<DaemonAddress> parsed = ParseDaemonAddress(a, AddressUse::kListen);
    if (parsed.ok() && parsed->kind == DaemonAddress::Kind::kTcp) {
      impl->bound.push_back(parsed->HostPort(static_cast<uint16_t>(*ports[i])));
    } else {
      impl->bound.push_back(a);
    }
  }
  if (absl::Status s = impl->StartHttp(); !s.ok()) {
    impl->Shutdown();
    return s;
  }
  for (const auto& a : impl->bound) spdlog::info("kvtierd: serving gRPC on {}", a);
  if (impl->metrics_port > 0)
    spdlog::info("kvtierd: metrics on http://{}/metrics",
                 ParseHostPort(config.metrics_listen, AddressUse::kListen)
                     ->HostPort(static_cast<uint16_t>(impl->metrics_port)));
  if (!config.ready_file.empty()) {
    nlohmann::json j = {
        {"pid", getpid()}, {"listen", impl->bound}, {"metrics_port", impl->metrics_port}};
    std::string tmp = config.ready_file + ".tmp";
    bool written = false;
    {
      std::ofstream out(tmp);
      out << j.dump() << "\n";
      out.flush();
      written = out.good();
    }
    if (written) std::filesystem::rename(tmp, config.ready_file, ec);
    impl->wrote_ready_file = written && !ec;
    if (!written || ec) {
      const std::string why = written ? ec.message() : std::string(std::strerror(errno));
      std::filesystem::remove(tmp, ec);
      spdlog::error("kvtierd: cannot write ready file {}: {}", config.ready_file, why);
      impl->Shutdown();
      return absl::UnavailableError(
          absl::StrFormat("ready_file: cannot write '%s': %s", config.ready_file, why));
    }
  }
  return std::unique_ptr<KvtierServer>(new KvtierServer(std::move(impl)));
}

KvtierServer::KvtierServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
KvtierServer::~KvtierServer() { Shutdown(); }
void KvtierServer::Shutdown() { impl_->Shutdown(); }
const std::vector<std::string>& KvtierServer::listen_addresses() const { return impl_->bound; }
int KvtierServer::metrics_port() const { return impl_->metrics_port; }
bool KvtierServer::healthy() const { return impl_->service && impl_->service->Healthy(nullptr); }

}  // namespace kvt::daemon
