// Test harness for the daemon suite: a temp dir, a real kvtierd process started from
// KVTIERD_BIN with a config file, chunk record builders and client helpers.
#ifndef KVT_TESTS_DAEMON_DAEMON_HARNESS_H_
#define KVT_TESTS_DAEMON_DAEMON_HARNESS_H_

#include <fcntl.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../kvstore/test_records.h"
#include "absl/strings/str_format.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/chunk_key.h"
#include "kvstore/remote_client.h"
#include "nlohmann/json.hpp"

namespace kvt::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = "/tmp/kvtd-XXXXXX";
    char* p = mkdtemp(tmpl.data());
    path_ = p != nullptr ? p : "/tmp/kvtd-fallback";
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// One kvtierd child process. Start() waits for its ready file.
class Daemon {
 public:
  // `extra_yaml` is appended to the base config (one key per line, top level).
  explicit Daemon(const std::string& dir, std::string extra_yaml = "")
      : dir_(dir), extra_(std::move(extra_yaml)) {}
  ~Daemon() { Kill(SIGKILL); }

  std::string target() const { return "unix://" + dir_ + "/kvtierd.sock"; }
  int metrics_port() const { return metrics_port_; }
  pid_t pid() const { return pid_; }
  // Command-line flags passed after `--config <file>` (e.g. "--no-shm").
  void set_extra_args(std::vector<std::string> args) { extra_args_ = std::move(args); }
  // Environment variables ("NAME=value") set in the child before exec.
  void set_extra_env(std::vector<std::string> env) { extra_env_ = std::move(env); }

  // The base config with any top-level key that `extra_yaml` sets removed, then extra.
  std::string Config() const {
    std::string base = BaseConfig(), out;
    std::istringstream in(base);
    std::string line;
    bool skipping = false;
    while (std::getline(in, line)) {
      const bool top = !line.empty() && line[0] != ' ';
      if (top) {
        const std::string key = line.substr(0, line.find(':') + 1);
        skipping = extra_.rfind(key, 0) == 0 || extra_.find("\n" + key) != std::string::npos;
      }
      if (!skipping) out += line + "\n";
    }
    return out + extra_;
  }

  std::string BaseConfig() const {
    return absl::StrFormat(
        "listen: %s\ndata_dir: %s/data\nhost_capacity: 64MiB\ndisk_capacity: "
        "256MiB\ndisk_file_bytes: 64MiB\n"
        "max_record_bytes: 32MiB\nmax_inflight_bytes: 256MiB\nworkers: 4\nlog_level: warn\n"
        "metrics:\n  listen: 127.0.0.1:0\nready_file: %s/ready.json\n%s",
        target(), dir_, dir_, extra_);
  }

  // Starts the daemon; false (with a message) if it is not ready within 20 s.
  bool Start(std::string* error = nullptr) {
    const std::string cfg = dir_ + "/kvtierd.yaml";
    std::ofstream(cfg) << Config();
    std::filesystem::remove(dir_ + "/ready.json");
    pid_ = fork();
    if (pid_ == 0) {
      std::string log = dir_ + "/kvtierd.log";
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
      }
      for (const auto& e : extra_env_) {
        const size_t eq = e.find('=');
        if (eq != std::string::npos) setenv(e.substr(0, eq).c_str(), e.c_str() + eq + 1, 1);
      }
      std::vector<const char*> argv = {KVTIERD_BIN, "--config", cfg.c_str()};
      for (const auto& a : extra_args_) argv.push_back(a.c_str());
      argv.push_back(nullptr);
      execv(KVTIERD_BIN, const_cast<char* const*>(argv.data()));
      _exit(127);
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < until) {
      std::ifstream in(dir_ + "/ready.json");
      if (in) {
        auto j = nlohmann::json::parse(in, nullptr, false);
        if (!j.is_discarded()) {
          metrics_port_ = j.value("metrics_port", 0);
          return true;
        }
      }
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        if (error) *error = "kvtierd exited early: " + Log();
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (error) *error = "kvtierd not ready in 20 s: " + Log();
    return false;
  }

  // Sends `sig`; for SIGKILL/SIGTERM waits for the exit and returns the wait status.
  int Kill(int sig) {
    if (pid_ <= 0) return -1;
    ::kill(pid_, sig);
    if (sig == SIGSTOP) {  // wait until the kernel has stopped it
      for (int i = 0; i < 1000 && ProcState() != 'T'; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (sig != SIGKILL && sig != SIGTERM) return 0;
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

  // Sends `sig` and waits up to `limit` for the exit: its wait status, or -1 when it is
  // still running then (it is killed with SIGKILL).
  int KillWithin(int sig, std::chrono::milliseconds limit) {
    if (pid_ <= 0) return -1;
    ::kill(pid_, sig);
    const auto until = std::chrono::steady_clock::now() + limit;
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) != pid_) {
      if (std::chrono::steady_clock::now() > until) {
        Kill(SIGKILL);
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    pid_ = -1;
    return status;
  }

  std::string Log() const {
    std::ifstream in(dir_ + "/kvtierd.log");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  // State letter from /proc/<pid>/stat ('T' = stopped).
  char ProcState() const {
    std::ifstream in(absl::StrFormat("/proc/%d/stat", pid_));
    std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto p = all.rfind(')');
    return p == std::string::npos || p + 2 >= all.size() ? '?' : all[p + 2];
  }

  // VmRSS of the daemon in bytes (0 if unknown).
  uint64_t RssBytes() const {
    std::ifstream in(absl::StrFormat("/proc/%d/status", pid_));
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("VmRSS:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;
    }
    return 0;
  }

 private:
  std::string dir_, extra_;
  std::vector<std::string> extra_args_;
  std::vector<std::string> extra_env_;
  pid_t pid_ = -1;
  int metrics_port_ = 0;
};

inline KvLayout SmallLayout() {
  KvLayout l;
  l.num_layers = 2;
  l.num_kv_heads = 2;
  l.head_dim = 64;
  l.dtype = DType::kF16;
  return l;  // 1024 bytes per token
}

inline NamespaceId TestNamespace(const std::string& model, const std::string& tenant = "") {
  NamespaceParams p;
  p.model_id = model;
  p.layout = SmallLayout();
  p.chunk_tokens = 16;
  p.tenant = tenant;
  return ComputeNamespace(p);
}

// A chain of `n` records of `tokens` tokens each under `ns`, payload bytes from `seed`.
// Returned keys[i] is the key of record i; record i's parent is keys[i-1] (or the root).
struct Chain {
  std::vector<ChunkKey> keys;
  std::vector<std::vector<std::byte>> records;
};

inline Chain MakeChain(NamespaceId ns, int n, uint32_t tokens, uint64_t seed,
                       KvLayout layout = SmallLayout()) {
  Chain c;
  ChunkChainEncoder chain(ns, layout);
  std::mt19937_64 rng(seed);
  for (int i = 0; i < n; ++i) {
    std::vector<TokenId> toks(tokens);
    for (auto& t : toks) t = static_cast<TokenId>(rng() % 32000);
    const ChunkKey key = chain.NextKey(toks);
    std::vector<std::byte> payload(layout.payload_bytes(tokens));
    for (size_t j = 0; j < payload.size(); j += 8) {
      uint64_t v = rng();
      std::memcpy(payload.data() + j, &v, std::min<size_t>(8, payload.size() - j));
    }
    c.keys.push_back(key);
    c.records.push_back(EncodeNextOrDie(chain, key, tokens, payload));
  }
  return c;
}

inline std::unique_ptr<RemoteClient> Connect(
    const std::string& target, const std::string& token = "",
    std::chrono::milliseconds deadline = std::chrono::milliseconds(3000)) {
  RemoteClientOptions o;
  o.target = target;
  o.token = token;
  o.deadline = deadline;
  auto c = RemoteClient::Create(o);
  return c.ok() ? std::move(*c) : nullptr;
}

}  // namespace kvt::testing

#endif  // KVT_TESTS_DAEMON_DAEMON_HARNESS_H_
