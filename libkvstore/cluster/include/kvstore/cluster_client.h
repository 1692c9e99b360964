// ClusterClient: a small Redis Cluster client over hiredis 0.14 (which speaks RESP but
// knows nothing of clusters): the slot map from CLUSTER SLOTS, key slots by CRC16 with
// {hash tags} (kvstore/cluster_slots.h), MOVED and ASK redirections, TRYAGAIN and
// CLUSTERDOWN retried with backoff, a pool of connections per node and pipelining.
// No TLS (hiredis 0.14 has none).
//
// Failure behaviour: every call ends within options.deadline. A node that refuses a
// connection or breaks one is marked down for options.node_retry; calls routed to it
// meanwhile fail fast with Unavailable (after a slot map refresh finds no other
// master for the slot), so a dead master costs its own shard's keys only, and a
// restarted or failed-over one is used again without restarting the client.
#ifndef KVSTORE_CLUSTER_CLIENT_H_
#define KVSTORE_CLUSTER_CLIENT_H_

#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvstore/cluster_slots.h"

struct redisReply;

namespace kvt::cluster {

struct ClusterClientOptions {
  // Seed nodes "host:port"; any one reachable master or replica is enough.
  std::vector<std::string> nodes;
  // ACL user ("" = AUTH with the password only, i.e. the default user) and password
  // ("" = no AUTH).
  std::string username;
  std::string password;
  // TCP connect timeout per attempt.
  std::chrono::milliseconds connect_timeout{500};
  // Socket read/write timeout once connected.
  std::chrono::milliseconds io_timeout{2000};
  // Bound of one call, retries and redirections included.
  std::chrono::milliseconds deadline{2000};
  // How long a node that failed stays marked down before it is tried again.
  std::chrono::milliseconds node_retry{300};
  // Redirections followed per call before giving up (Unavailable).
  int max_redirects = 16;
  // Idle connections kept per node.
  size_t max_idle_per_node = 8;

  // InvalidArgument naming the field: no nodes, a node not "host:port", timeouts <= 0.
  absl::Status Validate() const;
};

struct ReplyDeleter {
  void operator()(redisReply* r) const;
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

// One command: its arguments, e.g. {"SET", key, value}. The views must stay valid
// for the duration of the call that takes them; they are sent without a copy.
using Command = std::vector<std::string_view>;

// Counters since creation.
struct ClusterClientStats {
  uint64_t moved = 0;           // MOVED replies followed
  uint64_t ask = 0;             // ASK replies followed
  uint64_t try_again = 0;       // TRYAGAIN / CLUSTERDOWN replies waited out
  uint64_t node_failures = 0;   // connections that failed or broke
  uint64_t slot_refreshes = 0;  // CLUSTER SLOTS loads
};

// Thread-safe.
class ClusterClient {
 public:
  // Connects to the seeds (AUTH when configured) and loads the slot map.
  // Unavailable when no seed answers (message names every seed and why);
  // PermissionDenied when AUTH is refused (wrong password or user);
  // FailedPrecondition when a seed is a Redis without cluster mode;
  // InvalidArgument for bad options.
  static absl::StatusOr<std::unique_ptr<ClusterClient>> Create(const ClusterClientOptions& options);
  ~ClusterClient();
  ClusterClient(const ClusterClient&) = delete;
  ClusterClient& operator=(const ClusterClient&) = delete;

  // Runs `cmds` pipelined (one round trip) on the master of `slot`; every key in them
  // must hash to `slot`. Follows MOVED (whole batch again) and ASK (those commands on
  // the target, after ASKING), retries TRYAGAIN/CLUSTERDOWN and broken connections with
  // backoff. Returns one reply per command, in order (nil and non-redirect error
  // replies included: they are the caller's to read). Unavailable when the deadline
  // passes or the slot's master is down. REQUIRES: 0 <= slot < kNumSlots, cmds non-empty.
  // `window`: at most this many commands in flight on the connection (0 = the whole
  // batch written before any reply is read). Redis moves multi-MiB values slower when
  // several are pipelined (measured: redis-benchmark -d 4MiB GET -P 9 at half of -P 1),
  // so large values want a small window; commands still run in order on one connection.
  absl::StatusOr<std::vector<Reply>> Exec(int slot, std::span<const Command> cmds,
                                          size_t window = 0);

  // GET of `keys` (all hashing to `slot`) with each value read from the socket straight
  // into its destination, no intermediate copy; at most `window` GETs in flight. Per key:
  // true when the value had exactly the destination's length, false when the key is
  // absent (nil). FailedPrecondition when this path cannot answer (a redirect, an error
  // reply, a value of another length, no master known, a broken or refused connection):
  // the caller then uses Exec, which follows redirects and handles failures. Bytes of a destination
  // are unspecified unless its key answered true. REQUIRES: keys.size() == dests.size(), window
  // >= 1.
  absl::StatusOr<std::vector<bool>> GetInto(int slot, std::span<const std::string> keys,
                                            std::span<const std::span<std::byte>> dests,
                                            size_t window);

  // Commands on any slots, one per entry of `slots`: grouped by master, every master's
  // pipeline written before any is read (one round trip per shard, shards in
  // parallel). A redirected command is re-run through Exec. The reply of a command
  // that could not run (its master down, deadline) is null; the others are unaffected.
  // REQUIRES: slots.size() == cmds.size().
  std::vector<Reply> ExecMany(std::span<const int> slots, std::span<const Command> cmds);

  // Runs `cmd` on one node (SCAN, INFO: per-node commands). Unavailable when it is down.
  absl::StatusOr<Reply> ExecOn(const NodeAddr& node, const Command& cmd);

  // Runs `cmd` on every master of the current slot map. Per master, its reply or the
  // status of the failure.
  std::vector<std::pair<NodeAddr, absl::StatusOr<Reply>>> ExecOnMasters(const Command& cmd);

  // Reloads the slot map from any reachable node (rate-limited to one load per 50 ms
  // unless `force`). Unavailable when none answers.
  absl::Status RefreshSlots(bool force = false);
  SlotMap slot_map() const;
  ClusterClientStats stats() const;

  const ClusterClientOptions& options() const { return options_; }

 private:
  class Impl;
  explicit ClusterClient(std::unique_ptr<Impl> impl, const ClusterClientOptions& options);
  std::unique_ptr<Impl> impl_;
  ClusterClientOptions options_;
};

}  // namespace kvt::cluster

#endif  // KVSTORE_CLUSTER_CLIENT_H_
