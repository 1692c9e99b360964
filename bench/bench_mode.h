// Registry of kvtier-bench modes. Each bench/mode_*.cc registers one mode:
//   KVT_BENCH_MODE(tiers, "host/disk tier bandwidth vs memcpy and raw io_uring", RunTiers);
// where RunTiers(int argc, char** argv) parses its own flags (CLI11) and returns an exit code.
#ifndef KVT_BENCH_BENCH_MODE_H_
#define KVT_BENCH_BENCH_MODE_H_

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace kvt::bench {

struct Mode {
  std::string help;
  std::function<int(int argc, char** argv)> run;
};

inline std::map<std::string, Mode>& Modes() {
  static std::map<std::string, Mode> modes;
  return modes;
}

struct ModeRegistrar {
  ModeRegistrar(const char* name, const char* help, std::function<int(int, char**)> run) {
    Modes()[name] = Mode{help, std::move(run)};
  }
};

// The kvtierd binary a mode starts: `flag` when given, else $KVTIERD, else the one built
// beside kvtier-bench (build/release/daemon/kvtierd), else "kvtierd" from PATH.
inline std::string FindKvtierd(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv("KVTIERD"); env != nullptr && *env) return env;
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (auto cand :
         {self.parent_path() / "kvtierd", self.parent_path().parent_path() / "daemon" / "kvtierd"})
      if (std::filesystem::exists(cand)) return cand.string();
  }
  return "kvtierd";
}

// A TCP socket bound to 127.0.0.1 on a free port (the port in *addr), or -1. Loopback
// only: the benches' traffic never leaves the machine.
inline int BindLoopback(sockaddr_in* addr) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  *addr = sockaddr_in{};
  addr->sin_family = AF_INET;
  addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(*addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(addr), sizeof(*addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(addr), &len) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Starts `argv` (argv[0] looked up on PATH) with stdout and stderr into `log`; the child's
// pid, or -1 when fork failed. The child exits 127 when exec fails.
inline pid_t Spawn(const std::vector<std::string>& argv, const std::string& log) {
  pid_t pid = fork();
  if (pid == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  return pid;
}

}  // namespace kvt::bench

#define KVT_BENCH_MODE(name, help, fn) \
  static ::kvt::bench::ModeRegistrar kvt_bench_mode_##name(#name, help, fn)

#endif  // KVT_BENCH_BENCH_MODE_H_
