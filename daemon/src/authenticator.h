// Authenticator: the tenant of a gRPC call, from its bearer token (DaemonConfig::tenants).
// Without tenants every call is the tenant "". Also notes the caller's client id
// (`kvtier-client-id` metadata) for the connected-clients gauge.
#ifndef KVT_DAEMON_AUTHENTICATOR_H_
#define KVT_DAEMON_AUTHENTICATOR_H_

#include <grpcpp/grpcpp.h>

#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "daemon/config.h"
#include "metrics.h"

namespace kvt::daemon {

// Thread-safe (read-only after construction).
class Authenticator {
 public:
  // REQUIRES: `metrics` outlives this object.
  Authenticator(const DaemonConfig& config, Metrics* metrics);

  // The tenant of the call, or UNAUTHENTICATED (counted as an auth failure).
  absl::StatusOr<std::string> Authenticate(const grpc::CallbackServerContext& ctx) const;
  // The tenant whose token is `authorization` ("Bearer <token>"); the same errors.
  absl::StatusOr<std::string> TenantOf(std::string_view authorization) const;

 private:
  const bool enabled_;
  Metrics* const metrics_;
  absl::flat_hash_map<std::string, std::string> token_to_tenant_;
};

}  // namespace kvt::daemon

#endif  // KVT_DAEMON_AUTHENTICATOR_H_
