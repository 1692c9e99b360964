// `--from-server URL`: the namespace a running kvtier-llama-server reports at GET /kvtier
// (docs/llama-server.md), so `kvtier inspect/evict/ls` name exactly what that engine
// stores without rebuilding its namespace from flags (which hash the model file's
// fingerprint, llama.cpp's commit and the probed KV layout: docs/cli.md, "Namespaces").
#ifndef KVTIER_CLI_SERVER_NAMESPACE_H_
#define KVTIER_CLI_SERVER_NAMESPACE_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cli_common.h"
#include "kvstore/types.h"

namespace kvt::cli {

struct ServerNamespace {
  NamespaceId ns;
  uint32_t chunk_tokens = 0;
  uint64_t bytes_per_token = 0;  // KV payload bytes per token; 0 when not reported
};

// Parses the JSON body of kvtier-llama-server's GET /kvtier ("namespace", "chunk_tokens",
// "bytes_per_token", "state"). FailedPrecondition while the server is still loading or has
// kvtier off; InvalidArgument for a body that is not that JSON. `url` names the server in
// messages.
absl::StatusOr<ServerNamespace> ParseServerStatus(std::string_view body, const std::string& url);

// GETs URL/kvtier ("http://host:port", a trailing "/" allowed; https is not) within
// `timeout_ms` and parses it. InvalidArgument for a bad URL; Unavailable when nothing
// answers or the answer is not HTTP 200; errors of ParseServerStatus.
absl::StatusOr<ServerNamespace> FetchServerNamespace(const std::string& url, int64_t timeout_ms);

// With ns->from_server set: fetches it and sets ns->ns_hex, ns->chunk_tokens and
// ns->bytes_per_token from the answer. InvalidArgument when --ns or --model is given
// too. Does nothing without --from-server.
absl::Status ApplyFromServer(NamespaceFlags* ns, double timeout_s);

}  // namespace kvt::cli

#endif  // KVTIER_CLI_SERVER_NAMESPACE_H_
