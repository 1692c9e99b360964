// The cluster tier's one name and its unknown chunk count (issue 21, item 7), seen from
// the kvtier CLI and /metrics of a kvtierd on a real 3-master Redis Cluster.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include "cli_test_util.h"
#include "daemon_harness.h"
#include "nlohmann/json.hpp"
#include "redis_cluster.h"

namespace kvt {
namespace {

using ::testing::HasSubstr;

TEST(ClusterCliTest, TheClusterTierIsRemoteEverywhereAndItsChunkCountIsUnknown) {
  testing::TempDir dir;
  testing::RedisProcs redis(dir.path() + "/redis");
  std::filesystem::create_directories(dir.path() + "/redis");
  std::string error;
  ASSERT_TRUE(redis.StartCluster(3, &error)) << error;
  testing::Daemon d(dir.path(), absl::StrFormat("cluster:\n  nodes: [\"%s\"]\n  keyspace: cli\n",
                                                redis.Seeds()[0]));
  ASSERT_TRUE(d.Start(&error)) << error;
  auto chain = testing::MakeChain(testing::TestNamespace("cluster-model"), 2, 16, 5);
  auto c = testing::Connect(d.target());
  ASSERT_NE(c, nullptr);
  for (const auto& r : chain.records) ASSERT_TRUE(c->Put(r).ok()) << d.Log();

  clitest::RunResult json = clitest::Run(KVTIER_BIN, {"--daemon", d.target(), "stats", "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json s = nlohmann::json::parse(json.out);
  ASSERT_EQ(s["tiers"].size(), 3u) << json.out;
  EXPECT_EQ(s["tiers"][2]["name"], "remote");
  EXPECT_EQ(s["tiers"][2]["kind"], "remote");
  EXPECT_TRUE(s["tiers"][2]["chunks"].is_null()) << s["tiers"][2];  // unknown, not 0
  EXPECT_EQ(s["tiers"][0]["chunks"], 2);                            // host: counted

  clitest::RunResult table = clitest::Run(KVTIER_BIN, {"--daemon", d.target(), "stats"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  auto rows = clitest::TableRows(table.out, "TIER");
  ASSERT_EQ(rows.size(), 3u) << table.out;
  EXPECT_EQ(rows[2][0], "remote");
  EXPECT_EQ(rows[2][4], "?");

  clitest::RunResult ls =
      clitest::Run(KVTIER_BIN, {"--daemon", d.target(), "ls", "--tier", "remote", "--json"});
  EXPECT_EQ(ls.exit_code, 0) << ls.err;

  httplib::Client http("127.0.0.1", d.metrics_port());
  auto res = http.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_THAT(res->body, HasSubstr("kvtier_tier_hits_total{tier=\"remote\"}"));
  EXPECT_THAT(res->body, HasSubstr("kvtier_tier_chunks{tier=\"host\"} 2\n"));
  EXPECT_EQ(res->body.find("kvtier_tier_chunks{tier=\"remote\"}"), std::string::npos) << res->body;
}

}  // namespace
}  // namespace kvt
