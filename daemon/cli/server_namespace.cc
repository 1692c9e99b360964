#include "server_namespace.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kvstore/daemon_address.h"
#include "nlohmann/json.hpp"
#ifdef KVT_CLI_HAVE_HTTP
#include <httplib.h>
#endif

namespace kvt::cli {

absl::StatusOr<ServerNamespace> ParseServerStatus(std::string_view body, const std::string& url) {
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--from-server ", url, ": GET /kvtier answered ", why,
        " (is this a kvtier-llama-server? it answers {\"namespace\", \"chunk_tokens\", ...})"));
  };
  if (j.is_discarded() || !j.is_object()) return bad("something that is not a JSON object");
  if (j.contains("state") && j["state"].is_string() && j["state"] != "ready") {
    return absl::FailedPreconditionError(
        absl::StrCat("--from-server ", url, ": the server's kvtier state is '",
                     j["state"].get<std::string>(), "', not 'ready' (still loading the model?)"));
  }
  if (j.contains("enabled") && j["enabled"].is_boolean() && !j["enabled"].get<bool>()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--from-server ", url, ": kvtier is off in that server (no --kvtier-* options)"));
  }
  if (!j.contains("namespace") || !j["namespace"].is_string()) return bad("no \"namespace\"");
  auto ns = NamespaceId::FromHex(j["namespace"].get<std::string>());
  if (!ns.ok()) return bad(absl::StrCat("a bad \"namespace\": ", ns.status().message()));
  if (!j.contains("chunk_tokens") || !j["chunk_tokens"].is_number_unsigned() ||
      j["chunk_tokens"].get<uint64_t>() == 0 || j["chunk_tokens"].get<uint64_t>() > (1u << 20)) {
    return bad("no valid \"chunk_tokens\"");
  }
  ServerNamespace out;
  out.ns = *ns;
  out.chunk_tokens = static_cast<uint32_t>(j["chunk_tokens"].get<uint64_t>());
  if (j.contains("bytes_per_token") && j["bytes_per_token"].is_number_unsigned())
    out.bytes_per_token = j["bytes_per_token"].get<uint64_t>();
  return out;
}

absl::StatusOr<ServerNamespace> FetchServerNamespace(const std::string& url, int64_t timeout_ms) {
  std::string rest = url;
  if (!absl::StartsWith(rest, "http://")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--from-server '", url, "': expected http://host:port (the server's own address)"));
  }
  rest.erase(0, 7);
  if (absl::EndsWith(rest, "/")) rest.pop_back();
  absl::StatusOr<DaemonAddress> a = ParseHostPort(rest, AddressUse::kConnect);
  if (!a.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--from-server '", url, "': ", a.status().message()));
  }
#ifdef KVT_CLI_HAVE_HTTP
  httplib::Client client(a->host, a->port);
  const time_t sec = static_cast<time_t>(timeout_ms / 1000);
  const time_t usec = static_cast<time_t>((timeout_ms % 1000) * 1000);
  client.set_connection_timeout(sec, usec);
  client.set_read_timeout(sec, usec);
  client.set_write_timeout(sec, usec);
  httplib::Result res = client.Get("/kvtier");
  if (!res) {
    return absl::UnavailableError(
        absl::StrCat("--from-server ", url, ": no answer to GET /kvtier (",
                     httplib::to_string(res.error()), "; is kvtier-llama-server running there?)"));
  }
  if (res->status != 200) {
    return absl::UnavailableError(absl::StrCat("--from-server ", url,
                                               ": GET /kvtier answered HTTP ", res->status,
                                               " (is this a kvtier-llama-server?)"));
  }
  return ParseServerStatus(res->body, url);
#else
  (void)timeout_ms;
  return absl::UnimplementedError("this kvtier was built without an HTTP client; use --ns");
#endif
}

absl::Status ApplyFromServer(NamespaceFlags* ns, double timeout_s) {
  if (ns->from_server.empty()) return absl::OkStatus();
  if (!ns->ns_hex.empty() || ns->has_model()) {
    return absl::InvalidArgumentError(
        "give either --from-server or the namespace flags (--ns, --model ...), not both");
  }
  const int64_t timeout_ms =
      timeout_s > 0 && timeout_s <= 600 ? static_cast<int64_t>(timeout_s * 1000) : 5000;
  absl::StatusOr<ServerNamespace> s = FetchServerNamespace(ns->from_server, timeout_ms);
  if (!s.ok()) return s.status();
  ns->ns_hex = s->ns.ToHex();
  ns->chunk_tokens = s->chunk_tokens;
  ns->bytes_per_token = s->bytes_per_token;
  return absl::OkStatus();
}

}  // namespace kvt::cli
