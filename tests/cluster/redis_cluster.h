// Test harness: real redis-server processes on loopback ports (Debian's redis-server
// 7.0, REDIS_SERVER_BIN / REDIS_CLI_BIN), either a cluster of masters made with
// `redis-cli --cluster create`, or a single node (plain, or cluster-enabled without
// slots). Data lives in a temp dir; processes are killed in the destructor.
#ifndef KVT_TESTS_CLUSTER_REDIS_CLUSTER_H_
#define KVT_TESTS_CLUSTER_REDIS_CLUSTER_H_

#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace kvt::testing {

// True when nothing listens on 127.0.0.1:port (and it can be bound).
inline bool PortFree(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return ok;
}

// A port p in 20000..29999 with p and p+10000 (the cluster bus) free.
inline int PickPort() {
  static std::mt19937 rng(static_cast<unsigned>(getpid() * 7919 + time(nullptr)));
  for (int i = 0; i < 1000; ++i) {
    int p = 20000 + static_cast<int>(rng() % 10000);
    if (PortFree(p) && PortFree(p + 10000)) return p;
  }
  return 0;
}

struct RedisNode {
  int port = 0;
  pid_t pid = -1;
  std::vector<std::string> args;  // to restart it the same way
};

class RedisProcs {
 public:
  explicit RedisProcs(std::string dir) : dir_(std::move(dir)) {}
  ~RedisProcs() {
    for (auto& n : nodes_) Kill(n);
  }

  // Starts one redis-server; `cluster` adds cluster mode; `extra` more "--k v" args.
  // Returns its index, or -1 when it did not answer PING within 10 s.
  int Start(bool cluster, std::vector<std::string> extra = {}) {
    RedisNode n;
    n.port = PickPort();
    n.args = {REDIS_SERVER_BIN,
              "--port",
              std::to_string(n.port),
              "--bind",
              "127.0.0.1",
              "--dir",
              dir_,
              "--save",
              "",
              "--appendonly",
              "no",
              "--daemonize",
              "no",
              "--logfile",
              absl::StrFormat("%s/redis-%d.log", dir_, n.port),
              "--maxmemory",
              "400mb",
              "--maxmemory-policy",
              "allkeys-lru"};
    if (cluster) {
      for (const char* a : {"--cluster-enabled", "yes", "--cluster-node-timeout", "1000",
                            "--cluster-require-full-coverage", "no"})
        n.args.push_back(a);
      n.args.push_back("--cluster-config-file");
      n.args.push_back(absl::StrFormat("nodes-%d.conf", n.port));
    }
    for (auto& e : extra) n.args.push_back(e);
    nodes_.push_back(n);
    if (!Launch(nodes_.back())) return -1;
    return static_cast<int>(nodes_.size()) - 1;
  }

  // Starts `n` cluster nodes and joins them as masters (no replicas); waits until every
  // node reports cluster_state:ok. False on failure (with `error`).
  bool StartCluster(int n, std::string* error, const std::string& password = "", int replicas = 0) {
    std::vector<std::string> extra;
    if (!password.empty()) extra = {"--requirepass", password, "--masterauth", password};
    std::vector<std::string> addrs;
    for (int i = 0; i < n; ++i) {
      int idx = Start(true, extra);
      if (idx < 0) {
        *error = "redis-server did not start";
        return false;
      }
      addrs.push_back(absl::StrFormat("127.0.0.1:%d", nodes_[idx].port));
    }
    std::string cmd = absl::StrFormat(
        "%s --cluster create %s --cluster-replicas %d --cluster-yes %s > %s/create.log 2>&1",
        REDIS_CLI_BIN, absl::StrJoin(addrs, " "), replicas,
        password.empty() ? "" : "-a " + password, dir_);
    if (std::system(cmd.c_str()) != 0) {
      *error = "redis-cli --cluster create failed: " + cmd;
      return false;
    }
    password_ = password;
    return WaitClusterOk(error);
  }

  bool WaitClusterOk(std::string* error, int seconds = 20) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (std::chrono::steady_clock::now() < until) {
      bool all = true;
      for (auto& n : nodes_) {
        if (n.pid < 0) continue;
        std::string info = Command(n.port, {"CLUSTER", "INFO"});
        if (info.find("cluster_state:ok") == std::string::npos) all = false;
      }
      if (all) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    *error = "cluster not ok in time";
    return false;
  }

  // SIGKILL (no persistence: its keys are gone).
  void Kill(RedisNode& n) {
    if (n.pid <= 0) return;
    ::kill(n.pid, SIGKILL);
    waitpid(n.pid, nullptr, 0);
    n.pid = -1;
  }
  void Kill(int i) { Kill(nodes_[i]); }
  // Restarts a killed node with the same port and nodes.conf (it rejoins the cluster).
  bool Restart(int i) { return Launch(nodes_[i]); }

  // Runs a command; returns the reply as text ("(nil)", "ERR ..." for errors, elements
  // joined by '\n' for arrays of strings). "" when the node cannot be reached.
  std::string Command(int port, const std::vector<std::string>& args) {
    redisContext* c = redisConnectWithTimeout("127.0.0.1", port, timeval{1, 0});
    if (c == nullptr || c->err) {
      if (c) redisFree(c);
      return "";
    }
    redisSetTimeout(c, timeval{5, 0});
    if (!password_.empty()) freeReplyObject(redisCommand(c, "AUTH %s", password_.c_str()));
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    auto* r = static_cast<redisReply*>(
        redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data()));
    std::string out;
    if (r != nullptr) {
      if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS ||
          r->type == REDIS_REPLY_ERROR) {
        out.assign(r->str, r->len);
      } else if (r->type == REDIS_REPLY_INTEGER) {
        out = std::to_string(r->integer);
      } else if (r->type == REDIS_REPLY_NIL) {
        out = "(nil)";
      } else if (r->type == REDIS_REPLY_ARRAY) {
        for (size_t i = 0; i < r->elements; ++i) {
          if (i) out += "\n";
          if (r->element[i]->type == REDIS_REPLY_STRING)
            out.append(r->element[i]->str, r->element[i]->len);
        }
      }
      freeReplyObject(r);
    }
    redisFree(c);
    return out;
  }

  std::string NodeId(int i) { return Command(nodes_[i].port, {"CLUSTER", "MYID"}); }
  // Index of the node serving `slot` per CLUSTER SLOTS of node 0's view, by port.
  int IndexOfPort(int port) const {
    for (size_t i = 0; i < nodes_.size(); ++i)
      if (nodes_[i].port == port) return static_cast<int>(i);
    return -1;
  }

  std::vector<std::string> Seeds() const {
    std::vector<std::string> s;
    for (auto& n : nodes_) s.push_back(absl::StrFormat("127.0.0.1:%d", n.port));
    return s;
  }
  RedisNode& node(int i) { return nodes_[i]; }
  size_t size() const { return nodes_.size(); }

 private:
  bool Launch(RedisNode& n) {
    n.pid = fork();
    if (n.pid == 0) {
      std::vector<char*> argv;
      for (auto& a : n.args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < until) {
      if (waitpid(n.pid, nullptr, WNOHANG) == n.pid) {  // exited: e.g. the port was taken meanwhile
        n.pid = -1;
        return false;
      }
      redisContext* c = redisConnectWithTimeout("127.0.0.1", n.port, timeval{0, 200000});
      const bool up = c != nullptr && !c->err;
      if (c) redisFree(c);
      if (up) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  std::string dir_;
  std::string password_;
  std::vector<RedisNode> nodes_;
};

}  // namespace kvt::testing

#endif  // KVT_TESTS_CLUSTER_REDIS_CLUSTER_H_
