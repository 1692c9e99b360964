// kvtierd: the kvtier cache daemon. See docs/daemon.md.
//   kvtierd --config /etc/kvtier/kvtierd.yaml [--listen unix:///run/kvtierd.sock] ...
//   kvtierd --config /etc/kvtier/kvtierd.yaml --check-config   (validate, print, exit)
// SIGTERM/SIGINT: graceful shutdown (every acknowledged put is on disk), exit 0.
// Exit codes: 0 ok (and --help, and a valid --check-config), 1 runtime failure (store,
// listener, ready file), 2 bad command line or config.
#include <malloc.h>
#include <signal.h>

#include <cstdio>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "daemon/config.h"
#include "daemon/config_report.h"
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
  bool allow_remote = false, no_shm = false, no_direct_io = false, check_config = false;
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
  app.add_flag("--check-config", check_config,
               "validate the config file and flags, print the effective settings and exit "
               "(0 valid, 2 not); binds nothing and leaves the data dir alone");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 prints the message (and --help's text); every command-line error exits 2.
    return app.exit(e) == 0 ? 0 : 2;
  }

  DaemonConfig config = kvt::daemon::DefaultDaemonConfig();
  kvt::daemon::ConfigOrigin origin;
  origin.file = config_path;
  if (!config_path.empty()) {
    auto c = kvt::daemon::LoadDaemonConfig(config_path, config, &origin.file_keys);
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
  // Each flag given overrides its key; origin remembers it so errors name the flag.
  auto given = [&](const char* flag, const char* key) {
    if (app.count(flag) == 0) return false;
    origin.flag_keys[key] = flag;
    return true;
  };
  if (given("--listen", "listen")) config.listen = listen;
  if (given("--data-dir", "data_dir")) config.data_dir = data_dir;
  if (given("--host-capacity", "host_capacity") &&
      !bytes("--host-capacity", host_cap, &config.host.capacity_bytes))
    return 2;
  if (given("--disk-capacity", "disk_capacity") &&
      !bytes("--disk-capacity", disk_cap, &config.disk.capacity_bytes))
    return 2;
  if (given("--metrics-listen", "metrics.listen")) {
    config.metrics_listen = metrics_listen;
    config.metrics_listen_explicit = true;
  }
  if (given("--durability", "durability"))
    config.durability =
        durability == "async" ? kvt::daemon::Durability::kAsync : kvt::daemon::Durability::kSync;
  if (given("--workers", "workers")) config.workers = workers;
  if (given("--ready-file", "ready_file")) config.ready_file = ready_file;
  if (given("--log-level", "log_level")) config.log_level = log_level;
  if (allow_remote && given("--allow-remote", "allow_remote")) config.allow_remote = true;
  if (no_shm && given("--no-shm", "shm.enabled")) config.shm_enabled = false;
  if (no_direct_io && given("--no-direct-io", "disk_direct_io")) config.disk.direct_io = false;
  // Flags and file go through the same checks; any failure here is a bad config: exit 2.
  // The message names where the value came from: the flag, the file and key, or a default.
  absl::Status s = config.Validate();
  if (s.ok()) s = kvt::daemon::CheckDaemonPaths(config);
  if (!s.ok()) {
    s = kvt::daemon::AttributeConfigError(s, origin);
    std::fprintf(stderr, "kvtierd: %s\n", s.ToString().c_str());
    return 2;
  }
  if (check_config) {
    const std::string file = config_path.empty() ? "no config file" : config_path;
    std::printf("# kvtierd --check-config: valid (%s)\n%s", file.c_str(),
                kvt::daemon::EffectiveConfigYaml(config, origin).c_str());
    return 0;
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
