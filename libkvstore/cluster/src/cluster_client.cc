#include "kvstore/cluster_client.h"

#include <hiredis/hiredis.h>
#include <hiredis/sds.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"

namespace kvt::cluster {

void ReplyDeleter::operator()(redisReply* r) const {
  if (r != nullptr) freeReplyObject(r);
}

absl::Status ClusterClientOptions::Validate() const {
  auto bad = [](const std::string& f, const std::string& why) {
    return absl::InvalidArgumentError(absl::StrFormat("cluster %s: %s", f, why));
  };
  if (nodes.empty()) return bad("nodes", "at least one \"host:port\" is required");
  for (const auto& n : nodes)
    if (auto a = ParseNodeAddr(n); !a.ok()) return a.status();
  for (auto [name, v] :
       {std::pair{"connect_timeout", connect_timeout}, std::pair{"io_timeout", io_timeout},
        std::pair{"deadline", deadline}, std::pair{"node_retry", node_retry}})
    if (v.count() <= 0) return bad(name, absl::StrFormat("%d ms, expected > 0", v.count()));
  if (max_redirects < 1) return bad("max_redirects", "expected >= 1");
  if (!username.empty() && password.empty()) return bad("username", "an ACL user needs a password");
  return absl::OkStatus();
}

namespace {

using Clock = std::chrono::steady_clock;

struct CtxDeleter {
  void operator()(redisContext* c) const { redisFree(c); }
};
using Ctx = std::unique_ptr<redisContext, CtxDeleter>;

timeval ToTimeval(std::chrono::milliseconds ms) {
  return timeval{static_cast<time_t>(ms.count() / 1000),
                 static_cast<suseconds_t>((ms.count() % 1000) * 1000)};
}

// Sends `cmds` and reads their replies, at most `window` commands in flight (0 = all
// written before any reply is read). On an I/O error returns Unavailable (the
// connection is then unusable).
absl::StatusOr<std::vector<Reply>> Pipeline(redisContext* c, std::span<const Command> cmds,
                                            bool asking, const NodeAddr& addr, size_t window = 0) {
  static constexpr std::string_view kAsking = "ASKING";
  const char* asking_argv[1] = {kAsking.data()};
  const size_t asking_len[1] = {kAsking.size()};
  std::vector<Reply> out;
  out.reserve(cmds.size());
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  auto read_one = [&]() -> absl::Status {
    for (int part = 0; part < (asking ? 2 : 1); ++part) {
      void* r = nullptr;
      if (redisGetReply(c, &r) != REDIS_OK || r == nullptr)
        return absl::UnavailableError(absl::StrFormat("redis %s: %s", addr.ToString(), c->errstr));
      Reply reply(static_cast<redisReply*>(r));
      if (asking && part == 0) continue;  // +OK of ASKING
      out.push_back(std::move(reply));
    }
    return absl::OkStatus();
  };
  for (size_t i = 0; i < cmds.size(); ++i) {
    if (asking) redisAppendCommandArgv(c, 1, asking_argv, asking_len);
    argv.clear();
    lens.clear();
    for (std::string_view a : cmds[i]) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    if (redisAppendCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data()) !=
        REDIS_OK)
      return absl::UnavailableError(absl::StrFormat("redis %s: %s", addr.ToString(), c->errstr));
    if (window > 0 && i + 1 - out.size() >= window)
      if (absl::Status s = read_one(); !s.ok()) return s;
  }
  while (out.size() < cmds.size())
    if (absl::Status s = read_one(); !s.ok()) return s;
  return out;
}

std::string_view ErrorText(const redisReply* r) {
  return (r != nullptr && r->type == REDIS_REPLY_ERROR) ? std::string_view(r->str, r->len)
                                                        : std::string_view();
}

}  // namespace

class ClusterClient::Impl {
 public:
  explicit Impl(const ClusterClientOptions& o) : opt(o) {
    for (const auto& n : o.nodes) seeds.push_back(*ParseNodeAddr(n));
  }

  const ClusterClientOptions opt;
  std::vector<NodeAddr> seeds;

  struct Node {
    std::vector<Ctx> idle;
    Clock::time_point down_until{};
  };
  mutable absl::Mutex mu;
  SlotMap map ABSL_GUARDED_BY(mu);
  std::map<std::string, Node> nodes ABSL_GUARDED_BY(mu);
  Clock::time_point last_refresh ABSL_GUARDED_BY(mu){};
  std::atomic<uint64_t> moved{0}, ask{0}, try_again{0}, node_failures{0}, slot_refreshes{0};

  // A new connection (AUTH done). Unavailable / PermissionDenied.
  absl::StatusOr<Ctx> Connect(const NodeAddr& a) {
    Ctx c(redisConnectWithTimeout(a.host.c_str(), a.port, ToTimeval(opt.connect_timeout)));
    if (c == nullptr) return absl::ResourceExhaustedError("redis: cannot allocate a context");
    if (c->err)
      return absl::UnavailableError(
          absl::StrFormat("redis %s: cannot connect: %s", a.ToString(), c->errstr));
    redisSetTimeout(c.get(), ToTimeval(opt.io_timeout));
    if (!opt.password.empty()) {
      Command cmd = opt.username.empty() ? Command{"AUTH", opt.password}
                                         : Command{"AUTH", opt.username, opt.password};
      auto r = Pipeline(c.get(), std::span(&cmd, 1), false, a);
      if (!r.ok()) return r.status();
      if (std::string_view e = ErrorText((*r)[0].get()); !e.empty())
        return absl::PermissionDeniedError(
            absl::StrFormat("redis %s: AUTH refused: %s", a.ToString(), e));
    }
    return c;
  }

  void MarkDown(const NodeAddr& a) {
    node_failures.fetch_add(1, std::memory_order_relaxed);
    absl::MutexLock l(&mu);
    Node& n = nodes[a.ToString()];
    n.down_until = Clock::now() + opt.node_retry;
    n.idle.clear();
  }

  // An idle or new connection to `a`. Unavailable at once while `a` is marked down.
  absl::StatusOr<Ctx> Acquire(const NodeAddr& a) {
    {
      absl::MutexLock l(&mu);
      Node& n = nodes[a.ToString()];
      if (Clock::now() < n.down_until)
        return absl::UnavailableError(
            absl::StrFormat("redis %s: node marked down after a failure", a.ToString()));
      if (!n.idle.empty()) {
        Ctx c = std::move(n.idle.back());
        n.idle.pop_back();
        return c;
      }
    }
    auto c = Connect(a);
    if (!c.ok() && absl::IsUnavailable(c.status())) MarkDown(a);
    return c;
  }

  void Release(const NodeAddr& a, Ctx c) {
    if (c == nullptr || c->err) return;
    absl::MutexLock l(&mu);
    Node& n = nodes[a.ToString()];
    if (n.idle.size() < opt.max_idle_per_node) n.idle.push_back(std::move(c));
  }

  // Drops the idle connections to `a`: after one of them failed, the others were opened
  // to the same server process and are as stale (a restarted node closed them all).
  void DropIdle(const NodeAddr& a) {
    absl::MutexLock l(&mu);
    nodes[a.ToString()].idle.clear();
  }

  // Pipeline on a pooled connection; a stale pooled connection (server restarted) is
  // retried once on a fresh one (never on another pooled one, which would be as stale).
  absl::StatusOr<std::vector<Reply>> Run(const NodeAddr& a, std::span<const Command> cmds,
                                         bool asking, size_t window = 0) {
    for (int attempt = 0;; ++attempt) {
      auto c = Acquire(a);
      if (!c.ok()) return c.status();
      auto r = Pipeline(c->get(), cmds, asking, a, window);
      if (r.ok()) {
        Release(a, std::move(*c));
        return r;
      }
      if (attempt == 1) {
        MarkDown(a);
        return r.status();
      }
      DropIdle(a);
    }
  }

  absl::Status LoadSlotsFrom(const NodeAddr& a) {
    Command cmd{"CLUSTER", "SLOTS"};
    auto r = Run(a, std::span(&cmd, 1), false);
    if (!r.ok()) return r.status();
    const redisReply* rep = (*r)[0].get();
    if (std::string_view e = ErrorText(rep); !e.empty()) {
      if (e.find("cluster support disabled") != std::string_view::npos)
        return absl::FailedPreconditionError(absl::StrFormat(
            "redis %s is not a Redis Cluster node (cluster-enabled is off): %s", a.ToString(), e));
      if (e.starts_with("NOAUTH") || e.starts_with("NOPERM"))
        return absl::PermissionDeniedError(absl::StrFormat("redis %s: %s", a.ToString(), e));
      return absl::UnavailableError(
          absl::StrFormat("redis %s: CLUSTER SLOTS: %s", a.ToString(), e));
    }
    auto m = SlotMap::FromClusterSlots(rep, a.host);
    if (!m.ok()) return m.status();
    if (m->covered_slots() == 0)
      return absl::UnavailableError(
          absl::StrFormat("redis %s: the cluster has no slots assigned", a.ToString()));
    slot_refreshes.fetch_add(1, std::memory_order_relaxed);
    absl::MutexLock l(&mu);
    map = std::move(*m);
    last_refresh = Clock::now();
    return absl::OkStatus();
  }

  absl::Status Refresh(bool force) {
    std::vector<NodeAddr> candidates;
    {
      absl::MutexLock l(&mu);
      if (!force && Clock::now() - last_refresh < std::chrono::milliseconds(50))
        return absl::OkStatus();
      last_refresh = Clock::now();
      candidates = map.masters();
    }
    candidates.insert(candidates.end(), seeds.begin(), seeds.end());
    std::vector<std::string> why;
    for (const NodeAddr& a : candidates) {
      absl::Status s = LoadSlotsFrom(a);
      if (s.ok()) return s;
      if (absl::IsPermissionDenied(s) || absl::IsFailedPrecondition(s)) return s;
      why.push_back(std::string(s.message()));
    }
    return absl::UnavailableError("redis cluster: no node answered CLUSTER SLOTS: " +
                                  absl::StrJoin(why, "; "));
  }

  std::optional<NodeAddr> MasterOf(int slot) {
    absl::MutexLock l(&mu);
    return map.MasterOf(slot);
  }
};

ClusterClient::ClusterClient(std::unique_ptr<Impl> impl, const ClusterClientOptions& options)
    : impl_(std::move(impl)), options_(options) {}
ClusterClient::~ClusterClient() = default;

absl::StatusOr<std::unique_ptr<ClusterClient>> ClusterClient::Create(
    const ClusterClientOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  auto impl = std::make_unique<Impl>(options);
  if (absl::Status s = impl->Refresh(/*force=*/true); !s.ok()) return s;
  return std::unique_ptr<ClusterClient>(new ClusterClient(std::move(impl), options));
}

absl::Status ClusterClient::RefreshSlots(bool force) { return impl_->Refresh(force); }

SlotMap ClusterClient::slot_map() const {
  absl::MutexLock l(&impl_->mu);
  return impl_->map;
}

ClusterClientStats ClusterClient::stats() const {
  return ClusterClientStats{impl_->moved.load(), impl_->ask.load(), impl_->try_again.load(),
                            impl_->node_failures.load(), impl_->slot_refreshes.load()};
}

absl::StatusOr<std::vector<Reply>> ClusterClient::Exec(int slot, std::span<const Command> cmds,
                                                       size_t window) {
  if (slot < 0 || slot >= kNumSlots || cmds.empty())
    return absl::InvalidArgumentError(
        absl::StrFormat("ClusterClient::Exec: slot %d, %d commands", slot, cmds.size()));
  const auto deadline = Clock::now() + options_.deadline;
  auto backoff = std::chrono::milliseconds(2);
  auto wait = [&]() -> bool {  // false once the deadline would pass
    if (Clock::now() + backoff >= deadline) return false;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(100));
    return true;
  };
  absl::Status last = absl::UnavailableError("no attempt");
  for (int redirects = 0; redirects <= options_.max_redirects && Clock::now() < deadline;) {
    std::optional<NodeAddr> addr = impl_->MasterOf(slot);
    if (!addr) {
      last =
          absl::UnavailableError(absl::StrFormat("redis cluster: no master serves slot %d", slot));
      (void)impl_->Refresh(false);
      if (!wait()) break;
      continue;
    }
    auto replies = impl_->Run(*addr, cmds, false, window);
    if (!replies.ok()) {
      last = replies.status();
      if (absl::IsPermissionDenied(last)) return last;
      // The master is down: a failover may have moved the slot; else fail fast.
      (void)impl_->Refresh(false);
      std::optional<NodeAddr> now_at = impl_->MasterOf(slot);
      if (!now_at || *now_at == *addr) return last;
      ++redirects;
      continue;
    }
    bool again = false;
    std::vector<size_t> ask_idx;
    NodeAddr ask_node;
    for (size_t i = 0; i < replies->size() && !again; ++i) {
      std::optional<Redirect> r = ParseRedirect(ErrorText((*replies)[i].get()));
      if (!r) continue;
      if (r->node.host.empty()) r->node.host = addr->host;
      switch (r->kind) {
        case Redirect::kMoved: {
          impl_->moved.fetch_add(1, std::memory_order_relaxed);
          absl::MutexLock l(&impl_->mu);
          impl_->map.Assign(r->slot, r->node);
          again = true;
          ++redirects;
          break;
        }
        case Redirect::kAsk:
          impl_->ask.fetch_add(1, std::memory_order_relaxed);
          ask_idx.push_back(i);
          ask_node = r->node;
          break;
        case Redirect::kTryAgain:
        case Redirect::kClusterDown:
          impl_->try_again.fetch_add(1, std::memory_order_relaxed);
          last = absl::UnavailableError(
              absl::StrFormat("redis %s: %s", addr->ToString(), ErrorText((*replies)[i].get())));
          again = true;
          if (!wait()) return last;
          break;
      }
    }
    if (again) continue;
    if (!ask_idx.empty()) {
      std::vector<Command> asked;
      for (size_t i : ask_idx) asked.push_back(cmds[i]);
      auto ar = impl_->Run(ask_node, asked, /*asking=*/true, window);
      if (!ar.ok()) return ar.status();
      bool redirected = false;
      for (size_t j = 0; j < ask_idx.size(); ++j) {
        if (ParseRedirect(ErrorText((*ar)[j].get()))) redirected = true;
        (*replies)[ask_idx[j]] = std::move((*ar)[j]);
      }
      if (redirected) {  // the migration finished meanwhile, or the target wants us to wait
        ++redirects;
        if (!wait()) break;
        continue;
      }
    }
    return replies;
  }
  if (last.message() == "no attempt")
    last = absl::UnavailableError(
        absl::StrFormat("redis cluster: slot %d: too many redirections", slot));
  return absl::UnavailableError(absl::StrFormat("redis cluster: slot %d: %s (deadline %d ms)", slot,
                                                last.message(), options_.deadline.count()));
}

namespace {

// Reads RESP bulk replies from a hiredis context's socket: headers through a small
// buffer, bulk bytes straight into the caller's destination.
class DirectReader {
 public:
  explicit DirectReader(int fd) : fd_(fd) {}
  // 1 = value of exactly dest.size() bytes read into dest, 0 = nil, -1 = anything else
  // (the connection is then out of sync), -2 = I/O error or timeout.
  int ReadBulk(std::span<std::byte> dest) {
    std::string line;
    if (!ReadLine(&line)) return -2;
    if (line.empty() || line[0] != '$') return -1;
    long long n = 0;
    if (line == "$-1") return 0;
    char* end = nullptr;
    n = std::strtoll(line.c_str() + 1, &end, 10);
    if (end == nullptr || *end != '\0' || n < 0 || static_cast<uint64_t>(n) != dest.size())
      return -1;
    size_t have = std::min<size_t>(end_ - start_, dest.size());
    std::memcpy(dest.data(), buf_ + start_, have);
    start_ += have;
    while (have < dest.size()) {
      ssize_t r = recv(fd_, dest.data() + have, dest.size() - have, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return -2;
      have += static_cast<size_t>(r);
    }
    std::string crlf;
    if (!ReadLine(&crlf) || !crlf.empty()) return -1;
    return 1;
  }
  bool drained() const { return start_ == end_; }

 private:
  bool Fill() {
    if (start_ == end_) start_ = end_ = 0;
    if (end_ == sizeof(buf_)) return false;
    for (;;) {
      ssize_t r = recv(fd_, buf_ + end_, sizeof(buf_) - end_, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      end_ += static_cast<size_t>(r);
      return true;
    }
  }
  bool ReadLine(std::string* line) {
    for (;;) {
      for (size_t i = start_; i + 1 < end_; ++i) {
        if (buf_[i] == '\r' && buf_[i + 1] == '\n') {
          line->assign(buf_ + start_, i - start_);
          start_ = i + 2;
          return true;
        }
      }
      if (end_ - start_ > 512) return false;  // no header is this long
      if (start_ > 0) {                       // keep the partial line at the front
        std::memmove(buf_, buf_ + start_, end_ - start_);
        end_ -= start_;
        start_ = 0;
      }
      if (!Fill()) return false;
    }
  }

  int fd_;
  char buf_[4096];
  size_t start_ = 0, end_ = 0;
};

}  // namespace

absl::StatusOr<std::vector<bool>> ClusterClient::GetInto(
    int slot, std::span<const std::string> keys, std::span<const std::span<std::byte>> dests,
    size_t window) {
  if (keys.size() != dests.size() || window == 0)
    return absl::InvalidArgumentError(
        "ClusterClient::GetInto: keys and dests differ in size, or window 0");
  std::optional<NodeAddr> addr = impl_->MasterOf(slot);
  if (!addr) return absl::FailedPreconditionError("no master known for the slot");
  auto c = impl_->Acquire(*addr);
  if (!c.ok()) return absl::FailedPreconditionError(c.status().message());
  redisContext* ctx = c->get();
  if (ctx->reader->len != ctx->reader->pos || sdslen(ctx->obuf) != 0)
    return absl::FailedPreconditionError("connection has buffered data");  // dropped: never pooled
  DirectReader reader(ctx->fd);
  std::vector<bool> out;
  out.reserve(keys.size());
  size_t sent = 0;
  auto send_up_to = [&](size_t n) -> bool {
    for (; sent < n; ++sent) {
      const char* argv[2] = {"GET", keys[sent].data()};
      const size_t lens[2] = {3, keys[sent].size()};
      if (redisAppendCommandArgv(ctx, 2, argv, lens) != REDIS_OK) return false;
    }
    int done = 0;
    while (!done)
      if (redisBufferWrite(ctx, &done) != REDIS_OK) return false;
    return true;
  };
  for (size_t i = 0; i < keys.size(); ++i) {
    // A broken connection (a pooled one to a restarted node, a timeout) is dropped and
    // left to Exec, which reconnects or marks the node down.
    if (!send_up_to(std::min(keys.size(), i + window)))
      return absl::FailedPreconditionError(
          absl::StrFormat("redis %s: write failed", addr->ToString()));
    const int r = reader.ReadBulk(dests[i]);
    if (r == -2)
      return absl::FailedPreconditionError(
          absl::StrFormat("redis %s: read failed or timed out", addr->ToString()));
    if (r == -1)
      return absl::FailedPreconditionError("reply is not a value of the expected length");
    out.push_back(r == 1);
  }
  if (reader.drained()) impl_->Release(*addr, std::move(*c));
  return out;
}

std::vector<Reply> ClusterClient::ExecMany(std::span<const int> slots,
                                           std::span<const Command> cmds) {
  std::vector<Reply> out(cmds.size());
  // master -> indexes of its commands
  std::map<std::string, std::pair<NodeAddr, std::vector<size_t>>> by_node;
  std::vector<size_t> unrouted;
  for (size_t i = 0; i < cmds.size() && i < slots.size(); ++i) {
    std::optional<NodeAddr> a = impl_->MasterOf(slots[i]);
    if (!a) {
      unrouted.push_back(i);
      continue;
    }
    auto& e = by_node[a->ToString()];
    e.first = *a;
    e.second.push_back(i);
  }
  // Write every shard's pipeline first, then read them all.
  struct Pending {
    NodeAddr addr;
    std::vector<size_t> idx;
    Ctx ctx;
  };
  std::vector<Pending> pending;
  std::vector<size_t> retry = unrouted;
  for (auto& [_, e] : by_node) {
    auto c = impl_->Acquire(e.first);
    if (!c.ok()) continue;  // node down: those replies stay null
    Pending p{e.first, e.second, std::move(*c)};
    bool ok = true;
    for (size_t i : p.idx) {
      std::vector<const char*> argv;
      std::vector<size_t> lens;
      for (std::string_view a : cmds[i]) {
        argv.push_back(a.data());
        lens.push_back(a.size());
      }
      ok = ok && redisAppendCommandArgv(p.ctx.get(), static_cast<int>(argv.size()), argv.data(),
                                        lens.data()) == REDIS_OK;
    }
    int done = 0;
    while (ok && !done) ok = redisBufferWrite(p.ctx.get(), &done) == REDIS_OK;
    if (!ok) {
      retry.insert(retry.end(), p.idx.begin(), p.idx.end());  // stale connection: Exec reconnects
      continue;
    }
    pending.push_back(std::move(p));
  }
  for (Pending& p : pending) {
    bool broken = false;
    for (size_t i : p.idx) {
      void* r = nullptr;
      if (broken || redisGetReply(p.ctx.get(), &r) != REDIS_OK || r == nullptr) {
        broken = true;
        retry.push_back(i);
        continue;
      }
      out[i].reset(static_cast<redisReply*>(r));
      if (ParseRedirect(ErrorText(out[i].get()))) {
        out[i].reset();
        retry.push_back(i);
      }
    }
    if (!broken) impl_->Release(p.addr, std::move(p.ctx));
  }
  for (size_t i : retry) {
    auto r = Exec(slots[i], std::span(&cmds[i], 1));
    if (r.ok()) out[i] = std::move((*r)[0]);
  }
  return out;
}

absl::StatusOr<Reply> ClusterClient::ExecOn(const NodeAddr& node, const Command& cmd) {
  auto r = impl_->Run(node, std::span(&cmd, 1), false);
  if (!r.ok()) return r.status();
  return std::move((*r)[0]);
}

std::vector<std::pair<NodeAddr, absl::StatusOr<Reply>>> ClusterClient::ExecOnMasters(
    const Command& cmd) {
  std::vector<std::pair<NodeAddr, absl::StatusOr<Reply>>> out;
  const SlotMap map = slot_map();
  for (const NodeAddr& a : map.masters()) {
    auto r = impl_->Run(a, std::span(&cmd, 1), false);
    if (r.ok()) {
      out.emplace_back(a, std::move((*r)[0]));
    } else {
      out.emplace_back(a, r.status());
    }
  }
  return out;
}

}  // namespace kvt::cluster
