// Metrics: counters and histograms of kvtierd, rendered in the Prometheus text
// exposition format by the project's one writer (kvstore/prometheus_text.h).
// Tier gauges/counters are read from the store at scrape time; RPC counters and latency
// histograms are kept here. The list of metrics is in docs/daemon.md.
#ifndef KVT_DAEMON_METRICS_H_
#define KVT_DAEMON_METRICS_H_

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "kvstore/prometheus_text.h"

namespace kvt::daemon {

enum class Rpc : uint8_t {
  kLookup,
  kPut,
  kGet,
  kEvict,
  kList,
  kStats,
  kHealth,
  kShmAttach,
  kShmDetach,
  kCount
};
const char* RpcName(Rpc rpc);

// Thread-safe (atomics; the client table has its own lock).
class Metrics {
 public:
  // Upper bounds of the latency buckets, seconds.
  static constexpr std::array<double, 12> kBuckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                      0.01,   0.025,   0.05,   0.1,   0.5,    2.5};

  void RecordRpc(Rpc rpc, int grpc_code, std::chrono::nanoseconds latency);
  void AddBytesIn(bool shm, uint64_t n) {
    (shm ? shm_bytes_in_ : grpc_bytes_in_).fetch_add(n, std::memory_order_relaxed);
  }
  void AddBytesOut(bool shm, uint64_t n) {
    (shm ? shm_bytes_out_ : grpc_bytes_out_).fetch_add(n, std::memory_order_relaxed);
  }
  void AddAuthFailure() { auth_failures_.fetch_add(1, std::memory_order_relaxed); }
  void AddPutConflict() { put_conflicts_.fetch_add(1, std::memory_order_relaxed); }
  // A Get (not a peek) of a key answered "not found" without asking the store (another
  // tenant's chunk, or gone from every tier): the store counts no miss for it, so Stats
  // adds these to the store's misses.
  void AddUnservedMiss() { unserved_misses_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t unserved_misses() const { return unserved_misses_.load(std::memory_order_relaxed); }
  // Notes that the client with this id made a call now.
  void SeeClient(const std::string& client_id);
  // Clients that made a call in the last `window`.
  uint64_t ConnectedClients(std::chrono::seconds window = std::chrono::seconds(60));

  // Appends this object's metrics (each family whole) to `out`.
  void Render(PrometheusText& out);

 private:
  struct Hist {
    std::array<std::atomic<uint64_t>, kBuckets.size() + 1> buckets{};
    std::atomic<uint64_t> count{0};
    std::atomic<uint64_t> sum_ns{0};
  };
  static constexpr int kCodes = 17;
  std::array<Hist, static_cast<size_t>(Rpc::kCount)> hist_{};
  std::array<std::array<std::atomic<uint64_t>, kCodes>, static_cast<size_t>(Rpc::kCount)> calls_{};
  std::atomic<uint64_t> grpc_bytes_in_{0}, grpc_bytes_out_{0}, shm_bytes_in_{0}, shm_bytes_out_{0};
  std::atomic<uint64_t> auth_failures_{0}, put_conflicts_{0}, unserved_misses_{0};
  absl::Mutex clients_mu_;
  absl::flat_hash_map<std::string, std::chrono::steady_clock::time_point> clients_
      ABSL_GUARDED_BY(clients_mu_);
};

}  // namespace kvt::daemon

#endif  // KVT_DAEMON_METRICS_H_
