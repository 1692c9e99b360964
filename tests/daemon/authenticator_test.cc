// kvtierd's Authenticator: a bearer token names its tenant; anything else is refused.
#include "authenticator.h"

#include <gtest/gtest.h>

namespace kvt::daemon {
namespace {

TEST(AuthenticatorTest, TokensNameTheirTenantAndEverythingElseIsUnauthenticated) {
  DaemonConfig c;
  c.tenants = {{"alice", {"alice-token-1", "alice-token-2"}}, {"bob", {"bob-token-12"}}};
  Metrics metrics;
  Authenticator auth(c, &metrics);
  EXPECT_EQ(auth.TenantOf("Bearer alice-token-1").value_or("?"), "alice");
  EXPECT_EQ(auth.TenantOf("Bearer alice-token-2").value_or("?"), "alice");
  EXPECT_EQ(auth.TenantOf("Bearer bob-token-12").value_or("?"), "bob");
  for (const char* bad : {"Bearer alice-token-", "Bearer alice-token-11", "Bearer ",
                          "alice-token-1", "Basic alice-token-1", ""}) {
    auto t = auth.TenantOf(bad);
    EXPECT_EQ(t.status().code(), absl::StatusCode::kUnauthenticated) << bad;
  }
  EXPECT_NE(auth.TenantOf("Bearer nope-nope").status().message().find("unknown token"),
            std::string::npos);
  EXPECT_NE(auth.TenantOf("Token x").status().message().find("expected 'Bearer <token>'"),
            std::string::npos);
}

TEST(AuthenticatorTest, WithoutTenantsEveryCallerIsTheDefaultTenant) {
  DaemonConfig c;
  Metrics metrics;
  Authenticator auth(c, &metrics);
  EXPECT_EQ(auth.TenantOf("").value_or("?"), "");
  EXPECT_EQ(auth.TenantOf("Bearer whatever").value_or("?"), "");
}

}  // namespace
}  // namespace kvt::daemon
