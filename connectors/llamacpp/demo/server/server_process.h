// ServerProcess: one kvtier-llama-server child process on 127.0.0.1 (kvtier's server demo
// and the server tests). Not thread-safe: one owner.
#ifndef LLAMACPP_DEMO_SERVER_SERVER_PROCESS_H_
#define LLAMACPP_DEMO_SERVER_SERVER_PROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kvt::llamacpp::demo {

// A free loopback TCP port (bound to 0, then released).
int FreeLoopbackPort();

// CPU time of all threads of process `pid` so far, from /proc/<pid>/task/*/schedstat
// (Linux; the kernel's sched_info): ms on a CPU, and ms runnable but waiting for one
// (another process or thread had it). Both -1 when unreadable.
struct SchedTimes {
  double run_ms = -1;
  double wait_ms = -1;
};
SchedTimes ReadSchedTimes(pid_t pid);

// CPU time (user + system, ms; /proc/<pid>/stat, 10 ms ticks) of every process now,
// with its name: pid -> (comm, ms). Two snapshots tell who else ran during a request.
std::map<pid_t, std::pair<std::string, double>> ReadProcessCpuMs();

// The last `lines` lines of a text file.
std::string TailOfFile(const std::string& path, size_t lines = 30);

class ServerProcess {
 public:
  // Starts `binary args... --host 127.0.0.1 --port P` with stdout and stderr appended to
  // `log`, and waits until GET /health answers 200. The child gets SIGKILL if its parent
  // dies. Unavailable (with the log's tail) when it exits first or is not healthy within
  // `timeout`; Internal when fork fails.
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(
      const std::string& binary, const std::vector<std::string>& args, const std::string& log,
      std::chrono::seconds timeout = std::chrono::seconds(180));
  ~ServerProcess();  // Stop()
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // SIGTERM, wait up to 60 s (then SIGKILL). Returns the exit code, or 128 + signal.
  // Idempotent (later calls return the first result).
  int Stop();
  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  pid_t pid() const { return pid_; }
  const std::string& log() const { return log_; }

 private:
  ServerProcess(pid_t pid, int port, std::string log)
      : pid_(pid), port_(port), log_(std::move(log)) {}
  pid_t pid_;
  int port_;
  std::string log_;
  int exit_code_ = 0;
};

}  // namespace kvt::llamacpp::demo

#endif  // LLAMACPP_DEMO_SERVER_SERVER_PROCESS_H_
