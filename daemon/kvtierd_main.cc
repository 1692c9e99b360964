// kvtierd: the kvtier cache daemon. See docs/daemon.md.
//   kvtierd --config /etc/kvtier/kvtierd.yaml [--listen unix:///run/kvtierd.sock] ...
// SIGTERM/SIGINT: graceful shutdown (every acknowledged put is on disk), exit 0.
// Exit codes: 0 ok (and --help), 1 runtime failure (store, listener, ready file),
// 2 bad command line or config.
#include <malloc.h>
#include <signal.h>

#include <cstdio>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "daemon/config.h"
#include "daemon/server.h"
#include "kvstore/byte_size.h"
#include "spdlog/spdlog.h"
#include "src/process_setup.h"

int main(int argc, char** argv) {
  // Records are MiB-sized and short-lived (gRPC messages, write-back copies). A fixed
  // mmap threshold keeps glibc from raising it after the first free (its default is
  // dynamic, up to 32 MiB), which would serve records from arenas that keep freed
  // memory: every record buffer then goes back to the kernel when freed, so the
  // daemon's RSS follows its configured bounds (docs/daemon.md, "Memory").
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  // No process-wide lock graph on every Mutex::Lock (see process_setup.h).
  kvt::daemon::DisableMutexDeadlockDetection();
  using kvt::daemon::DaemonConfig;
  CLI::App app{"kvtierd: the kvtier KV-cache daemon (host memory + disk, served over gRPC)"};
  std::string config_path, data_dir, host_cap, disk_cap, metrics_listen, durability, ready_file,
      log_level;
  std::vector<std::string> listen;
  uint32_t workers = 0;
  bool allow_remote = false, no_shm = false, no_direct_io = false;
  app.add_option("-c,--config", config_path, "YAML config file (docs/daemon.md)");
  app.add_option("-l,--listen", listen,
                 "gRPC address(es): unix:///path.sock or host:port (overrides config)");
  app.add_option("-d,--data-dir", data_dir, "directory of the disk tier and namespace registry");
  app.add_option("--host-capacity", host_cap, "host memory tier size, e.g. 8GiB");
  app.add_option("--disk-capacity", disk_cap, "disk tier size, e.g. 100GiB");
  app.add_option("--metrics-listen", metrics_listen,
                 "metrics/health HTTP host:port ('' disables, port 0 = any)");
  app.add_option("--durability", durability,
                 "sync (ack after disk) | async (ack after host memory)")
      ->check(CLI::IsMember({"sync", "async"}));
  app.add_option("--workers", workers, "store worker threads");
  app.add_option("--ready-file", ready_file,
                 "write {pid, listen, metrics_port} JSON here once serving");
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error|off");
  app.add_flag("--allow-remote", allow_remote, "allow non-loopback TCP listen addresses");
  app.add_flag("--no-shm", no_shm, "disable the shared-memory fast path");
  app.add_flag("--no-direct-io", no_direct_io, "buffered disk I/O (e.g. on tmpfs)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 prints the message (and --help's text); every command-line error exits 2.
    return app.exit(e) == 0 ? 0 : 2;
  }

  DaemonConfig config = kvt::daemon::DefaultDaemonConfig();
  if (!config_path.empty()) {
    auto c = kvt::daemon::LoadDaemonConfig(config_path, config);
    if (!c.ok()) {
      std::fprintf(stderr, "kvtierd: %s\n", c.status().ToString().c_str());
      return 2;
    }
    config = *c;
  }
  auto bytes = [](const std::string& flag, const std::string& v, uint64_t* out) {
    auto b = kvt::ParseByteSize(v);
    if (!b.ok()) {
      std::fprintf(stderr, "kvtierd: %s: %s\n", flag.c_str(), b.status().ToString().c_str());
      return false;
    }
    *out = *b;
    return true;
  };
  if (app.count("--listen") > 0) config.listen = listen;
  if (app.count("--data-dir") > 0) config.data_dir = data_dir;
  if (!host_cap.empty() && !bytes("--host-capacity", host_cap, &config.host.capacity_bytes))
    return 2;
  if (!disk_cap.empty() && !bytes("--disk-capacity", disk_cap, &config.disk.capacity_bytes))
    return 2;
  if (app.count("--metrics-listen") > 0) {
    config.metrics_listen = metrics_listen;
    config.metrics_listen_explicit = true;
  }
  if (!durability.empty())
    config.durability =
        durability == "async" ? kvt::daemon::Durability::kAsync : kvt::daemon::Durability::kSync;
  if (app.count("--workers") > 0) config.workers = workers;
  if (app.count("--ready-file") > 0) config.ready_file = ready_file;
  if (app.count("--log-level") > 0) config.log_level = log_level;
  if (allow_remote) config.allow_remote = true;
  if (no_shm) config.shm_enabled = false;
  if (no_direct_io) config.disk.direct_io = false;
  // Flags and file go through the same checks; any failure here is a bad config: exit 2.
  if (absl::Status s = config.Validate(); !s.ok()) {
    // The values may come from the file, the flags or both: name the file when there is
    // one, where the file's own errors name it (before the message).
    if (!config_path.empty())
      s = absl::Status(s.code(),
                       absl::StrCat(config_path, " with the command-line flags: ", s.message()));
    std::fprintf(stderr, "kvtierd: %s\n", s.ToString().c_str());
    return 2;
  }
  if (absl::Status s = kvt::daemon::CheckDaemonPaths(config); !s.ok()) {
    std::fprintf(stderr, "kvtierd: %s\n", s.ToString().c_str());
    return 2;
  }
  spdlog::set_level(spdlog::level::from_str(config.log_level));

  // Block the shutdown signals in every thread; main waits for them with sigwait.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto server = kvt::daemon::KvtierServer::Start(config);
  if (!server.ok()) {
    std::fprintf(stderr, "kvtierd: %s\n", server.status().ToString().c_str());
    return 1;
  }
  int sig = 0;
  sigwait(&set, &sig);
  spdlog::info("kvtierd: signal {} received", sig);
  (*server)->Shutdown();
  return 0;
}
