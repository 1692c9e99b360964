#include "metrics.h"

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

void Metrics::Render(std::string* out) {
  absl::StrAppendFormat(out,
                        "# HELP kvtier_rpc_total RPCs finished, by method and gRPC status code.\n"
                        "# TYPE kvtier_rpc_total counter\n");
  for (size_t r = 0; r < hist_.size(); ++r) {
    for (int c = 0; c < kCodes; ++c) {
      uint64_t v = calls_[r][c].load(std::memory_order_relaxed);
      if (v == 0) continue;
      absl::StrAppendFormat(out, "kvtier_rpc_total{method=\"%s\",code=\"%s\"} %d\n",
                            RpcName(static_cast<Rpc>(r)), CodeName(c), v);
    }
  }
  absl::StrAppendFormat(out,
                        "# HELP kvtier_rpc_latency_seconds RPC latency from arrival to finish.\n"
                        "# TYPE kvtier_rpc_latency_seconds histogram\n");
  for (size_t r = 0; r < hist_.size(); ++r) {
    const char* m = RpcName(static_cast<Rpc>(r));
    uint64_t cum = 0;
    for (size_t b = 0; b < kBuckets.size(); ++b) {
      cum += hist_[r].buckets[b].load(std::memory_order_relaxed);
      absl::StrAppendFormat(out, "kvtier_rpc_latency_seconds_bucket{method=\"%s\",le=\"%g\"} %d\n",
                            m, kBuckets[b], cum);
    }
    cum += hist_[r].buckets[kBuckets.size()].load(std::memory_order_relaxed);
    absl::StrAppendFormat(out, "kvtier_rpc_latency_seconds_bucket{method=\"%s\",le=\"+Inf\"} %d\n",
                          m, cum);
    absl::StrAppendFormat(out, "kvtier_rpc_latency_seconds_sum{method=\"%s\"} %.9f\n", m,
                          hist_[r].sum_ns.load(std::memory_order_relaxed) * 1e-9);
    absl::StrAppendFormat(out, "kvtier_rpc_latency_seconds_count{method=\"%s\"} %d\n", m,
                          hist_[r].count.load(std::memory_order_relaxed));
  }
  absl::StrAppendFormat(
      out,
      "# HELP kvtier_bytes_in_total Record bytes received from clients, by path.\n"
      "# TYPE kvtier_bytes_in_total counter\n"
      "kvtier_bytes_in_total{path=\"grpc\"} %d\nkvtier_bytes_in_total{path=\"shm\"} %d\n"
      "# HELP kvtier_bytes_out_total Record bytes sent to clients, by path.\n"
      "# TYPE kvtier_bytes_out_total counter\n"
      "kvtier_bytes_out_total{path=\"grpc\"} %d\nkvtier_bytes_out_total{path=\"shm\"} %d\n"
      "# HELP kvtier_auth_failures_total Calls refused for a missing or unknown token.\n"
      "# TYPE kvtier_auth_failures_total counter\nkvtier_auth_failures_total %d\n"
      "# HELP kvtier_put_conflicts_total Puts dropped because the key belongs to another "
      "namespace.\n"
      "# TYPE kvtier_put_conflicts_total counter\nkvtier_put_conflicts_total %d\n"
      "# HELP kvtier_connected_clients Clients (by client id) that made a call in the last 60 s.\n"
      "# TYPE kvtier_connected_clients gauge\nkvtier_connected_clients %d\n",
      grpc_bytes_in_.load(), shm_bytes_in_.load(), grpc_bytes_out_.load(), shm_bytes_out_.load(),
      auth_failures_.load(), put_conflicts_.load(), ConnectedClients());
}

}  // namespace kvt::daemon
