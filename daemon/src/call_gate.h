// CallGate: the calls kvtierd is serving. Counts each call from its arrival to its last
// callback (for a graceful shutdown: after BeginDrain new calls are refused with
// UNAVAILABLE and the server waits for active() to reach 0), and the Put bytes held in
// daemon memory, bounded by max_inflight_bytes.
#ifndef KVT_DAEMON_CALL_GATE_H_
#define KVT_DAEMON_CALL_GATE_H_

#include <atomic>
#include <cstdint>

#include "absl/status/status.h"

namespace kvt::daemon {

// Thread-safe.
class CallGate {
 public:
  explicit CallGate(uint64_t max_inflight_bytes) : max_inflight_bytes_(max_inflight_bytes) {}

  // Counts a call (pair with Done). UNAVAILABLE once draining: the call is still counted
  // until its Done, so that every path ends the same way.
  absl::Status Enter() {
    active_.fetch_add(1);
    if (draining_.load()) return absl::UnavailableError("kvtierd is shutting down");
    return absl::OkStatus();
  }
  void Done() { active_.fetch_sub(1); }
  void BeginDrain() { draining_.store(true); }
  int64_t active() const { return active_.load(); }

  // Reserves `bytes` of a Put's record held in daemon memory; the reservation stands
  // either way (release it with Unreserve), RESOURCE_EXHAUSTED when the total is over
  // max_inflight_bytes.
  absl::Status Reserve(uint64_t bytes) {
    if (inflight_bytes_.fetch_add(bytes) + bytes > max_inflight_bytes_)
      return absl::ResourceExhaustedError(
          "record_bytes: too many bytes in flight at the daemon; retry later");
    return absl::OkStatus();
  }
  void Unreserve(uint64_t bytes) { inflight_bytes_.fetch_sub(bytes); }

 private:
  const uint64_t max_inflight_bytes_;
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> active_{0};
  std::atomic<uint64_t> inflight_bytes_{0};
};

}  // namespace kvt::daemon

#endif  // KVT_DAEMON_CALL_GATE_H_
