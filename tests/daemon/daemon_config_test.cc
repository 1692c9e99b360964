// kvtierd config parsing and validation (no daemon process).
#include <gtest/gtest.h>

#include "daemon/config.h"

namespace kvt::daemon {
namespace {

TEST(DaemonConfigTest, ParsesEveryFieldOverDefaults) {
  auto c = ParseDaemonConfig(
      "listen: [unix:///tmp/a.sock, 127.0.0.1:7470]\ndata_dir: /tmp/d\nhost_capacity: 2GiB\n"
      "disk_capacity: 8GiB\ndurability: async\nworkers: 8\nshm:\n  enabled: false\n"
      "metrics:\n  listen: 127.0.0.1:0\ntenants:\n  - name: alice\n    tokens: [abcdefgh1]\n",
      DefaultDaemonConfig());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->listen.size(), 2u);
  EXPECT_EQ(c->host_capacity_bytes, 2ull << 30);
  EXPECT_EQ(c->disk_capacity_bytes, 8ull << 30);
  EXPECT_EQ(c->durability, Durability::kAsync);
  EXPECT_EQ(c->workers, 8u);
  EXPECT_FALSE(c->shm_enabled);
  EXPECT_EQ(c->metrics_listen, "127.0.0.1:0");
  ASSERT_EQ(c->tenants.size(), 1u);
  EXPECT_TRUE(c->auth_enabled());
  EXPECT_TRUE(c->Validate().ok()) << c->Validate();
}

TEST(DaemonConfigTest, UnknownKeysAndBadValuesNameTheKey) {
  auto unknown = ParseDaemonConfig("host_capacty: 1GiB\n", DefaultDaemonConfig());
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("host_capacty"), std::string::npos);
  auto bad_size = ParseDaemonConfig("disk_capacity: lots\n", DefaultDaemonConfig());
  EXPECT_EQ(bad_size.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_size.status().message().find("disk_capacity"), std::string::npos);
  auto bad_dur = ParseDaemonConfig("durability: maybe\n", DefaultDaemonConfig());
  EXPECT_NE(bad_dur.status().message().find("durability"), std::string::npos);
}

TEST(DaemonConfigTest, NonLoopbackListenNeedsAllowRemote) {
  DaemonConfig c = DefaultDaemonConfig();
  c.listen = {"0.0.0.0:7470"};
  EXPECT_EQ(c.Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.Validate().message().find("allow_remote"), std::string::npos);
  c.allow_remote = true;
  EXPECT_TRUE(c.Validate().ok());
  EXPECT_TRUE(IsLocalAddress("unix:///tmp/x.sock"));
  EXPECT_TRUE(IsLocalAddress("127.0.0.1:1"));
  EXPECT_TRUE(IsLocalAddress("[::1]:1"));
  EXPECT_FALSE(IsLocalAddress("10.0.0.1:1"));
}

TEST(DaemonConfigTest, TokensMustBeLongAndUnique) {
  DaemonConfig c = DefaultDaemonConfig();
  c.tenants = {{"a", {"short"}}};
  EXPECT_EQ(c.Validate().code(), absl::StatusCode::kInvalidArgument);
  c.tenants = {{"a", {"same-token-1"}}, {"b", {"same-token-1"}}};
  EXPECT_EQ(c.Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParseByteSize("512MiB"), 512ull << 20);
  EXPECT_EQ(*ParseByteSize("4096"), 4096u);
  EXPECT_FALSE(ParseByteSize("-1").ok());
}

}  // namespace
}  // namespace kvt::daemon
