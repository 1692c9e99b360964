// Daemon backend: talks to kvtierd over gRPC (proto/kvtier.proto, service
// kvtier.v1.KvTier). Every call carries a deadline; an unreachable daemon is an
// Unavailable error naming the address, never a hang.
#ifndef KVTIER_CLI_DAEMON_BACKEND_H_
#define KVTIER_CLI_DAEMON_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "backend.h"

namespace kvt::cli {

struct DaemonBackendOptions {
  // "unix:/path/to.sock", "unix:///abs/path", or "host:port".
  std::string address;
  // Where the address came from, as errors name it: "--daemon", "KVTIER_DAEMON".
  std::string address_source = "--daemon";
  // Tenant token, sent as "authorization: Bearer <token>" ("" = none).
  std::string token;
  // Deadline of each RPC and of the initial connection, ms. REQUIRES: > 0.
  int64_t timeout_ms = 5000;
};

// Connects (waiting up to timeout_ms) and checks Health. A unix socket is probed first,
// so a path that does not exist, is not a socket, refuses connections or may not be
// opened fails at once: Unavailable "no kvtierd at ADDRESS: the socket file does not
// exist" (and the like). Unavailable or DeadlineExceeded naming the address when nothing
// answers within timeout_ms; InvalidArgument for an address kvt::ParseDaemonAddress
// refuses (kvstore/daemon_address.h), prefixed with address_source, or a bad timeout.
absl::StatusOr<std::unique_ptr<CacheBackend>> OpenDaemonBackend(
    const DaemonBackendOptions& options);

}  // namespace kvt::cli

#endif  // KVTIER_CLI_DAEMON_BACKEND_H_
