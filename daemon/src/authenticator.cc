#include "authenticator.h"

namespace kvt::daemon {

namespace {

// Compares every byte whatever differs first: the time taken says nothing about a token.
bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char d = 0;
  for (size_t i = 0; i < a.size(); ++i) d |= static_cast<unsigned char>(a[i] ^ b[i]);
  return d == 0;
}

}  // namespace

Authenticator::Authenticator(const DaemonConfig& config, Metrics* metrics)
    : enabled_(config.auth_enabled()), metrics_(metrics) {
  for (const auto& t : config.tenants)
    for (const auto& tok : t.tokens) token_to_tenant_[tok] = t.name;
}

absl::StatusOr<std::string> Authenticator::Authenticate(
    const grpc::CallbackServerContext& ctx) const {
  const auto& md = ctx.client_metadata();
  if (auto it = md.find("kvtier-client-id"); it != md.end())
    metrics_->SeeClient(std::string(it->second.data(), it->second.size()));
  if (!enabled_) return std::string();
  auto it = md.find("authorization");
  if (it == md.end()) {
    metrics_->AddAuthFailure();
    return absl::UnauthenticatedError("authorization: missing bearer token");
  }
  return TenantOf(std::string_view(it->second.data(), it->second.size()));
}

absl::StatusOr<std::string> Authenticator::TenantOf(std::string_view authorization) const {
  if (!enabled_) return std::string();
  if (authorization.substr(0, 7) != "Bearer ") {
    metrics_->AddAuthFailure();
    return absl::UnauthenticatedError("authorization: expected 'Bearer <token>'");
  }
  const std::string_view token = authorization.substr(7);
  const std::string* tenant = nullptr;
  for (const auto& [tok, name] : token_to_tenant_)  // every token compared: no early exit
    if (ConstantTimeEquals(tok, token)) tenant = &name;
  if (tenant == nullptr) {
    metrics_->AddAuthFailure();
    return absl::UnauthenticatedError("authorization: unknown token");
  }
  return *tenant;
}

}  // namespace kvt::daemon
