#include "kvtierd_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"

namespace kvt::llamacpp::demo {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxSocketPath = 107;  // sizeof(sockaddr_un::sun_path) - 1 on Linux

std::string SocketPath(const KvtierdProcessOptions& o) {
  return std::filesystem::absolute(o.run_dir + "/kvtierd.sock").lexically_normal().string();
}

std::string LastLine(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  return last.empty() ? "(no output)" : last;
}

std::string DescribeStatus(int status) {
  if (WIFEXITED(status)) return absl::StrFormat("exit code %d", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrFormat("signal %d", WTERMSIG(status));
  return absl::StrFormat("status %d", status);
}

// waitpid with a deadline; true and *status set when the child was reaped.
bool WaitFor(pid_t pid, std::chrono::milliseconds timeout, int* status) {
  const auto end = Clock::now() + timeout;
  while (true) {
    const pid_t r = waitpid(pid, status, WNOHANG);
    if (r == pid) return true;
    if (r < 0) {  // not our child any more (ECHILD): nothing left to wait for
      *status = 0;
      return true;
    }
    if (Clock::now() >= end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

absl::Status KvtierdProcessOptions::Validate() const {
  if (binary.empty()) return absl::FailedPreconditionError("no kvtierd binary given");
  if (access(binary.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("kvtierd binary '%s' not found or not executable", binary));
  }
  if (run_dir.empty()) return absl::InvalidArgumentError("run_dir: expected a folder, got ''");
  if (data_dir.empty()) return absl::InvalidArgumentError("data_dir: expected a folder, got ''");
  const uint64_t mib = 1ull << 20;
  if (host_capacity_bytes == 0 || host_capacity_bytes % mib != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "host_capacity_bytes: %d, expected a positive multiple of 1 MiB", host_capacity_bytes));
  }
  if (disk_file_bytes == 0 || disk_file_bytes % mib != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "disk_file_bytes: %d, expected a positive multiple of 1 MiB", disk_file_bytes));
  }
  if (disk_capacity_bytes == 0 || disk_capacity_bytes % disk_file_bytes != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "disk_capacity_bytes: %d, expected a positive multiple of disk_file_bytes (%d)",
        disk_capacity_bytes, disk_file_bytes));
  }
  for (const auto& [name, bytes] : {std::pair{"max_inflight_bytes", max_inflight_bytes},
                                    std::pair{"writeback_queue_bytes", writeback_queue_bytes}}) {
    if (bytes != 0 && bytes < disk_file_bytes) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: %d, expected 0 (kvtierd's default) or at least disk_file_bytes (%d)",
                          name, bytes, disk_file_bytes));
    }
  }
  if (const std::string s = SocketPath(*this); s.size() > kMaxSocketPath) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "socket path '%s' is %d bytes, a unix socket path allows at most %d (use a shorter --dir)",
        s, s.size(), kMaxSocketPath));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<KvtierdProcess>> KvtierdProcess::Start(
    const KvtierdProcessOptions& o) {
  if (absl::Status s = o.Validate(); !s.ok()) return s;
  std::error_code ec;
  std::filesystem::create_directories(o.run_dir, ec);
  if (ec)
    return absl::InternalError(absl::StrFormat("cannot create %s: %s", o.run_dir, ec.message()));
  const std::string socket = SocketPath(o);
  const std::string ready =
      std::filesystem::absolute(o.run_dir + "/kvtierd-ready.json").lexically_normal().string();
  const std::string config = o.run_dir + "/kvtierd.yaml";
  const std::string log = o.run_dir + "/kvtierd.log";
  std::filesystem::remove(socket, ec);
  std::filesystem::remove(ready, ec);
  {
    std::ofstream c(config, std::ios::trunc);
    c << "# written by kvtier-demo for its own kvtierd (docs/daemon.md)\n"
      << "listen: [\"unix://" << socket << "\"]\n"
      << "data_dir: \"" << std::filesystem::absolute(o.data_dir).string() << "\"\n"
      << "host_capacity: " << o.host_capacity_bytes << "\n"
      << "disk_capacity: " << o.disk_capacity_bytes << "\n"
      << "disk_file_bytes: " << o.disk_file_bytes << "\n"
      << "max_record_bytes: " << o.disk_file_bytes << "\n"
      << "durability: async\n"
      << "workers: 2\n"
      << "metrics:\n  listen: \"\"\n"
      << "log_level: warn\n"
      << "ready_file: \"" << ready << "\"\n";
    if (o.max_inflight_bytes != 0) c << "max_inflight_bytes: " << o.max_inflight_bytes << "\n";
    if (o.writeback_queue_bytes != 0)
      c << "writeback_queue_bytes: " << o.writeback_queue_bytes << "\n";
    if (!c.good()) return absl::InternalError("cannot write " + config);
  }
  // Everything the child needs is built before fork (only async-signal-safe calls after).
  std::vector<std::string> args = {o.binary, "--config", config};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrFormat("fork: %s", std::strerror(errno)));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);  // the demo died before prctl
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    const int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, 0);
    execv(o.binary.c_str(), argv.data());
    _exit(127);
  }
  auto process = std::unique_ptr<KvtierdProcess>(
      new KvtierdProcess(pid, "unix://" + socket, log, o.stop_timeout));
  const auto end = Clock::now() + o.ready_timeout;
  while (!std::filesystem::exists(ready, ec)) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      process->pid_ = -1;
      return absl::UnavailableError(absl::StrFormat("kvtierd exited (%s) before serving: %s",
                                                    DescribeStatus(status), LastLine(log)));
    }
    if (Clock::now() >= end) {
      (void)process->Stop();
      return absl::UnavailableError(absl::StrFormat("kvtierd not serving after %d ms (log: %s)",
                                                    o.ready_timeout.count(), log));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return process;
}

absl::Status KvtierdProcess::Stop() {
  if (pid_ < 0) return absl::OkStatus();
  const pid_t pid = pid_;
  pid_ = -1;
  kill(pid, SIGTERM);
  int status = 0;
  if (!WaitFor(pid, stop_timeout_, &status)) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return absl::InternalError(
        absl::StrFormat("kvtierd (pid %d) did not stop within %d ms of SIGTERM; killed", pid,
                        stop_timeout_.count()));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrFormat("kvtierd (pid %d) stopped with %s: %s", pid,
                                               DescribeStatus(status), LastLine(log_path_)));
  }
  return absl::OkStatus();
}

KvtierdProcess::~KvtierdProcess() {
  if (absl::Status s = Stop(); !s.ok())
    std::fprintf(stderr, "kvtier-demo: %s\n", s.ToString().c_str());
}

}  // namespace kvt::llamacpp::demo
