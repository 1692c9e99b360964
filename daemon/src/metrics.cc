#include "metrics.h"

#include <limits>

#include "absl/strings/str_format.h"

namespace kvt::daemon {

const char* RpcName(Rpc rpc) {
  switch (rpc) {
    case Rpc::kLookup:
      return "Lookup";
    case Rpc::kPut:
      return "Put";
    case Rpc::kGet:
      return "Get";
    case Rpc::kEvict:
      return "Evict";
    case Rpc::kList:
      return "List";
    case Rpc::kStats:
      return "Stats";
    case Rpc::kHealth:
      return "Health";
    case Rpc::kShmAttach:
      return "ShmAttach";
    case Rpc::kShmDetach:
      return "ShmDetach";
    default:
      return "unknown";
  }
}

namespace {
const char* CodeName(int c) {
  static const char* kNames[] = {"OK",
                                 "CANCELLED",
                                 "UNKNOWN",
                                 "INVALID_ARGUMENT",
                                 "DEADLINE_EXCEEDED",
                                 "NOT_FOUND",
                                 "ALREADY_EXISTS",
                                 "PERMISSION_DENIED",
                                 "RESOURCE_EXHAUSTED",
                                 "FAILED_PRECONDITION",
                                 "ABORTED",
                                 "OUT_OF_RANGE",
                                 "UNIMPLEMENTED",
                                 "INTERNAL",
                                 "UNAVAILABLE",
                                 "DATA_LOSS",
                                 "UNAUTHENTICATED"};
  return (c >= 0 && c < 17) ? kNames[c] : "UNKNOWN";
}
}  // namespace

void Metrics::RecordRpc(Rpc rpc, int code, std::chrono::nanoseconds latency) {
  const size_t r = static_cast<size_t>(rpc);
  if (r >= hist_.size()) return;
  if (code < 0 || code >= kCodes) code = 2;
  calls_[r][code].fetch_add(1, std::memory_order_relaxed);
  const double s = std::chrono::duration<double>(latency).count();
  size_t b = 0;
  while (b < kBuckets.size() && s > kBuckets[b]) ++b;
  hist_[r].buckets[b].fetch_add(1, std::memory_order_relaxed);
  hist_[r].count.fetch_add(1, std::memory_order_relaxed);
  hist_[r].sum_ns.fetch_add(static_cast<uint64_t>(latency.count()), std::memory_order_relaxed);
}

void Metrics::SeeClient(const std::string& client_id) {
  if (client_id.empty() || client_id.size() > 64) return;
  absl::MutexLock lock(&clients_mu_);
  if (clients_.size() > 100000) clients_.clear();
  clients_[client_id] = std::chrono::steady_clock::now();
}

uint64_t Metrics::ConnectedClients(std::chrono::seconds window) {
  const auto now = std::chrono::steady_clock::now();
  absl::MutexLock lock(&clients_mu_);
  uint64_t n = 0;
  for (auto it = clients_.begin(); it != clients_.end();) {
    if (now - it->second > window) {
      clients_.erase(it++);
    } else {
      ++n;
      ++it;
    }
  }
  return n;
}

void Metrics::Render(PrometheusText& out) {
  using Type = PrometheusText::Type;
  out.Family("kvtier_rpc_total", Type::kCounter, "RPCs finished, by method and gRPC status code.");
  for (size_t r = 0; r < hist_.size(); ++r) {
    for (int c = 0; c < kCodes; ++c) {
      uint64_t v = calls_[r][c].load(std::memory_order_relaxed);
      if (v == 0) continue;
      out.Sample("kvtier_rpc_total",
                 {{"method", RpcName(static_cast<Rpc>(r))}, {"code", CodeName(c)}}, v);
    }
  }
  out.Family("kvtier_rpc_latency_seconds", Type::kHistogram, "RPC latency from arrival to finish.");
  for (size_t r = 0; r < hist_.size(); ++r) {
    const char* m = RpcName(static_cast<Rpc>(r));
    uint64_t cum = 0;
    for (size_t b = 0; b <= kBuckets.size(); ++b) {
      cum += hist_[r].buckets[b].load(std::memory_order_relaxed);
      const std::string le = PrometheusText::BucketBound(
          b < kBuckets.size() ? kBuckets[b] : std::numeric_limits<double>::infinity());
      out.Sample("kvtier_rpc_latency_seconds_bucket", {{"method", m}, {"le", le}}, cum);
    }
    out.Sample("kvtier_rpc_latency_seconds_sum", {{"method", m}},
               hist_[r].sum_ns.load(std::memory_order_relaxed) * 1e-9);
    out.Sample("kvtier_rpc_latency_seconds_count", {{"method", m}},
               hist_[r].count.load(std::memory_order_relaxed));
  }
  out.Family("kvtier_bytes_in_total", Type::kCounter,
             "Record bytes received from clients, by path.");
  out.Sample("kvtier_bytes_in_total", {{"path", "grpc"}}, grpc_bytes_in_.load());
  out.Sample("kvtier_bytes_in_total", {{"path", "shm"}}, shm_bytes_in_.load());
  out.Family("kvtier_bytes_out_total", Type::kCounter, "Record bytes sent to clients, by path.");
  out.Sample("kvtier_bytes_out_total", {{"path", "grpc"}}, grpc_bytes_out_.load());
  out.Sample("kvtier_bytes_out_total", {{"path", "shm"}}, shm_bytes_out_.load());
  out.Family("kvtier_auth_failures_total", Type::kCounter,
             "Calls refused for a missing or unknown token.");
  out.Sample("kvtier_auth_failures_total", auth_failures_.load());
  out.Family("kvtier_put_conflicts_total", Type::kCounter,
             "Puts dropped because the key belongs to another namespace.");
  out.Sample("kvtier_put_conflicts_total", put_conflicts_.load());
  out.Family("kvtier_connected_clients", Type::kGauge,
             "Clients (by client id) that made a call in the last 60 s.");
  out.Sample("kvtier_connected_clients", ConnectedClients());
}

}  // namespace kvt::daemon
