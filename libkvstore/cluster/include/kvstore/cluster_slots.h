// Redis Cluster routing facts, without I/O: key → hash slot (CRC16 with {hash tags}),
// the slot map parsed from a CLUSTER SLOTS reply, and MOVED/ASK/TRYAGAIN/CLUSTERDOWN
// error replies. Source of the rules: the Redis Cluster specification,
// https://redis.io/docs/reference/cluster-spec/ ("Keys distribution model", "Hash tags",
// "Redirection and resharding", Appendix A: CRC16 XMODEM, polynomial 0x1021, init 0).
#ifndef KVSTORE_CLUSTER_SLOTS_H_
#define KVSTORE_CLUSTER_SLOTS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

struct redisReply;

namespace kvt::cluster {

inline constexpr int kNumSlots = 16384;

// CRC16-XMODEM of `data` (the check value of "123456789" is 0x31C3).
uint16_t Crc16(std::string_view data);

// The hash slot of `key` (0..16383): CRC16 of the hash tag when the key holds a
// "{...}" with at least one byte between the first '{' and the next '}', else of the
// whole key.
int KeyHashSlot(std::string_view key);

// A node address "host:port".
struct NodeAddr {
  std::string host;
  int port = 0;
  std::string ToString() const;
  bool operator==(const NodeAddr&) const = default;
};

// Parses "host:port" (port 1..65535; "[v6]:port" accepted). InvalidArgument naming the text.
absl::StatusOr<NodeAddr> ParseNodeAddr(std::string_view text);

// Slot → master, as CLUSTER SLOTS reports it. Thread-compatible value type.
class SlotMap {
 public:
  // Parses a CLUSTER SLOTS reply: an array of [start, end, [ip, port, id...], replicas...].
  // An empty ip (a node that does not know its own address) is replaced by `fallback_host`.
  // DataLoss (naming the entry) for a malformed reply.
  static absl::StatusOr<SlotMap> FromClusterSlots(const redisReply* reply,
                                                  std::string_view fallback_host);

  // Master serving `slot`, or nullopt when no master covers it.
  // REQUIRES: 0 <= slot < kNumSlots.
  std::optional<NodeAddr> MasterOf(int slot) const;
  // Distinct masters, in the order of their first slot.
  const std::vector<NodeAddr>& masters() const { return masters_; }
  // Slots covered by some master.
  int covered_slots() const;
  // Points `slot` at `addr` (what a MOVED reply says), adding it as a master if new.
  void Assign(int slot, const NodeAddr& addr);

 private:
  std::vector<NodeAddr> masters_;
  std::vector<int16_t> slot_master_ = std::vector<int16_t>(kNumSlots, -1);  // index into masters_
};

// An error reply that asks the client to go elsewhere or to wait.
struct Redirect {
  enum Kind : uint8_t { kMoved, kAsk, kTryAgain, kClusterDown };
  Kind kind;
  int slot = -1;  // kMoved/kAsk only
  NodeAddr node;  // kMoved/kAsk only
};

// Parses "MOVED 3999 127.0.0.1:6381", "ASK 3999 127.0.0.1:6381", "TRYAGAIN ...",
// "CLUSTERDOWN ...". nullopt for any other error text (a real error for the caller).
// An empty host in MOVED/ASK (":6381") is returned empty; the caller substitutes the
// host it used.
std::optional<Redirect> ParseRedirect(std::string_view error);

}  // namespace kvt::cluster

#endif  // KVSTORE_CLUSTER_SLOTS_H_
