// kvtierd's `cluster:` config section.
#include <gtest/gtest.h>

#include "daemon/config.h"

namespace kvt::daemon {
namespace {

DaemonConfig Base() {
  DaemonConfig c = DefaultDaemonConfig();
  c.data_dir = "/tmp/x";
  return c;
}

TEST(ClusterConfigTest, ParsesEveryKey) {
  auto c = ParseDaemonConfig(
      "cluster:\n  nodes: [10.0.0.1:7000, \"10.0.0.2:7000\"]\n  piece_bytes: 2MiB\n  ttl_s: 3600\n"
      "  password: pw\n  username: kvt\n  keyspace: prod-a\n  deadline_ms: 750\n",
      Base());
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->cluster.has_value());
  EXPECT_EQ(c->cluster->client.nodes, (std::vector<std::string>{"10.0.0.1:7000", "10.0.0.2:7000"}));
  EXPECT_EQ(c->cluster->piece_bytes, 2u << 20);
  EXPECT_EQ(c->cluster->ttl_s, 3600u);
  EXPECT_EQ(c->cluster->client.password, "pw");
  EXPECT_EQ(c->cluster->client.username, "kvt");
  EXPECT_EQ(c->cluster->keyspace, "prod-a");
  EXPECT_EQ(c->cluster->client.deadline.count(), 750);
  EXPECT_TRUE(c->Validate().ok()) << c->Validate();
  auto none = ParseDaemonConfig("workers: 2\n", Base());
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->cluster.has_value());
}

TEST(ClusterConfigTest, BadValuesNameTheKey) {
  struct Case {
    const char* yaml;
    const char* needle;
  } cases[] = {
      {"cluster:\n  piece_bytes: 4MiB\n", "cluster.nodes"},
      {"cluster:\n  nodes: [a:1]\n  pieces: 4\n", "unknown key 'pieces'"},
      {"cluster:\n  nodes: [a:1]\n  piece_bytes: lots\n", "cluster.piece_bytes"},
      {"cluster:\n  nodes: [a:1]\n  ttl_s: -5\n", "cluster.ttl_s"},
      {"cluster:\n  nodes: [a:1]\n  deadline_ms: soon\n", "cluster.deadline_ms"},
      {"cluster:\n  nodes: [a:1]\n  password_file: /nonexistent/pw\n", "/nonexistent/pw"},
  };
  for (const auto& tc : cases) {
    auto c = ParseDaemonConfig(tc.yaml, Base());
    ASSERT_FALSE(c.ok()) << tc.yaml;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(c.status().message().find(tc.needle), std::string::npos) << c.status();
  }
  // Parsed but invalid: Validate names the field.
  const char* invalid[][2] = {{"cluster:\n  nodes: [nohost]\n", "nohost"},
                              {"cluster:\n  nodes: [a:1]\n  piece_bytes: 1KiB\n", "piece_bytes"},
                              {"cluster:\n  nodes: [a:1]\n  keyspace: \"a:b\"\n", "keyspace"},
                              {"cluster:\n  nodes: [a:1]\n  username: u\n", "username"}};
  for (const auto& tc : invalid) {
    auto c = ParseDaemonConfig(tc[0], Base());
    ASSERT_TRUE(c.ok()) << c.status();
    absl::Status s = c->Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << tc[0];
    EXPECT_NE(s.message().find(tc[1]), std::string::npos) << s;
  }
}

}  // namespace
}  // namespace kvt::daemon
