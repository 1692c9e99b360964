// KvtierdProcess: kvtier-demo's own kvtierd (daemon/kvtierd) child process.
//
// Start() writes a config file, forks and execs the binary on a unix socket in
// `run_dir`, and waits until the daemon has written its ready file (it is serving).
// The child gets PR_SET_PDEATHSIG = SIGTERM, so it is told to shut down even when the
// demo dies without unwinding (uncaught exception, SIGKILL of the demo).
// Stop() (also run by the destructor, so every early return stops it) sends SIGTERM,
// waits up to `stop_timeout` for the graceful shutdown, then SIGKILLs it.
//
// Not thread-safe: one owner thread (the one that called Start; PDEATHSIG is tied to it).
#ifndef LLAMACPP_DEMO_KVTIERD_PROCESS_H_
#define LLAMACPP_DEMO_KVTIERD_PROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvt::llamacpp::demo {

struct KvtierdProcessOptions {
  std::string binary;    // path of kvtierd
  std::string run_dir;   // socket, config, ready file and log go here (created)
  std::string data_dir;  // the daemon's disk tier and namespace registry (created by it)
  uint64_t host_capacity_bytes = 256ull << 20;  // REQUIRES: > 0, multiple of 1 MiB
  uint64_t disk_file_bytes = 256ull << 20;      // REQUIRES: > 0, multiple of 1 MiB
  uint64_t disk_capacity_bytes = 1ull << 30;    // REQUIRES: multiple of disk_file_bytes
  // kvtierd's `max_inflight_bytes` and `writeback_queue_bytes` (docs/daemon.md "Memory");
  // 0 leaves kvtierd's default (1 GiB, 256 MiB). REQUIRES: 0 or >= disk_file_bytes (the
  // largest record).
  uint64_t max_inflight_bytes = 0;
  uint64_t writeback_queue_bytes = 0;
  std::chrono::milliseconds ready_timeout{30000};
  std::chrono::milliseconds stop_timeout{15000};

  // InvalidArgument naming the field; FailedPrecondition when `binary` is not an
  // executable file; InvalidArgument when the socket path exceeds sun_path (107 bytes).
  absl::Status Validate() const;
};

class KvtierdProcess {
 public:
  // FailedPrecondition/InvalidArgument from Validate; Internal when fork fails;
  // Unavailable when the daemon exits (its last log line is in the message) or is not
  // serving within ready_timeout (it is then killed).
  static absl::StatusOr<std::unique_ptr<KvtierdProcess>> Start(
      const KvtierdProcessOptions& options);
  ~KvtierdProcess();
  KvtierdProcess(const KvtierdProcess&) = delete;
  KvtierdProcess& operator=(const KvtierdProcess&) = delete;

  // gRPC target, "unix:///abs/path/kvtierd.sock".
  const std::string& target() const { return target_; }
  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }

  // SIGTERM, wait (SIGKILL after stop_timeout). OK when it exited with code 0;
  // Internal with the exit status otherwise. Idempotent (later calls return OK).
  absl::Status Stop();

 private:
  KvtierdProcess(pid_t pid, std::string target, std::string log_path,
                 std::chrono::milliseconds stop_timeout)
      : pid_(pid),
        target_(std::move(target)),
        log_path_(std::move(log_path)),
        stop_timeout_(stop_timeout) {}

  pid_t pid_;  // -1 once reaped
  std::string target_;
  std::string log_path_;
  std::chrono::milliseconds stop_timeout_;
};

}  // namespace kvt::llamacpp::demo

#endif  // LLAMACPP_DEMO_KVTIERD_PROCESS_H_
