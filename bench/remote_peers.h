// Helpers of `kvtier-bench remote` (bench/mode_remote.cc): timing, child processes, and
// the redis-server peer it measures beside kvtierd. Included by that one file only.
#ifndef KVT_BENCH_REMOTE_PEERS_H_
#define KVT_BENCH_REMOTE_PEERS_H_

#include <netinet/in.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "bench_mode.h"

#if KVT_HAVE_HIREDIS
#include <hiredis/hiredis.h>
#endif

namespace kvt::bench::remote {
using Clock = std::chrono::steady_clock;

inline double Gbps(uint64_t bytes, double seconds) {
  return seconds > 0 ? bytes / seconds / 1e9 : 0;
}

inline double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

inline int FreePort() {
  sockaddr_in a;
  const int fd = BindLoopback(&a);
  if (fd >= 0) close(fd);
  return fd >= 0 ? ntohs(a.sin_port) : 0;
}

inline void Stop(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGTERM);
  int st = 0;
  for (int i = 0; i < 500; ++i) {
    if (waitpid(pid, &st, WNOHANG) == pid) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
}

// A redis-server started for the benchmark and a hiredis connection to it.
class RedisPeer {
 public:
  // "" when ready, else why Redis cannot be measured.
  std::string Start(const std::string& dir) {
#if !KVT_HAVE_HIREDIS
    (void)dir;
    return "kvtier-bench built without hiredis (pkg-config hiredis not found)";
#else
    std::string server;
    for (const char* p : {"/usr/bin/redis-server", "/usr/local/bin/redis-server"})
      if (std::filesystem::exists(p)) server = p;
    if (server.empty()) return "redis-server not installed (apt-get install redis-server)";
    const int port = FreePort();
    pid_ =
        Spawn({server, "--port", std::to_string(port), "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--dir", dir, "--protected-mode", "yes", "--daemonize", "no"},
              dir + "/redis.log");
    const auto until = Clock::now() + std::chrono::seconds(5);
    while (Clock::now() < until) {
      timeval tv{1, 0};
      c_ = redisConnectWithTimeout("127.0.0.1", port, tv);
      if (c_ != nullptr && c_->err == 0) return "";
      if (c_ != nullptr) redisFree(c_);
      c_ = nullptr;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return "redis-server did not accept connections within 5 s";
#endif
  }
  ~RedisPeer() {
#if KVT_HAVE_HIREDIS
    if (c_ != nullptr) redisFree(c_);
#endif
    Stop(pid_);
  }
  // SET then GET every record once; "" on success.
  std::string Measure(const std::vector<std::vector<std::byte>>& recs, double* set_gbps,
                      double* get_gbps) {
#if !KVT_HAVE_HIREDIS
    (void)recs, (void)set_gbps, (void)get_gbps;
    return "kvtier-bench built without hiredis";
#else
    uint64_t bytes = 0;
    auto t = Clock::now();
    for (size_t i = 0; i < recs.size(); ++i) {
      auto* reply = static_cast<redisReply*>(
          redisCommand(c_, "SET k%d %b", static_cast<int>(i), recs[i].data(), recs[i].size()));
      const bool ok = reply != nullptr && reply->type != REDIS_REPLY_ERROR;
      if (reply) freeReplyObject(reply);
      if (!ok) return "SET failed";
      bytes += recs[i].size();
    }
    *set_gbps = Gbps(bytes, Since(t));
    std::vector<std::byte> dst(recs[0].size());
    t = Clock::now();
    for (size_t i = 0; i < recs.size(); ++i) {
      auto* reply = static_cast<redisReply*>(redisCommand(c_, "GET k%d", static_cast<int>(i)));
      const bool ok =
          reply != nullptr && reply->type == REDIS_REPLY_STRING && reply->len == recs[i].size();
      if (ok)
        std::memcpy(dst.data(), reply->str,
                    reply->len);  // into the caller's buffer, like RemoteClient::Get
      if (reply) freeReplyObject(reply);
      if (!ok) return "GET failed";
    }
    *get_gbps = Gbps(bytes, Since(t));
    return "";
#endif
  }
  // The same bytes as values of `piece` bytes: all SETs pipelined, then all GETs
  // pipelined, each GET copied into the caller's buffer at its offset; "" on success.
  std::string MeasurePieces(const std::vector<std::vector<std::byte>>& recs, uint64_t piece,
                            double* set_gbps, double* get_gbps) {
#if !KVT_HAVE_HIREDIS
    (void)recs, (void)piece, (void)set_gbps, (void)get_gbps;
    return "kvtier-bench built without hiredis";
#else
    struct Piece {
      size_t rec;
      uint64_t off, len;
    };
    std::vector<Piece> pieces;
    uint64_t bytes = 0;
    for (size_t i = 0; i < recs.size(); ++i)
      for (uint64_t off = 0; off < recs[i].size(); off += piece)
        pieces.push_back({i, off, std::min<uint64_t>(piece, recs[i].size() - off)});
    for (const Piece& p : pieces) bytes += p.len;
    auto drain = [&](bool get, std::vector<std::byte>* dst) -> bool {
      for (const Piece& p : pieces) {
        void* r = nullptr;
        if (redisGetReply(c_, &r) != REDIS_OK || r == nullptr) return false;
        auto* reply = static_cast<redisReply*>(r);
        bool ok = reply->type != REDIS_REPLY_ERROR;
        if (get) {
          ok = reply->type == REDIS_REPLY_STRING && static_cast<uint64_t>(reply->len) == p.len;
          if (ok) std::memcpy(dst->data() + p.off, reply->str, p.len);
        }
        freeReplyObject(reply);
        if (!ok) return false;
      }
      return true;
    };
    auto t = Clock::now();
    for (size_t j = 0; j < pieces.size(); ++j) {
      const Piece& p = pieces[j];
      redisAppendCommand(c_, "SET p%d %b", static_cast<int>(j), recs[p.rec].data() + p.off,
                         static_cast<size_t>(p.len));
    }
    if (!drain(false, nullptr)) return "pipelined SET failed";
    *set_gbps = Gbps(bytes, Since(t));
    std::vector<std::byte> dst(recs[0].size());
    t = Clock::now();
    for (size_t j = 0; j < pieces.size(); ++j)
      redisAppendCommand(c_, "GET p%d", static_cast<int>(j));
    if (!drain(true, &dst)) return "pipelined GET failed";
    *get_gbps = Gbps(bytes, Since(t));
    if (std::memcmp(dst.data(), recs.back().data(), dst.size()) != 0)
      return "pipelined GET returned different bytes";
    return "";
#endif
  }

 private:
#if KVT_HAVE_HIREDIS
  redisContext* c_ = nullptr;
#endif
  pid_t pid_ = -1;
};

}  // namespace kvt::bench::remote

#endif  // KVT_BENCH_REMOTE_PEERS_H_
