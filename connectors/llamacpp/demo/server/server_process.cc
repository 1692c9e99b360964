#include "server_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "httplib.h"

namespace kvt::llamacpp::demo {
namespace {
using Clock = std::chrono::steady_clock;
int ExitCode(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st); }
}  // namespace

int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  close(fd);
  return port;
}

SchedTimes ReadSchedTimes(pid_t pid) {
  SchedTimes t;
  std::error_code ec;
  const std::filesystem::path dir = "/proc/" + std::to_string(pid) + "/task";
  double run_ns = 0, wait_ns = 0;
  bool any = false;
  for (const auto& task : std::filesystem::directory_iterator(dir, ec)) {
    std::ifstream f(task.path() / "schedstat");
    double run = 0, wait = 0;
    if (f >> run >> wait) {
      run_ns += run;
      wait_ns += wait;
      any = true;
    }
  }
  if (any) {
    t.run_ms = run_ns / 1e6;
    t.wait_ms = wait_ns / 1e6;
  }
  return t;
}

std::map<pid_t, std::pair<std::string, double>> ReadProcessCpuMs() {
  std::map<pid_t, std::pair<std::string, double>> out;
  const double ms_per_tick = 1000.0 / static_cast<double>(sysconf(_SC_CLK_TCK));
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(e.path() / "stat");
    std::string line;
    if (!std::getline(f, line)) continue;
    // pid (comm) state ppid ... utime(14) stime(15): comm may hold spaces, so split after ')'.
    const size_t open = line.find('('), close = line.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    std::string field;
    double utime = 0, stime = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
      if (i == 14) utime = std::atof(field.c_str());
      if (i == 15) stime = std::atof(field.c_str());
    }
    out[static_cast<pid_t>(std::atol(name.c_str()))] = {line.substr(open + 1, close - open - 1),
                                                        (utime + stime) * ms_per_tick};
  }
  return out;
}

std::string TailOfFile(const std::string& path, size_t lines) {
  std::ifstream in(path);
  std::deque<std::string> q;
  std::string l;
  while (std::getline(in, l)) {
    q.push_back(l);
    if (q.size() > lines) q.pop_front();
  }
  std::string out;
  for (auto& s : q) out += s + "\n";
  return out;
}

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(
    const std::string& binary, const std::vector<std::string>& args, const std::string& log,
    std::chrono::seconds timeout) {
  const int port = FreeLoopbackPort();
  if (port == 0) return absl::InternalError("no free loopback port");
  std::vector<std::string> all = {binary};
  all.insert(all.end(), args.begin(), args.end());
  all.insert(all.end(), {"--host", "127.0.0.1", "--port", std::to_string(port)});
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    const int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, 0);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  std::unique_ptr<ServerProcess> s(new ServerProcess(pid, port, log));
  httplib::Client cli("127.0.0.1", port);
  cli.set_connection_timeout(1, 0);
  cli.set_read_timeout(2, 0);
  const auto end = Clock::now() + timeout;
  while (Clock::now() < end) {
    int st = 0;
    if (waitpid(pid, &st, WNOHANG) == pid) {
      s->pid_ = -1;
      s->exit_code_ = ExitCode(st);
      return absl::UnavailableError(absl::StrCat(binary, " exited with code ", ExitCode(st),
                                                 " before serving; log ", log, ":\n",
                                                 TailOfFile(log)));
    }
    if (auto r = cli.Get("/health"); r && r->status == 200) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  s->Stop();
  return absl::UnavailableError(absl::StrCat(binary, " not healthy within ", timeout.count(),
                                             " s; log ", log, ":\n", TailOfFile(log)));
}

int ServerProcess::Stop() {
  if (pid_ < 0) return exit_code_;
  kill(pid_, SIGTERM);
  int st = 0;
  bool done = false;
  for (auto end = Clock::now() + std::chrono::seconds(60); Clock::now() < end;) {
    if (waitpid(pid_, &st, WNOHANG) == pid_) {
      done = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!done) {
    kill(pid_, SIGKILL);
    waitpid(pid_, &st, 0);
  }
  pid_ = -1;
  exit_code_ = ExitCode(st);
  return exit_code_;
}

ServerProcess::~ServerProcess() { Stop(); }

}  // namespace kvt::llamacpp::demo
